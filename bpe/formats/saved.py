"""The directory `Tokenizer.save` writes: every format, then the manifest. Read back, each file is
parsed by its format's own reader and checked against the manifest's SHA-256 and against the other
files, so a changed file is named rather than loaded as another tokenizer."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from bpe.errors import ExportError
from bpe.formats import gpt2, hf_json, manifest_json, tiktoken_ranks, transformers_config
from bpe.formats.files import MAX_FILE_BYTES, check_unique, limit_text
from bpe.formats.gpt2 import MERGES_FILE, VOCAB_FILE, merges_with_places, read_vocab_json
from bpe.formats.hf_json import HF_FILE
from bpe.formats.manifest_json import MANIFEST_FILE
from bpe.formats.rank_order import ids_order_problem, rank_order_break
from bpe.formats.record import TokenizerRecord
from bpe.formats.spelling import bytes_to_unicode, merge_ids, spell, unspell
from bpe.formats.tiktoken_ranks import TIKTOKEN_FILE, read_ranks, tokens_by_rank
from bpe.manifest import Manifest
from bpe.pretokenize import Pretokenizer


def write(directory: Path, record: TokenizerRecord, description: Manifest | None = None) -> None:
    """Write every format of `record` into an existing directory (tiktoken ranks only where tiktoken
    encodes as the merges do: `bpe.formats.rank_order`); with `description` (the
    manifest: how it was trained, with its `tokenizer` section), the manifest last, recording the
    export time (if it records time at all) and each file's SHA-256."""
    started = time.perf_counter()
    vocab = record.vocab()
    check_unique(vocab)
    check_fits(vocab, record.merges)
    gpt2.write(directory, record)
    hf_json.write(directory / HF_FILE, record)
    transformers_config.write(directory, record)
    ids = record.id_list()
    if ids_order_problem(ids[256:] if ids else []) is None and rank_order_break(vocab, record.merges) is None:
        tiktoken_ranks.write(directory / TIKTOKEN_FILE, record)  # else tiktoken would encode otherwise: none
    if description is None:
        return
    if description.seconds is not None:
        description.seconds.add_export(time.perf_counter() - started)
    manifest_json.write(directory, description)


def check_fits(vocab: Sequence[bytes], merges: Sequence[tuple[int, int]]) -> None:
    """Refuse, before anything is written, a tokenizer whose tokenizer.json (its largest file: every
    token spelled, then every merge's two parts) would hold more than any tokenizer file may, as
    tokens of millions of bytes make it: it could not be read back, here or by another tool. The
    error names `max_token_length`, the setting that keeps tokens short."""
    wide = bytes(b for b, char in bytes_to_unicode().items() if len(char.encode()) > 1)
    spelled = [len(token) + len(token) - len(token.translate(None, wide)) for token in vocab]
    size = sum(spelled) + sum(spelled[a] + spelled[b] for a, b in merges)
    if size > MAX_FILE_BYTES:
        raise ExportError(
            lambda s: (
                f"this tokenizer's tokenizer.json would hold about {size >> 20:,} MiB (its longest token is "
                f"{max(map(len, vocab)):,} bytes), more than {limit_text()}, so nothing could read it back; "
                f"cap tokens with {s.max_token_length}"
            ),
            parameter="max_token_length",
        )


def read(directory: Path, pattern: str | None = None) -> TokenizerRecord:
    """The tokenizer in a directory `save` wrote (its manifest.json present), after every check:
    the files' SHA-256 against the manifest's, the files against each other, the manifest's counts
    against the files. `pattern` replaces the recorded one."""
    manifest_path = directory / MANIFEST_FILE
    described = manifest_json.read(manifest_path)
    special_tokens, stored_pattern, roles = manifest_json.read_tokenizer_section(manifest_path, described)
    if described.present("files"):
        manifest_json.check_digests(directory, described.files)
    info = described.tokenizer
    kept_ids = None
    if info.ids == "kept":  # a base tokenizer's ids: read as GPT-2's files are
        vocab, pairs, kept_ids = read_kept_ids(directory, special_tokens)
    else:
        vocab, pairs = read_checked(directory, special_tokens)
    manifest_json.check_counts(manifest_path, info, vocab, special_tokens, kept_ids)
    if pattern is not None:
        Pretokenizer(pattern)  # the caller's pattern: a bad one is a SettingsError naming `pattern`
    return TokenizerRecord(
        pairs,
        pattern or stored_pattern,
        special_tokens,
        ids=kept_ids,
        special_token_roles=roles,
        model_max_length=info.model_max_length,
        source=str(manifest_path),
        manifest=described,
    )


def read_checked(directory: Path, special_tokens: dict[str, int]) -> tuple[list[bytes], list[tuple[int, int]]]:
    """(token bytes by id, merges as id pairs) of a directory written by `save`, after checking that
    merges.txt, vocab.json and, when present, tokenizer.json and tokenizer.tiktoken all describe the
    same tokenizer. When they do not, the file that differs from the majority is named; with no
    majority (only vocab.json and merges.txt, say) both are."""
    made, pairs = merge_ids(*merges_with_places(directory / MERGES_FILE))
    readings = {
        MERGES_FILE: made,
        VOCAB_FILE: vocab_by_id(read_vocab_json(directory / VOCAB_FILE), special_tokens, str(directory / VOCAB_FILE)),
    }
    hf_pairs = None
    if (directory / HF_FILE).exists():
        readings[HF_FILE], hf_pairs = read_saved_tokenizer_json(directory / HF_FILE, special_tokens)
    if (directory / TIKTOKEN_FILE).exists():
        readings[TIKTOKEN_FILE] = tokens_by_rank(read_ranks(directory / TIKTOKEN_FILE))
    groups: dict[tuple[bytes, ...], list[str]] = {}
    for name, vocab in readings.items():
        groups.setdefault(tuple(vocab), []).append(name)
    if len(groups) > 1:
        ranked = sorted(groups.values(), key=len, reverse=True)
        agree = ranked[0]
        odd = next(name for name in readings if name not in agree)
        detail = difference(odd, readings[odd], agree[0], readings[agree[0]])
        if len(agree) > len(ranked[1]):
            raise ExportError(
                f"{directory / odd}: disagrees with {', '.join(agree)} ({detail}); it was changed after it was written"
            )
        raise ExportError(
            f"{directory}: {odd} and {agree[0]} disagree ({detail}); one of them was changed after it was written"
        )
    if hf_pairs is not None and hf_pairs != pairs:
        k = next(k for k, (x, y) in enumerate(zip(pairs, hf_pairs)) if x != y)
        raise ExportError(f"{directory}: {MERGES_FILE} and {HF_FILE} disagree on how merge {k} splits its token")
    return made, pairs


def read_kept_ids(
    directory: Path, special_tokens: dict[str, int]
) -> tuple[list[bytes], list[tuple[int, int]], dict[int, int]]:
    """(token bytes, merges, our id -> the file's id) of a saved directory whose ids are a base
    tokenizer's: vocab.json + merges.txt read as GPT-2's files, tokenizer.json checked against them."""
    from_files = gpt2.read(directory, "gpt2", special_tokens)
    if from_files.special_tokens != special_tokens:
        raise ExportError(f"{directory / VOCAB_FILE}: its special tokens are not those {MANIFEST_FILE} records")
    if (directory / HF_FILE).exists():
        from_json = hf_json.read(directory / HF_FILE)
        same = (from_json.merges, from_json.ids, from_json.special_tokens) == (
            from_files.merges,
            from_files.ids,
            from_files.special_tokens,
        )
        if not same:
            raise ExportError(
                f"{directory / HF_FILE}: disagrees with {VOCAB_FILE} and "
                f"{MERGES_FILE}; it was changed after it was written"
            )
    vocab = [bytes([b]) for b in range(256)]
    for a, b in from_files.merges:
        vocab.append(vocab[a] + vocab[b])
    kept_ids = from_files.ids if from_files.ids is not None else {i: i for i in range(len(vocab))}
    return vocab, from_files.merges, kept_ids


def read_saved_tokenizer_json(path: Path, special_tokens: dict[str, int]) -> tuple[list[bytes], list[tuple[int, int]]]:
    """(token bytes by id, merges as id pairs) of a `tokenizer.json` written by `save`, read with
    `read_document`; its added tokens must be `special_tokens`, its ordinary tokens must have
    ids 0 to n-1, and its merges must make exactly its vocab."""
    vocab_spelled, merges, added, _ = hf_json.read_document(path)
    if added != special_tokens:
        raise ExportError(f"{path}: its added_tokens are not the special tokens {MANIFEST_FILE} records")
    vocab = vocab_by_id(vocab_spelled, special_tokens, f"{path}: model.vocab")
    made, pairs = merge_ids(merges, lambda k: f"{path}: model.merges[{k}]")
    if made != vocab:
        raise ExportError(f"{path}: its merges and its vocab disagree ({difference('merges', made, 'vocab', vocab)})")
    return vocab, pairs


def vocab_by_id(entries: dict[str, int], special_tokens: dict[str, int], where: str) -> list[bytes]:
    """The ordinary tokens' bytes by id from a vocab.json-style mapping, which must hold exactly
    `special_tokens` with their ids besides ordinary tokens with ids 0 to n-1 (as `save` writes)."""
    ordinary: dict[int, bytes] = {}
    for spelling, token_id in entries.items():
        if spelling in special_tokens:
            if token_id != special_tokens[spelling]:
                raise ExportError(
                    f"{where}: special token {spelling!r} has id {token_id}, {MANIFEST_FILE} records "
                    f"{special_tokens[spelling]}"
                )
            continue
        try:
            token = unspell(spelling)
        except ExportError as exc:
            raise ExportError(f"{where}: {exc}") from None
        if token_id in ordinary:
            raise ExportError(f"{where}: id {token_id} is given to both {spell(ordinary[token_id])!r} and {spelling!r}")
        ordinary[token_id] = token
    missing = [token for token in special_tokens if token not in entries]
    if missing:
        raise ExportError(f"{where}: lacks special token {missing[0]!r}, which {MANIFEST_FILE} records")
    n = len(ordinary)
    outside = sorted(set(ordinary) - set(range(n)))
    if outside:
        raise ExportError(
            f"{where}: token {spell(ordinary[outside[0]])!r} has id {outside[0]}, but the {n} ordinary tokens must "
            f"have ids 0 to {n - 1}"
        )
    return [ordinary[i] for i in range(n)]


def difference(name_a: str, a: Sequence[bytes], name_b: str, b: Sequence[bytes]) -> str:
    """Where two vocabularies first differ, in words: "token 300 is b'th' in A, b'he' in B"."""
    for token_id, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"token {token_id} is {x!r} in {name_a}, {y!r} in {name_b}"
    return f"{name_a} holds {len(a)} tokens, {name_b} {len(b)}"

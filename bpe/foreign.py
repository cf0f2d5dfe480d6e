"""Tokenizers other tools made, read as `Tokenizer`s that give those tools' ids: a Hugging Face
byte-level BPE tokenizer.json (with the roles of a tokenizer_config.json beside it), GPT-2's
vocab.json + merges.txt, and tiktoken ranks (a .tiktoken file, or a `tiktoken.Encoding`'s).

Each reader returns a `TokenizerRecord`, the arguments of `Tokenizer(...)`, which `Tokenizer.load`
and `Tokenizer.from_tiktoken` build from (this module knows files, not the class). A file in a
form the tokenizer cannot reproduce exactly (a WordPiece tokenizer.json, a normalizer, ...) raises
ExportError naming the file and what is not supported. Each file is parsed by its format's one
reader in `bpe.export`, which also reads back the directories `save` writes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bpe import export
from bpe.errors import ExportError, SettingsError
from bpe.pretokenize import NAMED_PATTERNS, Pretokenizer


@dataclass
class TokenizerRecord:
    """What a tokenizer file holds, as `Tokenizer(merges, pattern, special_tokens, ids=...,
    special_token_roles=..., model_max_length=...)` takes it. With `source`, a setting the file
    gives that the tokenizer refuses is an ExportError naming `source`."""

    merges: list[tuple[int, int]]
    pattern: str
    special_tokens: dict[str, int]
    ids: dict[int, int] | None = None  # our id -> the file's id, where the file numbers tokens otherwise
    special_token_roles: dict[str, str] | None = None
    model_max_length: int | None = None
    source: str | None = None


def load_file(
    path: Path, pattern: str | None, special_tokens: Sequence[str] | dict[str, int] | None
) -> TokenizerRecord:
    """A tokenizer file made elsewhere: a Hugging Face tokenizer.json or tiktoken ranks."""
    if path.suffix == ".tiktoken":
        if pattern is None:
            raise ExportError(
                f"{path}: a tiktoken ranks file records no split pattern; give it as pattern "
                f"({', '.join(NAMED_PATTERNS)} or a regex; --pattern in the command)"
            )
        ranks = export.read_tiktoken_ranks(path)
        if special_tokens is None:
            specials = {}
        elif isinstance(special_tokens, dict):
            specials = dict(special_tokens)
        else:
            specials = {t: max(ranks.values()) + 1 + i for i, t in enumerate(special_tokens)}
        Pretokenizer(pattern)  # the caller's pattern: a bad one is a SettingsError naming `pattern`
        return from_ranks(ranks, pattern, specials, str(path))
    if path.suffix == ".json":
        only_for_tiktoken(special_tokens, path)
        if pattern is not None:
            raise SettingsError(
                f"pattern: {path} records its own split regex; give pattern only for vocab.json + merges.txt or "
                "a .tiktoken file",
                parameter="pattern",
            )
        return from_hf_json(path)
    raise ExportError(f"{path}: not a tokenizer file this can read (a tokenizer.json, a .tiktoken file, or a "
                      "directory)")  # fmt: skip


def only_for_tiktoken(special_tokens: object, path: Path) -> None:
    """Refuse `special_tokens` for a file that records its own: only a tiktoken ranks file does not."""
    if special_tokens is not None:
        raise SettingsError(
            f"special_tokens: {path} records its special tokens; special_tokens is only for a .tiktoken file",
            parameter="special_tokens",
        )


# -- Hugging Face tokenizer.json -------------------------------------------------------------------


def from_hf_json(path: Path) -> TokenizerRecord:
    """A Hugging Face byte-level BPE tokenizer.json made by any tool, with its own ids; the roles
    come from a tokenizer_config.json beside it, if there is one."""
    vocab, merges, added, pattern = export.read_tokenizer_json(path)
    for text, token_id in added.items():
        if text in vocab and vocab[text] != token_id:
            raise ExportError(f"{path}: added token {text!r} has id {token_id}, model.vocab gives it {vocab[text]}")
    ordinary = {spelling: token_id for spelling, token_id in vocab.items() if spelling not in added}
    record = from_spelled(ordinary, merges, lambda k: f"{path}: model.merges[{k}]", added, pattern,
                       f"{path}: model.vocab", orphans_are_special=False)  # fmt: skip
    config = path.parent / export.CONFIG_FILE
    if config.exists():
        record.special_token_roles = roles_in_transformers_config(config, record.special_tokens)
        record.model_max_length = max_length_in_transformers_config(config)
    return record


def roles_in_transformers_config(path: Path, special_tokens: dict[str, int]) -> dict[str, str]:
    """The roles a tokenizer_config.json made elsewhere gives (`"eos_token": "</s>"`, or an added
    token object with a `content`), keeping those whose token is one of `special_tokens`."""
    doc = export.read_json(path)
    roles: dict[str, str] = {}
    if not isinstance(doc, dict):
        return roles
    for role in export.ROLES:
        value = doc.get(f"{role}_token")
        token = value.get("content") if isinstance(value, dict) else value
        if isinstance(token, str) and token in special_tokens:
            roles[role] = token
    return roles


def max_length_in_transformers_config(path: Path) -> int | None:
    """The `model_max_length` a tokenizer_config.json gives, or None where it gives none or
    transformers' stand-in for none (int(1e30))."""
    doc = export.read_json(path)
    value = doc.get("model_max_length") if isinstance(doc, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 10**29:
        return value
    return None


# -- GPT-2's vocab.json and merges.txt -------------------------------------------------------------


def from_gpt2_files(directory: Path, pattern: str) -> TokenizerRecord:
    """GPT-2-style files from another tool: ids are the file's; tokens no merge makes are special."""
    vocab_path, merges_path = directory / export.VOCAB_FILE, directory / export.MERGES_FILE
    vocab = export.read_vocab_json(vocab_path)
    merges, line_numbers = export.read_merges(merges_path)
    return from_spelled(vocab, merges, lambda k: f"{merges_path}:{line_numbers[k]}", {}, pattern,
                        str(vocab_path), orphans_are_special=True, lacks=vocab_path.name)  # fmt: skip


def from_spelled(
    vocab: dict[str, int],
    merges: list[tuple[str, str]],
    where: Callable[[int], str],
    special_tokens: dict[str, int],
    pattern: str,
    source: str,
    *,
    orphans_are_special: bool,
    lacks: str = "the vocab",
) -> TokenizerRecord:
    """A tokenizer from a vocabulary in GPT-2's spelling (spelling -> the file's id) and spelled
    merges, keeping the file's ids. Tokens no merge makes (other than the bytes) are special
    tokens with `orphans_are_special` (GPT-2's vocab.json lists <|endoftext|> so), an error
    otherwise. Errors name `source` (the vocabulary) or `where(k)` (merge k)."""
    file_id_of_bytes: dict[bytes, int] = {}
    specials = dict(special_tokens)
    for spelling, file_id in vocab.items():
        try:
            file_id_of_bytes[export.unspell(spelling)] = file_id
        except ExportError:
            if not orphans_are_special:
                raise ExportError(f"{source}: token {spelling!r} is not spelled with GPT-2's byte characters, so "
                                  "this is not a byte-level BPE vocabulary") from None  # fmt: skip
            specials[spelling] = file_id
    missing = [b for b in range(256) if bytes([b]) not in file_id_of_bytes]
    if missing:
        raise ExportError(f"{source}: lacks the byte token {export.spell(bytes([missing[0]]))!r}")
    vocab_bytes, merge_ids = export.merge_ids(merges, where, unique=False)
    ours: dict[int, int] = {}
    for internal, token in enumerate(vocab_bytes):
        if token not in file_id_of_bytes:
            raise ExportError(f"{where(internal - 256)}: makes {export.spell(token)!r}, which {lacks} lacks")
        ours[internal] = file_id_of_bytes[token]
    made = set(vocab_bytes)
    for token, file_id in file_id_of_bytes.items():
        if token not in made:
            if not orphans_are_special:
                raise ExportError(f"{source}: token {export.spell(token)!r} (id {file_id}) is made by no merge "
                                  "and is not a byte, which a byte-level BPE cannot produce")  # fmt: skip
            specials[token.decode("utf-8", errors="replace")] = file_id
    ids_of_tokens = [file_id for token, file_id in file_id_of_bytes.items() if token in made]
    ids_of_tokens += list(specials.values())
    if len(set(ids_of_tokens)) != len(ids_of_tokens):
        raise ExportError(f"{source}: two different tokens have the same id")
    specials = dict(sorted(specials.items(), key=lambda item: item[1]))
    n = len(vocab_bytes)
    natural = all(ours[i] == i for i in range(n)) and list(specials.values()) == list(range(n, n + len(specials)))
    return TokenizerRecord(merge_ids, pattern, specials, ids=None if natural else ours)


# -- tiktoken ranks --------------------------------------------------------------------------------


def from_ranks(
    ranks: Mapping[bytes, int], pattern: str, special_tokens: dict[str, int], source: str
) -> TokenizerRecord:
    """A tokenizer from tiktoken ranks (token bytes -> rank = id); errors name `source`."""
    missing = [b for b in range(256) if bytes([b]) not in ranks]
    if missing:
        raise ExportError(f"{source}: lacks the byte token {bytes([missing[0]])!r} (a byte-level BPE has all 256)")
    taken = set(ranks.values())
    clash = next((t for t, i in special_tokens.items() if i in taken), None)
    if clash is not None:
        raise ExportError(f"{source}: special token {clash!r} has id {special_tokens[clash]}, which a token holds")
    internal_of = {bytes([b]): b for b in range(256)}
    ids = {b: int(ranks[bytes([b])]) for b in range(256)}
    merges: list[tuple[int, int]] = []
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        if len(token) == 1:
            continue
        parts = merge_parts(ranks, token, rank)
        if len(parts) != 2:
            raise ExportError(f"{source}: token {token!r} (rank {rank}) is not the merge of two tokens of lower "
                              "rank, so these are not BPE ranks")  # fmt: skip
        internal = 256 + len(merges)
        merges.append((internal_of[parts[0]], internal_of[parts[1]]))
        internal_of[token] = internal
        ids[internal] = int(rank)
    if pattern == export.WHITESPACE_WORD:  # how to_tiktoken and save spell the whitespace pattern
        pattern = "whitespace"
    specials = dict(sorted(special_tokens.items(), key=lambda item: item[1]))
    natural = all(ids[i] == i for i in ids) and list(specials.values()) == list(
        range(len(ids), len(ids) + len(specials))
    )
    return TokenizerRecord(merges, pattern, specials, ids=None if natural else ids, source=source)


def merge_parts(ranks: Mapping[bytes, int], token: bytes, max_rank: int) -> list[bytes]:
    """The pieces tiktoken's merging makes of `token`'s bytes using only ranks below `max_rank`:
    for a BPE ranks table, the two tokens whose merge is `token`.

    >>> merge_parts({b"a": 0, b"b": 1, b"c": 2, b"ab": 3, b"abc": 4}, b"abc", 4)
    [b'ab', b'c']
    """
    parts = [token[i : i + 1] for i in range(len(token))]
    while len(parts) > 1:
        best, best_rank = -1, max_rank
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1])
            if rank is not None and rank < best_rank:
                best, best_rank = i, rank
        if best < 0:
            break
        parts[best : best + 2] = [parts[best] + parts[best + 1]]
    return parts

"""Tokenizer files, one reader and one writer per format: GPT-2's `vocab.json` + `merges.txt`,
Hugging Face's `tokenizer.json` (with transformers' `tokenizer_config.json` and
`special_tokens_map.json`), tiktoken ranks, and the directory `save` writes (checked file against
file and against its manifest). A reader takes any tool's file of its format; `bpe.foreign` turns
what other tools' files hold into the records `Tokenizer` builds from.

GPT-2's formats spell every byte as a printable character (`bytes_to_unicode`): the space byte
is `Ġ`, so b" the" is spelled "Ġthe".
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path

from bpe.errors import ExportError
from bpe.pretokenize import NAMED_PATTERNS

MERGES_FILE = "merges.txt"
VOCAB_FILE = "vocab.json"
HF_FILE = "tokenizer.json"
TIKTOKEN_FILE = "tokenizer.tiktoken"
# What `transformers.AutoTokenizer.from_pretrained(dir)` reads beside tokenizer.json: the class to
# build and which special token plays which role (bos, eos, pad, unk).
CONFIG_FILE = "tokenizer_config.json"
SPECIAL_MAP_FILE = "special_tokens_map.json"
MANIFEST_FILE = "manifest.json"
TOKENIZER_FILES = (MERGES_FILE, VOCAB_FILE, HF_FILE, TIKTOKEN_FILE, CONFIG_FILE, SPECIAL_MAP_FILE, MANIFEST_FILE)
# The roles transformers gives special tokens, in the order `train` adds role tokens it was not given.
ROLES = ("bos", "eos", "pad", "unk")


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's table: printable Latin-1 bytes stand for themselves, the others map to U+0100 on."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(printable, chars)}


@lru_cache(maxsize=1)
def unicode_to_bytes() -> dict[str, int]:
    return {c: b for b, c in bytes_to_unicode().items()}


def spell(token: bytes) -> str:
    """b' the' -> 'Ġthe'."""
    table = bytes_to_unicode()
    return "".join(table[b] for b in token)


def unspell(text: str) -> bytes:
    """'Ġthe' -> b' the'."""
    table = unicode_to_bytes()
    try:
        return bytes(table[c] for c in text)
    except KeyError as exc:
        raise ExportError(f"{text!r} is not spelled with GPT-2's byte characters ({exc})") from None


def check_unique(vocab: Sequence[bytes]) -> None:
    """The formats key tokens by their bytes: two tokens with the same bytes cannot be written."""
    seen: dict[bytes, int] = {}
    for token_id, token in enumerate(vocab):
        if token in seen:
            raise ExportError(
                f"tokens {seen[token]} and {token_id} are both {token!r}: vocab.json, tokenizer.json and "
                "tiktoken ranks need distinct tokens"
            )
        seen[token] = token_id


def write_merges(path: Path, vocab: Sequence[bytes], merges: Sequence[tuple[int, int]]) -> None:
    lines = ["#version: 0.2"] + [f"{spell(vocab[a])} {spell(vocab[b])}" for a, b in merges]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def vocab_json(
    vocab: Sequence[bytes], special_tokens: dict[str, int], ids: Sequence[int] | None = None
) -> dict[str, int]:
    """Token spelling -> id (token i's id is `ids[i]`, or i), in order of id; special tokens keep
    their literal text."""
    order = range(len(vocab)) if ids is None else sorted(range(len(vocab)), key=lambda i: ids[i])
    entries = {spell(vocab[i]): i if ids is None else int(ids[i]) for i in order}
    for text, token_id in special_tokens.items():
        if text in entries:
            raise ExportError(f"special token {text!r} is spelled like token {entries[text]}")
        entries[text] = token_id
    return entries


def write_vocab(
    path: Path, vocab: Sequence[bytes], special_tokens: dict[str, int], ids: Sequence[int] | None = None
) -> None:
    path.write_text(
        json.dumps(vocab_json(vocab, special_tokens, ids), ensure_ascii=False, indent=0) + "\n", encoding="utf-8"
    )


def write_tiktoken(path: Path, vocab: Sequence[bytes], ids: Sequence[int] | None = None) -> None:
    """One `base64(token) rank` line per token, in order of rank; rank = token id (`ids[i]`, or i)."""
    ranked = enumerate(vocab) if ids is None else sorted(((int(ids[i]), t) for i, t in enumerate(vocab)))
    lines = [f"{base64.b64encode(token).decode('ascii')} {rank}" for rank, token in ranked]
    path.write_text("\n".join(lines) + "\n", encoding="ascii")


def hf_split_regex(pattern_name: str, pattern_regex: str) -> tuple[str, str, bool]:
    """(regex, behavior, invert) of the Hugging Face Split pre-tokenizer for a pattern."""
    if pattern_name == "whitespace":
        # str.split(): drop runs of whitespace. Spelled out so every regex engine agrees.
        return WHITESPACE_RUN, "Removed", False
    if pattern_name == "cl100k":
        # Oniguruma reads tiktoken's possessive `{1,3}+` as "one or more groups of 1-3 digits";
        # the plain interval means the same here, since nothing follows it in its alternative.
        return pattern_regex.replace(r"\p{N}{1,3}+", r"\p{N}{1,3}"), "Isolated", False
    return pattern_regex, "Isolated", False


# The characters str.split() splits on, as one class (regex's \s and \x1c-\x1f). Code points above
# ASCII are written \uHHHH: Oniguruma (Hugging Face) reads \xHH as a byte, so \xa0 would never match
# U+00A0, whose UTF-8 is two bytes.
WHITESPACE_CHARS = (
    "\\t\\n\\x0b\\x0c\\r\\x1c\\x1d\\x1e\\x1f \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
)
WHITESPACE_RUN = f"[{WHITESPACE_CHARS}]+"
WHITESPACE_WORD = f"[^{WHITESPACE_CHARS}]+"


def tokenizer_json(
    vocab: Sequence[bytes],
    merges: Sequence[tuple[int, int]],
    special_tokens: dict[str, int],
    pattern_name: str,
    pattern_regex: str,
    ids: Sequence[int] | None = None,
) -> dict:
    """The Hugging Face `tokenizer.json` document for a byte-level BPE tokenizer (token i's id is
    `ids[i]`, or i)."""
    split_regex, behavior, invert = hf_split_regex(pattern_name, pattern_regex)
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": token_id,
                "content": text,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for text, token_id in special_tokens.items()
        ],
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": split_regex}, "behavior": behavior, "invert": invert},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
            ],
        },
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab_json(vocab, special_tokens, ids),
            "merges": [[spell(vocab[a]), spell(vocab[b])] for a, b in merges],
        },
    }


def write_tokenizer_json(path: Path, *args) -> None:
    path.write_text(json.dumps(tokenizer_json(*args), ensure_ascii=False) + "\n", encoding="utf-8")


# -- transformers: tokenizer_config.json and special_tokens_map.json -----------------------------


def special_tokens_map(special_tokens: dict[str, int], roles: dict[str, str]) -> dict:
    """special_tokens_map.json: `{"eos_token": "<|endoftext|>", ...}` for each role given, and the
    special tokens without a role as `additional_special_tokens` (so transformers counts them as
    special: `decode(ids, skip_special_tokens=True)` drops them)."""
    mapping: dict = {f"{role}_token": roles[role] for role in ROLES if role in roles}
    others = [token for token in special_tokens if token not in roles.values()]
    if others:
        mapping["additional_special_tokens"] = others
    return mapping


# How tokenizer.json's added_tokens describe a special token: matched as its exact text.
ADDED_TOKEN_FLAGS = {"lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True}


def transformers_config(
    special_tokens: dict[str, int], roles: dict[str, str], model_max_length: int | None = None
) -> dict:
    """tokenizer_config.json: a `PreTrainedTokenizerFast` over tokenizer.json, with the special
    tokens' roles. `clean_up_tokenization_spaces` is off so that decoding gives the text back
    exactly (transformers would otherwise drop the space in " ." and "n 't"); the model inputs are
    the ids and the attention mask (no token type ids: a byte-level BPE has one segment).
    `model_max_length`, when set, is what `truncation=True` cuts to."""
    length = {} if model_max_length is None else {"model_max_length": model_max_length}
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "clean_up_tokenization_spaces": False,
        "model_input_names": ["input_ids", "attention_mask"],
        **length,
        **special_tokens_map(special_tokens, roles),
        "added_tokens_decoder": {
            str(token_id): {**ADDED_TOKEN_FLAGS, "content": text} for text, token_id in special_tokens.items()
        },
    }


def write_transformers_files(
    directory: Path, special_tokens: dict[str, int], roles: dict[str, str], model_max_length: int | None = None
) -> None:
    """Write tokenizer_config.json and special_tokens_map.json beside tokenizer.json."""
    for name, doc in ((CONFIG_FILE, transformers_config(special_tokens, roles, model_max_length)),
                      (SPECIAL_MAP_FILE, special_tokens_map(special_tokens, roles))):  # fmt: skip
        (directory / name).write_text(json.dumps(doc, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


# -- reading, with one-line errors naming the file ----------------------------------------------


def read_text(path: Path) -> str:
    """The UTF-8 text of a tokenizer file; a missing, unreadable or non-UTF-8 file raises ExportError."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ExportError(f"{path}: missing") from None
    except OSError as exc:
        raise ExportError(f"{path}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise ExportError(f"{path}: not UTF-8 text (byte {exc.start}); the file is damaged") from None


def read_json(path: Path) -> object:
    """A JSON file's document; invalid JSON (a truncated file, say) raises ExportError naming where."""
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise ExportError(
            f"{path}: not valid JSON ({exc.msg}: line {exc.lineno}, column {exc.colno}); the file is damaged or "
            "truncated"
        ) from None


def read_vocab_json(path: Path) -> dict[str, int]:
    """vocab.json as token spelling -> id (a JSON object of integers that `check_ids` takes, or ExportError)."""
    vocab = read_json(path)
    if not isinstance(vocab, dict):
        raise ExportError(f"{path}: expected a JSON object of token -> id, got {type(vocab).__name__}")
    for spelling, token_id in vocab.items():
        if type(token_id) is not int:
            raise ExportError(f"{path}: token {spelling!r} has id {token_id!r}, not an integer")
    check_ids(str(path), vocab)
    return vocab


# Token ids are written as uint32 (.npy, .bin) and are tiktoken's u32 ranks. Tables indexed by id
# (id -> token) have the largest id + 1 entries, so ids must also be dense: at most twice the tokens
# plus 2**20 (an 8 MB table at worst), which leaves room for gaps and special tokens set far apart.
ID_LIMIT = 1 << 32
SPARSE_IDS = 1 << 20


def max_id(tokens: int) -> int:
    """The largest id a vocabulary of `tokens` tokens may give."""
    return min(ID_LIMIT - 1, 2 * tokens + SPARSE_IDS - 1)


def id_problem(token: str | bytes, token_id: int, tokens: int, kind: str = "id") -> str | None:
    """Why `token_id` cannot be `token`'s id in a vocabulary of `tokens` tokens, or None."""
    if not 0 <= token_id < ID_LIMIT:
        return f"token {token!r} has {kind} {token_id}, outside 0 to {ID_LIMIT - 1} (ids are unsigned 32-bit)"
    if token_id > max_id(tokens):
        return (f"token {token!r} has {kind} {token_id}, too sparse for {tokens} tokens (ids may go up to "
                f"{max_id(tokens)}: twice the tokens plus {SPARSE_IDS})")  # fmt: skip
    return None


def check_ids(where: str, ids: dict[str, int] | dict[bytes, int], tokens: int | None = None) -> None:
    """Raise ExportError naming `where` and the first token whose id `id_problem` refuses; `tokens`
    is the vocabulary's size (the number of `ids` unless given)."""
    tokens = len(ids) if tokens is None else tokens
    for token, token_id in ids.items():
        problem = id_problem(token, token_id, tokens)
        if problem is not None:
            raise ExportError(f"{where}: {problem}")


def read_merges(path: Path) -> tuple[list[tuple[str, str]], list[int]]:
    """merges.txt as pairs of spellings, with the line number of each."""
    merges, line_numbers = [], []
    for line_no, line in enumerate(read_text(path).splitlines(), start=1):
        if line_no == 1 and line.startswith("#version"):
            continue
        if not line.strip():
            continue
        parts = line.split(" ")
        if len(parts) != 2:
            raise ExportError(f"{path}:{line_no}: expected two tokens separated by a space, got {len(parts)}")
        merges.append((parts[0], parts[1]))
        line_numbers.append(line_no)
    return merges, line_numbers


def merge_ids(
    merges: Sequence[tuple[str, str]], where: Callable[[int], str], *, unique: bool = True
) -> tuple[list[bytes], list[tuple[int, int]]]:
    """(token bytes by id, merges as id pairs) that spelled merges make, byte tokens first. Each
    merge must join tokens that exist before it; `unique` also refuses a merge making a token
    again (our files never do). Errors name `where(k)`, the place of merge k."""
    vocab = [bytes([b]) for b in range(256)]
    ids = {token: token_id for token_id, token in enumerate(vocab)}
    pairs = []
    for k, (a, b) in enumerate(merges):
        try:
            left, right = unspell(a), unspell(b)
        except ExportError as exc:
            raise ExportError(f"{where(k)}: {exc}") from None
        for token, spelling in ((left, a), (right, b)):
            if token not in ids:
                raise ExportError(f"{where(k)}: token {spelling!r} is not made by an earlier merge")
        merged = left + right
        if unique and merged in ids:
            raise ExportError(f"{where(k)}: makes {spell(merged)!r} again (it is already token {ids[merged]})")
        pairs.append((ids[left], ids[right]))
        ids.setdefault(merged, len(vocab))
        vocab.append(merged)
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


def hf_merges(path: Path, listed: list) -> list[tuple[str, str]]:
    """A tokenizer.json's `model.merges` as pairs of spellings: "a b" strings or ["a", "b"] lists."""
    merges = []
    for k, merge in enumerate(listed):
        parts = merge.split(" ") if isinstance(merge, str) else merge
        if not isinstance(parts, list) or len(parts) != 2 or not all(isinstance(p, str) for p in parts):
            raise ExportError(f"{path}: model.merges[{k}]: expected two tokens, got {merge!r}")
        merges.append((parts[0], parts[1]))
    return merges


def check_bpe_model(path: Path, model: dict) -> None:
    """A tokenizer.json's BPE model must hold a `vocab` object and a `merges` list: ExportError
    naming the file and the part missing otherwise."""
    for key, kind, called in (("vocab", dict, "an object"), ("merges", list, "a list")):
        if key not in model:
            raise ExportError(f"{path}: model has no {key!r}")
        if not isinstance(model[key], kind):
            raise ExportError(f"{path}: model {key!r} is not {called}")


def read_tokenizer_json(path: Path) -> tuple[dict[str, int], list[tuple[str, str]], dict[str, int], str]:
    """(vocab as spelling -> id, merges as pairs of spellings, added tokens as content -> id, split
    pattern) of a Hugging Face byte-level BPE `tokenizer.json` made by any tool. A model that is not
    BPE, a normalizer, a pre-tokenizer that is not byte-level, BPE options that change the result
    (dropout, word prefixes and suffixes) and added tokens that strip spaces raise ExportError
    naming the file and what is not supported. The post-processor (a BOS template, say) is not
    applied: ids are those of the text alone, as `encode(text, add_special_tokens=False)` gives."""
    doc = read_json(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("model"), dict):
        raise ExportError(f"{path}: not a Hugging Face tokenizer.json (no 'model' object)")
    model = doc["model"]
    if "type" not in model and "merges" not in model:  # untyped (an old file): only a BPE model has merges
        raise ExportError(f"{path}: model has no 'merges'")
    kind = model.get("type", "BPE")
    if kind != "BPE":
        raise ExportError(f"{path}: model type {kind!r} is not supported (only byte-level BPE)")
    if doc.get("normalizer") is not None:
        raise ExportError(f"{path}: {_named('normalizer', doc['normalizer'])} is not supported (byte-level BPE "
                          "encodes the text as it is; a normalizer would change it first)")  # fmt: skip
    pattern = hf_pattern(path, doc.get("pre_tokenizer"))
    for option, neutral in (("dropout", (None, 0, 0.0)), ("continuing_subword_prefix", (None, "")),
                            ("end_of_word_suffix", (None, ""))):  # fmt: skip
        if model.get(option) not in neutral:
            raise ExportError(f"{path}: BPE {option} {model[option]!r} is not supported")
    check_bpe_model(path, model)
    vocab = model["vocab"]
    for spelling, token_id in vocab.items():
        if type(token_id) is not int:
            raise ExportError(f"{path}: model.vocab: token {spelling!r} has id {token_id!r}, not an integer")
    merges = hf_merges(path, model["merges"])
    added: dict[str, int] = {}
    for k, token in enumerate(doc.get("added_tokens") or []):
        if not (isinstance(token, dict) and isinstance(token.get("content"), str) and type(token.get("id")) is int):
            raise ExportError(f"{path}: added_tokens[{k}] is not a token with a content and an id")
        stripping = [flag for flag in ("lstrip", "rstrip", "single_word") if token.get(flag)]
        if stripping:
            raise ExportError(f"{path}: added token {token['content']!r} has {stripping[0]}=true, which is not "
                              "supported (special tokens match their exact text)")  # fmt: skip
        added[token["content"]] = token["id"]
    tokens = len(vocab.keys() | added.keys())
    check_ids(f"{path}: model.vocab", vocab, tokens)
    check_ids(f"{path}: added_tokens", added, tokens)
    return vocab, merges, added, pattern


def _named(where: str, part: object) -> str:
    """A component of tokenizer.json by its type, for an error: "pre_tokenizer Metaspace"."""
    kind = part.get("type") if isinstance(part, dict) else None
    return f"{where} {kind}" if kind else f"{where} {json.dumps(part)[:60]}"


def hf_pattern(path: Path, pre_tokenizer: object) -> str:
    """Our split pattern (a name or a regex) for a byte-level pre-tokenizer of tokenizer.json:
    `ByteLevel` with its own (GPT-2) regex, or `Split` by a regex (pieces isolated, or whitespace
    removed as `save` writes the `whitespace` pattern) followed by `ByteLevel` without a regex.
    Anything else raises ExportError naming the file and the part that is not supported."""

    def unsupported(what: str) -> ExportError:
        return ExportError(f"{path}: {what} is not supported (only byte-level BPE: a ByteLevel pre-tokenizer, "
                           "alone or after one regex Split)")  # fmt: skip

    steps = pre_tokenizer.get("pretokenizers") if isinstance(pre_tokenizer, dict) else None
    if not (isinstance(pre_tokenizer, dict) and pre_tokenizer.get("type") == "Sequence"):
        steps = [pre_tokenizer]
    if not isinstance(steps, list) or not steps or pre_tokenizer is None:
        raise unsupported("a tokenizer without a ByteLevel pre-tokenizer")
    *splits, last = steps
    if not (isinstance(last, dict) and last.get("type") == "ByteLevel"):
        raise unsupported(_named("pre_tokenizer", last))
    if last.get("add_prefix_space"):
        raise unsupported("ByteLevel with add_prefix_space=true (a space put before the text)")
    if not splits:
        if last.get("use_regex", True) is False:
            raise unsupported("ByteLevel without a regex and without a Split before it (no split at all)")
        return "gpt2"  # ByteLevel's own regex is GPT-2's
    if len(splits) > 1:
        raise unsupported(f"a sequence of {len(steps)} pre-tokenizers")
    split = splits[0]
    if not (isinstance(split, dict) and split.get("type") == "Split"):
        raise unsupported(_named("pre_tokenizer", split))
    if last.get("use_regex", True) is not False:
        raise unsupported("a Split followed by ByteLevel with its own regex (two splits)")
    regex_text = split.get("pattern", {}).get("Regex") if isinstance(split.get("pattern"), dict) else None
    if not isinstance(regex_text, str):
        raise unsupported(f"Split by {json.dumps(split.get('pattern'))[:60]} (only a Regex)")
    behavior, invert = split.get("behavior"), split.get("invert", False)
    for name, known in NAMED_PATTERNS.items():
        if hf_split_regex(name, known) == (regex_text, behavior, invert):
            return name
    if behavior != "Isolated" or invert:
        raise unsupported(f"Split with behavior {behavior!r}, invert {invert!r} (only 'Isolated')")
    return regex_text


def read_tiktoken_ranks(path: Path) -> dict[bytes, int]:
    """A tiktoken ranks file made by any tool (`base64(token) rank` a line, in any order) as token
    bytes -> rank, as tiktoken's `load_tiktoken_bpe` reads it, with errors naming the line."""
    ranks: dict[bytes, int] = {}
    seen: dict[int, int] = {}
    for line_no, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            raise ExportError(f"{path}:{line_no}: expected a base64 token and its rank separated by a space")
        try:
            token = base64.b64decode(parts[0], validate=True)
        except (binascii.Error, ValueError):
            raise ExportError(f"{path}:{line_no}: {parts[0]!r} is not base64") from None
        rank = int(parts[1])
        if token in ranks or rank in seen:
            what = f"token {token!r}" if token in ranks else f"rank {rank}"
            raise ExportError(f"{path}:{line_no}: {what} appears twice")
        ranks[token] = rank
        seen[rank] = line_no
    if not ranks:
        raise ExportError(f"{path}: holds no token")
    for token, rank in ranks.items():
        problem = id_problem(token, rank, len(ranks), kind="rank")
        if problem is not None:
            raise ExportError(f"{path}:{seen[rank]}: {problem}")
    return ranks


def read_saved_tokenizer_json(path: Path, special_tokens: dict[str, int]) -> tuple[list[bytes], list[tuple[int, int]]]:
    """(token bytes by id, merges as id pairs) of a `tokenizer.json` written by `save`, read with
    `read_tokenizer_json`; its added tokens must be `special_tokens`, its ordinary tokens must have
    ids 0 to n-1, and its merges must make exactly its vocab."""
    vocab_spelled, merges, added, _ = read_tokenizer_json(path)
    if added != special_tokens:
        raise ExportError(f"{path}: its added_tokens are not the special tokens {MANIFEST_FILE} records")
    vocab = vocab_by_id(vocab_spelled, special_tokens, f"{path}: model.vocab")
    made, pairs = merge_ids(merges, lambda k: f"{path}: model.merges[{k}]")
    if made != vocab:
        raise ExportError(f"{path}: its merges and its vocab disagree ({difference('merges', made, 'vocab', vocab)})")
    return vocab, pairs


def tokens_by_rank(ranks: dict[bytes, int]) -> list[bytes | None]:
    """A tiktoken file's tokens in order of rank, None where a rank between 0 and the largest is
    missing (`save` writes ranks 0 to n-1: a gap makes the file disagree with the others)."""
    by_rank: list[bytes | None] = [None] * (max(ranks.values()) + 1)
    for token, rank in ranks.items():
        by_rank[rank] = token
    return by_rank


def difference(name_a: str, a: Sequence[bytes], name_b: str, b: Sequence[bytes]) -> str:
    """Where two vocabularies first differ, in words: "token 300 is b'th' in A, b'he' in B"."""
    for token_id, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"token {token_id} is {x!r} in {name_a}, {y!r} in {name_b}"
    return f"{name_a} holds {len(a)} tokens, {name_b} {len(b)}"


def read_checked(directory: Path, special_tokens: dict[str, int]) -> tuple[list[bytes], list[tuple[int, int]]]:
    """(token bytes by id, merges as id pairs) of a directory written by `save`, after checking that
    merges.txt, vocab.json and, when present, tokenizer.json and tokenizer.tiktoken all describe the
    same tokenizer. When they do not, the file that differs from the majority is named; with no
    majority (only vocab.json and merges.txt, say) both are."""
    merges, line_numbers = read_merges(directory / MERGES_FILE)
    made, pairs = merge_ids(merges, lambda k: f"{directory / MERGES_FILE}:{line_numbers[k]}")
    readings = {
        MERGES_FILE: made,
        VOCAB_FILE: vocab_by_id(read_vocab_json(directory / VOCAB_FILE), special_tokens, str(directory / VOCAB_FILE)),
    }
    hf_pairs = None
    if (directory / HF_FILE).exists():
        readings[HF_FILE], hf_pairs = read_saved_tokenizer_json(directory / HF_FILE, special_tokens)
    if (directory / TIKTOKEN_FILE).exists():
        readings[TIKTOKEN_FILE] = tokens_by_rank(read_tiktoken_ranks(directory / TIKTOKEN_FILE))
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


def file_digest(path: Path) -> dict:
    """{"size", "sha256"} of a file, as the manifest records each tokenizer file."""
    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    return {"size": path.stat().st_size, "sha256": digest}


def file_digests(directory: Path) -> dict[str, dict]:
    """Size and SHA-256 of each tokenizer file in `directory` but the manifest (which records them)."""
    names = [name for name in TOKENIZER_FILES if name != MANIFEST_FILE and (directory / name).is_file()]
    return {name: file_digest(directory / name) for name in names}


def check_digests(directory: Path, recorded: object) -> None:
    """Raise ExportError naming the first tokenizer file whose SHA-256 differs from the one the
    manifest records: the file changed after it was written. A missing file is not checked here
    (vocab.json and merges.txt are required when read; the other formats are optional)."""
    manifest = directory / MANIFEST_FILE
    if not isinstance(recorded, dict) or not all(
        isinstance(entry, dict) and isinstance(entry.get("sha256"), str) for entry in recorded.values()
    ):
        raise ExportError(f"{manifest}: 'files' is not a mapping of file name -> size and sha256")
    for name, entry in recorded.items():
        if name not in TOKENIZER_FILES or name == MANIFEST_FILE:
            raise ExportError(f"{manifest}: records a checksum for {name!r}, which is not a tokenizer file")
        path = directory / name
        if not path.is_file():
            continue
        found = file_digest(path)
        if found["sha256"] != entry["sha256"]:
            size = ""
            if entry.get("size") not in (None, found["size"]):
                size = f"; it holds {found['size']:,} bytes, {MANIFEST_FILE} records {entry['size']:,}"
            raise ExportError(
                f"{path}: its SHA-256 is not the one {MANIFEST_FILE} records (the file changed after it was "
                f"written{size})"
            )

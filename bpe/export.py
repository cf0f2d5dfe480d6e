"""Writing and reading tokenizer files: GPT-2 `vocab.json` + `merges.txt`, Hugging Face
`tokenizer.json`, and tiktoken ranks.

GPT-2's formats spell every byte as a printable character (`bytes_to_unicode`): the space byte
is `Ġ`, so b" the" is spelled "Ġthe".
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from bpe.errors import ExportError

MERGES_FILE = "merges.txt"
VOCAB_FILE = "vocab.json"
HF_FILE = "tokenizer.json"
TIKTOKEN_FILE = "tokenizer.tiktoken"
MANIFEST_FILE = "manifest.json"
TOKENIZER_FILES = (MERGES_FILE, VOCAB_FILE, HF_FILE, TIKTOKEN_FILE, MANIFEST_FILE)


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


def vocab_json(vocab: Sequence[bytes], special_tokens: dict[str, int]) -> dict[str, int]:
    """Token spelling -> id, ids in order; special tokens keep their literal text."""
    entries = {spell(token): token_id for token_id, token in enumerate(vocab)}
    for text, token_id in special_tokens.items():
        if text in entries:
            raise ExportError(f"special token {text!r} is spelled like token {entries[text]}")
        entries[text] = token_id
    return entries


def write_vocab(path: Path, vocab: Sequence[bytes], special_tokens: dict[str, int]) -> None:
    path.write_text(
        json.dumps(vocab_json(vocab, special_tokens), ensure_ascii=False, indent=0) + "\n", encoding="utf-8"
    )


def write_tiktoken(path: Path, vocab: Sequence[bytes]) -> None:
    """One `base64(token) rank` line per token; rank = token id = merge order."""
    lines = [f"{base64.b64encode(token).decode('ascii')} {rank}" for rank, token in enumerate(vocab)]
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


# The characters str.split() splits on, as one class (regex's \s and \x1c-\x1f).
WHITESPACE_CHARS = (
    "\\t\\n\\x0b\\x0c\\r\\x1c\\x1d\\x1e\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
)
WHITESPACE_RUN = f"[{WHITESPACE_CHARS}]+"
WHITESPACE_WORD = f"[^{WHITESPACE_CHARS}]+"


def tokenizer_json(
    vocab: Sequence[bytes],
    merges: Sequence[tuple[int, int]],
    special_tokens: dict[str, int],
    pattern_name: str,
    pattern_regex: str,
) -> dict:
    """The Hugging Face `tokenizer.json` document for a byte-level BPE tokenizer."""
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
            "vocab": vocab_json(vocab, special_tokens),
            "merges": [[spell(vocab[a]), spell(vocab[b])] for a, b in merges],
        },
    }


def write_tokenizer_json(path: Path, *args) -> None:
    path.write_text(json.dumps(tokenizer_json(*args), ensure_ascii=False) + "\n", encoding="utf-8")


def read_gpt2_files(directory: Path) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """(vocab.json as token spelling -> id, merges.txt as pairs of spellings)."""
    try:
        vocab = json.loads((directory / VOCAB_FILE).read_text(encoding="utf-8"))
        lines = (directory / MERGES_FILE).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ExportError(f"{directory}: cannot read {VOCAB_FILE} and {MERGES_FILE} ({exc})") from None
    merges = []
    for line_no, line in enumerate(lines, start=1):
        if line_no == 1 and line.startswith("#version"):
            continue
        if not line.strip():
            continue
        parts = line.split(" ")
        if len(parts) != 2:
            raise ExportError(f"{directory / MERGES_FILE}:{line_no}: expected two tokens separated by a space")
        merges.append((parts[0], parts[1]))
    return vocab, merges


def atomic_write_dir(target: Path, write, force: bool = False) -> None:
    """Call write(tmp_dir), then put the files in place: a new directory is renamed into place
    whole; an existing one (with `force`) gets each tokenizer file replaced by a rename, the
    manifest last, and keeps every other file it holds. An existing tokenizer is kept unless force."""
    target = Path(target).absolute()
    if target.exists():
        holds_tokenizer = target.is_dir() and any((target / name).exists() for name in TOKENIZER_FILES)
        if not target.is_dir():
            raise FileExistsError(f"{target}: exists and is not a directory")
        if holds_tokenizer and not force:
            raise FileExistsError(f"{target}: already holds a tokenizer (force=True replaces it)")
        if not holds_tokenizer and any(target.iterdir()):
            raise FileExistsError(f"{target}: exists and holds other files; choose an empty or new directory")
        beside = target  # the staging directory sits inside: same filesystem, no other permission needed
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        beside = target.parent
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=beside))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)
    try:
        write(tmp)
        for f in tmp.iterdir():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        if beside == target:
            _replace_files(tmp, target)
        else:
            os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _replace_files(staged: Path, target: Path) -> None:
    """Move the staged tokenizer files over those in `target`, the manifest last (it names what the
    others are), and drop tokenizer files of the old version that the new one does not have."""
    written = sorted((f.name for f in staged.iterdir()), key=lambda name: name == MANIFEST_FILE)
    for name in written:
        os.replace(staged / name, target / name)
    for name in set(TOKENIZER_FILES) - set(written):
        (target / name).unlink(missing_ok=True)
    staged.rmdir()

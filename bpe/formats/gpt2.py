"""GPT-2's two files: `vocab.json` (token spelling -> id) and `merges.txt` (one spelled merge a
line, in merge order, after a `#version` line)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from bpe.errors import ExportError
from bpe.formats.files import check_ids, read_json, read_text
from bpe.formats.record import TokenizerRecord
from bpe.formats.spelling import from_spelled, spell

MERGES_FILE = "merges.txt"
VOCAB_FILE = "vocab.json"


def write(directory: Path, record: TokenizerRecord) -> None:
    """Write vocab.json and merges.txt into `directory`."""
    vocab = record.vocab()
    write_merges(directory / MERGES_FILE, vocab, record.merges)
    write_vocab(directory / VOCAB_FILE, vocab, record.special_tokens, record.id_list())


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


def read(directory: Path, pattern: str) -> TokenizerRecord:
    """GPT-2-style files from another tool: ids are the file's; tokens no merge makes are special."""
    vocab_path, merges_path = directory / VOCAB_FILE, directory / MERGES_FILE
    vocab = read_vocab_json(vocab_path)
    merges, line_numbers = read_merges(merges_path)
    return from_spelled(
        vocab,
        merges,
        lambda k: f"{merges_path}:{line_numbers[k]}",
        {},
        pattern,
        str(vocab_path),
        orphans_are_special=True,
        lacks=vocab_path.name,
    )

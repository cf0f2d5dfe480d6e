"""GPT-2's two files: `vocab.json` (token spelling -> id) and `merges.txt` (one spelled merge a
line, in merge order, after a `#version` line)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from json.encoder import encode_basestring
from pathlib import Path

from bpe.errors import ExportError
from bpe.formats.files import check_ids, read_json, read_lines
from bpe.formats.record import TokenizerRecord
from bpe.formats.spelling import from_spelled, spelled

MERGES_FILE = "merges.txt"
VOCAB_FILE = "vocab.json"


def write(directory: Path, record: TokenizerRecord) -> None:
    """Write vocab.json and merges.txt into `directory`."""
    names = spelled(record.vocab())
    write_merges(directory / MERGES_FILE, names, record.merges)
    write_vocab(directory / VOCAB_FILE, names, record.special_tokens, record.id_list())


def write_merges(path: Path, names: Sequence[str], merges: Sequence[tuple[int, int]]) -> None:
    """merges.txt, from every token's spelling (`spelled(vocab)`)."""
    lines = ["#version: 0.2"] + [f"{names[a]} {names[b]}" for a, b in merges]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def vocab_json(
    names: Sequence[str], special_tokens: dict[str, int], ids: Sequence[int | None] | None = None
) -> dict[str, int]:
    """Token spelling -> id, from every token's spelling (`spelled(vocab)`): token i's id is `ids[i]`,
    or i; a byte whose id is None is left out; in order of id; special tokens keep their literal text."""
    if ids is None:
        entries = {name: i for i, name in enumerate(names)}
    else:
        order = sorted((token_id, i) for i, token_id in enumerate(ids) if token_id is not None)
        entries = {names[i]: int(token_id) for token_id, i in order}
    for text, token_id in special_tokens.items():
        if text in entries:
            raise ExportError(f"special token {text!r} is spelled like token {entries[text]}")
        entries[text] = token_id
    return entries


def write_vocab(
    path: Path, names: Sequence[str], special_tokens: dict[str, int], ids: Sequence[int | None] | None = None
) -> None:
    """vocab.json, from every token's spelling, as `json.dumps(..., ensure_ascii=False, indent=0)`
    writes it, without the encoder in Python that indented output takes (0.65x its time)."""
    entries = vocab_json(names, special_tokens, ids)
    quoted = [f"{encode_basestring(name)}: {token_id}" for name, token_id in entries.items()]
    path.write_text(("{\n" + ",\n".join(quoted) + "\n}" if quoted else "{}") + "\n", encoding="utf-8")


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


def read_merges(path: Path) -> Iterator[tuple[int, str, str]]:
    """merges.txt as (line number, left spelling, right spelling), read as they come: a bad line is
    an ExportError naming `path:line` before the lines after it are read."""
    for line_no, line in read_lines(path):
        if line_no == 1 and line.startswith("#version"):
            continue
        if not line.strip():
            continue
        parts = line.split(" ")
        if len(parts) != 2:
            raise ExportError(f"{path}:{line_no}: expected two tokens separated by a space, got {len(parts)}")
        yield line_no, parts[0], parts[1]


def merges_with_places(path: Path) -> tuple[Iterator[tuple[str, str]], Callable[[int], str]]:
    """(the merges of merges.txt as they are read, `where(k)`: "merges.txt:LINE" of merge k) for
    `merge_ids` and `from_spelled`, which name the line of a bad merge."""
    line_numbers: list[int] = []

    def merges() -> Iterator[tuple[str, str]]:
        for line_no, a, b in read_merges(path):
            line_numbers.append(line_no)
            yield a, b

    return merges(), lambda k: f"{path}:{line_numbers[k]}"


def read(directory: Path, pattern: str, special_tokens: dict[str, int] | None = None) -> TokenizerRecord:
    """GPT-2-style files from another tool: ids are the file's; `special_tokens` (text -> id, as
    our manifest records them) are special, and so is any other token that no merge makes and that
    the split `pattern` would cut into pieces (<|endoftext|>); any other entry no merge makes is an
    error. merges.txt is checked line by line against vocab.json as it is read."""
    vocab_path, merges_path = directory / VOCAB_FILE, directory / MERGES_FILE
    vocab = read_vocab_json(vocab_path)
    known = {text: vocab.pop(text) for text in special_tokens or {} if text in vocab}
    merges, where = merges_with_places(merges_path)
    return from_spelled(
        vocab,
        merges,
        where,
        known,
        pattern,
        str(vocab_path),
        orphans_are_special=True,
        lacks=vocab_path.name,
    )

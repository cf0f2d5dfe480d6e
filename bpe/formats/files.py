"""What every reader and writer of tokenizer files applies: reading a file with one-line errors that
name it, tokens that are distinct, and the limits token ids obey.

Every tokenizer file is read through `open_checked`: a regular file only (a link to one is fine),
never a device, FIFO or directory, which is refused without being opened for a blocking read (a
FIFO would wait for a writer forever, /dev/zero would fill memory), and at most `MAX_FILE_BYTES`.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from bpe.errors import ExportError
from bpe.schema import ID_LIMIT
from bpe.storage import Checked, open_regular

# The largest tokenizer file read. Released tokenizers' files are tens of MB at most (a 200K-token
# tokenizer.json is about 16 MB); JSON parsed into Python takes about ten times its size, so a file
# at this bound costs a few GB, not the machine. What the encoder builds of it is bounded too: the
# special tokens, which cost the most each, by `bpe.pretokenize.MAX_SPECIAL_TOKENS`.
MAX_FILE_BYTES = 256 << 20


def limit_text() -> str:
    """The bound, in words, for errors."""
    return f"{MAX_FILE_BYTES >> 20} MiB, the most a tokenizer file may hold (released tokenizers' files are tens of MB)"


def tokenizer_file() -> Checked:
    """How a tokenizer file is checked as it is opened: ExportError, and `MAX_FILE_BYTES`."""
    return Checked(ExportError, ", so not a tokenizer file", MAX_FILE_BYTES, limit_text())


def check_regular(path: Path, info: os.stat_result) -> None:
    """Refuse a path whose `os.stat` (links followed) is not a regular file, or is too large."""
    tokenizer_file().regular(path, info)


def check_size(where: str, size: int) -> None:
    """Refuse a tokenizer file of `size` bytes above `MAX_FILE_BYTES`, naming `where`."""
    tokenizer_file().size(where, size)


def open_checked(path: Path) -> io.BufferedReader:
    """A tokenizer file opened for reading bytes, once it is known to be a regular file of at most
    `MAX_FILE_BYTES`; anything else raises ExportError naming `path`."""
    return open_regular(path, tokenizer_file())


def read_text(path: Path) -> str:
    """The UTF-8 text of a tokenizer file; a missing, unreadable, non-UTF-8 or oversized file, or one
    that is not a regular file, raises ExportError."""
    with open_checked(path) as f:
        data = f.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ExportError(f"{path}: not UTF-8 text (byte {exc.start}); the file is damaged") from None


def read_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line without its line end) of a tokenizer file, read as they come, so that a
    caller checking each line stops at the first bad one without reading the rest. Errors are
    read_text's, naming the line where a line is not UTF-8."""
    with open_checked(path) as f:
        for line_no, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ExportError(
                    f"{path}:{line_no}: not UTF-8 text (byte {exc.start} of the line); the file is damaged"
                ) from None
            yield line_no, line.rstrip("\r\n")


def read_json(path: Path) -> object:
    """A JSON file's document; invalid JSON (a truncated file, say) raises ExportError naming where."""
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise ExportError(
            f"{path}: not valid JSON ({exc.msg}: line {exc.lineno}, column {exc.colno}); the file is damaged or "
            "truncated"
        ) from None


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


# Tables indexed by id (id -> token) have the largest id + 1 entries, so ids below ID_LIMIT must also
# be dense: at most twice the tokens plus 2**20 (an 8 MB table at worst), which leaves room for gaps
# and special tokens set far apart.
SPARSE_IDS = 1 << 20


def max_id(tokens: int) -> int:
    """The largest id a vocabulary of `tokens` tokens may give."""
    return min(ID_LIMIT - 1, 2 * tokens + SPARSE_IDS - 1)


def id_problem(token: str | bytes, token_id: int, tokens: int, kind: str = "id") -> str | None:
    """Why `token_id` cannot be `token`'s id in a vocabulary of `tokens` tokens, or None."""
    if not 0 <= token_id < ID_LIMIT:
        return f"token {token!r} has {kind} {token_id}, outside 0 to {ID_LIMIT - 1} (ids are unsigned 32-bit)"
    if token_id > max_id(tokens):
        return (
            f"token {token!r} has {kind} {token_id}, too sparse for {tokens} tokens (ids may go up to "
            f"{max_id(tokens)}: twice the tokens plus {SPARSE_IDS})"
        )
    return None


def check_ids(where: str, ids: dict[str, int] | dict[bytes, int], tokens: int | None = None) -> None:
    """Raise ExportError naming `where` and the first token whose id `id_problem` refuses; `tokens`
    is the vocabulary's size (the number of `ids` unless given)."""
    tokens = len(ids) if tokens is None else tokens
    for token, token_id in ids.items():
        problem = id_problem(token, token_id, tokens)
        if problem is not None:
            raise ExportError(f"{where}: {problem}")

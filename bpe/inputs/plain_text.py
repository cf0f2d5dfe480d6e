"""A text file's documents as Python strings, without Arrow: what `bpe.inputs.readers` yields for
a `.txt` file, read whole. The path for small corpora (`bpe.training.small_corpus`) reads text files with it,
so that a small run loads no pyarrow (0.1 s and 45 MB); the readers share its decoding.

>>> documents("a\\r\\nb\\n\\nc", "lines"), documents("a b\\n", "doc")
(['a', 'b', 'c'], ['a b\\n'])
"""

from __future__ import annotations

from bpe.errors import InputError

BOM = b"\xef\xbb\xbf"  # a UTF-8 byte order mark at the start of a text, .json(l) or .csv file is not text


def decode_utf8(raw: bytes, path: str, base_offset: int) -> str:
    """`raw` as UTF-8; invalid bytes raise InputError naming the file and the byte's offset in it
    (`raw` starting at `base_offset`)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: invalid UTF-8 at byte {base_offset + exc.start}") from None


def read_documents(raw: bytes, path: str, text_format: str) -> list[str]:
    """The documents of a text file's bytes: "doc", the whole file as one; "lines", one per line
    (lines end at \\n, a \\r before it is part of the line ending, empty lines are not documents).
    A leading BOM is not text."""
    skipped = len(BOM) if raw.startswith(BOM) else 0
    return documents(decode_utf8(raw[skipped:], path, skipped), text_format)


def documents(text: str, text_format: str) -> list[str]:
    """A decoded text file's documents (see `read_documents`)."""
    if text_format == "doc":
        return [text]
    lines = (line[:-1] if line.endswith("\r") else line for line in text.split("\n"))
    return [line for line in lines if line]

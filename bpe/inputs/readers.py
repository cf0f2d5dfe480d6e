"""Reading a shard's documents as its kind says, in batches, each with its share of the file's
size: Parquet (a string column), JSON lines, JSON (an array of strings or objects, or JSON lines),
CSV/TSV (with a header), and UTF-8 text, one document per file (`text_format="doc"`, in pieces
whose counts are exactly those of the whole file: `txt_chunks`) or one per line (`"lines"`).

Every problem is reported as a one-line `InputError` that names the file (and row, line or byte) at
fault. Every document is read here; `bpe.inputs.read` applies `--sample` and `--limit` to them.
"""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from bpe.errors import InputError
from bpe.inputs.documents import missing_text_column
from bpe.inputs.plain_text import BOM, decode_utf8
from bpe.inputs.shard import Shard, decompressing
from bpe.inputs.strings import large_strings
from bpe.schema import TEXT_FORMATS

if TYPE_CHECKING:
    from bpe.pretokenize import Pretokenizer

BATCH_ROWS = 16384
JSONL_BATCH_BYTES = 8 << 20
# A .txt file is read and counted in pieces of about this size (see `txt_chunks`); counting one
# takes about 12 bytes per byte on each thread, and larger pieces count no faster. In "lines" mode
# it is also the block read at a time (whole lines of it make a batch).
TXT_CHUNK_BYTES = 2 << 20


def format_batches(
    shard: Shard,
    text_column: str,
    pretokenizer: Pretokenizer | None,
    chunk_bytes: int | None,
    check_utf8: bool = True,
) -> Iterator[tuple[pa.LargeStringArray, int]]:
    """Every document of the shard, read as its kind says; decompression errors in one line.
    `check_utf8=False`: Parquet's strings are not checked to be UTF-8 here, for a caller that
    checks them as it reads them (the compiled counting scanners); every other kind is decoded
    by Python, which checks."""
    if shard.kind == "parquet":
        yield from _parquet_batches(shard, text_column, check_utf8)
        return
    readers = {"jsonl": _jsonl_batches, "json": _json_batches, "csv": _csv_batches, "tsv": _csv_batches}
    if shard.kind != "txt" and shard.kind not in readers:
        raise InputError(f"{shard.path}: unsupported file type")
    if shard.text_format not in TEXT_FORMATS:
        raise InputError(
            f"{shard.path}: text_format must be one of {', '.join(TEXT_FORMATS)}, not {shard.text_format!r}"
        )
    compressed = shard.compression is not None
    raw = _Tally(shard.open_raw()) if compressed else shard.open_raw()
    with raw:
        f = decompressing(raw, shard) if compressed else raw  # type: ignore[arg-type]
        with f:
            if shard.kind == "txt" and shard.text_format == "lines":
                batches = _line_batches(f, shard, chunk_bytes or TXT_CHUNK_BYTES)
            elif shard.kind == "txt":
                chunks = txt_chunks(f, _label(shard), pretokenizer, chunk_bytes or TXT_CHUNK_BYTES)
                batches = ((large_strings([text]), share) for text, share in chunks)
            else:
                batches = readers[shard.kind](shard, f, text_column)
            if not compressed:
                yield from batches
                return
            reported = 0
            try:
                for array, _ in batches:  # progress in bytes of the file as stored, not decompressed
                    yield array, raw.consumed - reported
                    reported = raw.consumed
            except InputError:
                raise
            except Exception as exc:  # each codec has its own errors: BadGzipFile, EOFError, LZMAError, ZstdError
                raise InputError(
                    f"{shard.path}: cannot read it as {shard.compression} data "
                    f"({type(exc).__name__}: {_first_line(exc)})"
                ) from None
            if shard.size > reported:
                yield large_strings([]), shard.size - reported


class _Tally(io.RawIOBase):
    """A readable file that counts the bytes read through it (progress of a compressed file)."""

    def __init__(self, f: BinaryIO) -> None:
        super().__init__()
        self._f = f
        self.consumed = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self._f.readinto(buffer) or 0
        self.consumed += n
        return n

    def read(self, size: int = -1) -> bytes:
        data = self._f.read(size)
        self.consumed += len(data)
        return data

    def close(self) -> None:
        if not self.closed:
            self._f.close()
        super().close()


def _label(shard: Shard) -> str:
    """The file as errors name it: byte offsets in a compressed file are in its decompressed text."""
    return f"{shard.path} (decompressed)" if shard.compression is not None else shard.path


def _line_batches(
    f: BinaryIO, shard: Shard, block_bytes: int = TXT_CHUNK_BYTES
) -> Iterator[tuple[pa.LargeStringArray, int]]:
    """A text file read as one document per line: lines end at \\n (a \\r before it is part of the
    line ending), line endings are not text, empty lines are not documents. Blocks of about
    `block_bytes` are read and cut after their last newline (never inside a UTF-8 character: no
    byte of one is a newline), so a batch holds whole lines and memory stays bounded."""
    label = _label(shard)
    head = f.read(len(BOM))
    skipped = len(BOM) if head == BOM else 0
    pending = b"" if skipped else head
    offset = skipped  # where `pending` starts in the file
    first = True
    while True:
        block = f.read(block_bytes)
        eof = not block
        data = pending + block
        end = len(data) if eof else data.rfind(b"\n") + 1
        if end == 0 and not eof:  # no newline yet: a line longer than a block
            pending = data
            continue
        text = decode_utf8(data[:end], label, offset)
        lines = text.split("\n")
        if not eof or text.endswith("\n") or not text:
            lines.pop()  # after the last newline: nothing, or the start of a line still being read
        docs = [line[:-1] if line.endswith("\r") else line for line in lines]
        yield large_strings([d for d in docs if d]), end + (skipped if first else 0)
        first = False
        pending, offset = data[end:], offset + end
        if eof:
            return


def _json_batches(shard: Shard, f: BinaryIO, text_column: str) -> Iterator[tuple[pa.LargeStringArray, int]]:
    """A .json file: an array of strings, or of objects whose `text_column` field holds the text
    (read whole: give large data as JSON lines); a file that is not an array is read as JSON lines,
    as Hugging Face `datasets` does."""
    raw = f.read()
    start = len(BOM) if raw.startswith(BOM) else 0
    text = decode_utf8(raw[start:], _label(shard), start)
    if not text.lstrip().startswith("["):
        yield from _jsonl_batches(shard, io.BytesIO(raw), text_column)
        return
    try:
        records = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{shard.path}:{exc.lineno}: invalid JSON ({exc.msg})") from None
    texts: list[str | None] = []
    for i, record in enumerate(records):
        if isinstance(record, dict):
            if text_column not in record:
                raise missing_text_column(f"{shard.path}: element {i}: no field {text_column!r}")
            record = record[text_column]
        if record is not None and not isinstance(record, str):
            raise InputError(f"{shard.path}: element {i}: holds {type(record).__name__}, not a string")
        texts.append(record)
    for i in range(0, max(len(texts), 1), BATCH_ROWS):
        part = texts[i : i + BATCH_ROWS]
        yield large_strings(part), len(raw) * len(part) // max(len(texts), 1)


def _csv_batches(shard: Shard, f: BinaryIO, text_column: str) -> Iterator[tuple[pa.LargeStringArray, int]]:
    """A .csv (or tab-separated .tsv) file with a header row; `text_column` names the column. Read
    as a stream of lines, each decoded on its own (invalid UTF-8 named at its byte), so quoted
    fields may hold newlines."""
    label = _label(shard)
    position = [0]

    def lines() -> Iterator[str]:
        for number, line in enumerate(f):
            start = position[0]
            position[0] += len(line)
            if number == 0 and line.startswith(BOM):
                line, start = line[len(BOM) :], start + len(BOM)
            yield decode_utf8(line, label, start)

    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # documents are longer than csv's default 128 KiB
    reader = csv.reader(lines(), delimiter="\t" if shard.kind == "tsv" else ",")
    try:
        header = next(reader, None)
        if header is None:
            return
        if text_column not in header:
            raise missing_text_column(
                f"{shard.path}: no column {text_column!r} (columns: {', '.join(header) or 'none'})"
            )
        column = header.index(text_column)
        texts: list[str] = []
        reported = 0
        for row in reader:
            if not row:
                continue  # a blank line
            if column >= len(row):
                raise InputError(f"{shard.path}:{reader.line_num}: {len(row)} field(s), no {text_column!r}")
            texts.append(row[column])
            if len(texts) >= BATCH_ROWS:
                yield large_strings(texts), position[0] - reported
                texts, reported = [], position[0]
        yield large_strings(texts), position[0] - reported
    except csv.Error as exc:
        raise InputError(f"{shard.path}:{reader.line_num}: not valid CSV ({exc})") from None


def check_parquet(shard: Shard, text_column: str = "text") -> pq.FileMetaData:
    """Fail early, naming the file, if a Parquet shard cannot be read or lacks a string text column;
    returns its metadata (row groups and their sizes)."""
    with shard.open() as f:
        parquet = _open_parquet(shard, f)
        _parquet_text_field(parquet, shard, text_column)
        return parquet.metadata


def _open_parquet(shard: Shard, f) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(f)
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as exc:
        raise InputError(f"{shard.path}: not a readable Parquet file ({_first_line(exc)})") from None


def _parquet_text_field(parquet: pq.ParquetFile, shard: Shard, text_column: str) -> pa.Field:
    schema = parquet.schema_arrow
    if text_column not in schema.names:
        raise missing_text_column(
            f"{shard.path}: no column {text_column!r} (columns: {', '.join(schema.names) or 'none'})"
        )
    field = schema.field(text_column)
    if not is_text_type(field.type):
        raise InputError(f"{shard.path}: column {text_column!r} holds {field.type}, not strings")
    return field


def is_text_type(data_type: pa.DataType) -> bool:
    """Whether an Arrow column of this type holds text we read (cast to large_string): strings of
    any layout (string, large_string, string_view), dictionary-encoded strings, or only nulls."""
    if pa.types.is_dictionary(data_type):
        data_type = data_type.value_type
    return (
        pa.types.is_string(data_type)
        or pa.types.is_large_string(data_type)
        or pa.types.is_string_view(data_type)
        or pa.types.is_null(data_type)
    )


def _parquet_batches(
    shard: Shard, text_column: str, check_utf8: bool = True
) -> Iterator[tuple[pa.LargeStringArray, int]]:
    with shard.open() as f:
        parquet = _open_parquet(shard, f)
        _parquet_text_field(parquet, shard, text_column)
        rows = max(parquet.metadata.num_rows, 1)
        row = 0
        try:
            for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=[text_column]):
                column = batch.column(0)
                try:
                    column.validate(full=check_utf8)
                except pa.ArrowInvalid as exc:
                    raise InputError(f"{shard.path}: rows {row}-{row + len(column) - 1}: {_first_line(exc)}") from None
                row += len(column)
                yield column.cast(pa.large_string()), shard.size * len(column) // rows
        except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as exc:
            raise InputError(f"{shard.path}: unreadable near row {row} ({_first_line(exc)})") from None


# The patterns whose pieces never join text across a cut made by _CUT (a custom regex may).
CHUNKED_PATTERNS = ("gpt2", "cl100k", "o200k", "whitespace")
# A cut goes after the byte this matches: before a space that follows printable ASCII, or before a
# newline that follows an ASCII letter or digit. Such bytes are never inside a UTF-8 character.
_CUT = re.compile(rb"[\x21-\x7e](?= )|[0-9A-Za-z](?=\n)")
_CUT_WINDOW = 1 << 16  # bytes searched at a time, backwards from the end of a chunk


def txt_chunks(
    f: BinaryIO, path: str, pretokenizer: Pretokenizer | None, chunk_bytes: int = TXT_CHUNK_BYTES
) -> Iterator[tuple[str, int]]:
    """The text of a .txt file (one document; a leading UTF-8 BOM dropped) in pieces of at most
    `chunk_bytes` where the text allows, each with the bytes of the file it took. Invalid UTF-8 is
    reported at its byte offset in the file.

    For the named patterns, counting the pieces one by one gives exactly the counts of the whole
    text, so memory stays bounded and the pieces can be counted on several threads. A cut goes
    where the scan of the whole text ends a piece and the scan of the part before it ends the same:
    before a space that follows printable ASCII, or a newline that follows an ASCII letter or digit
    (`_CUT`), and never inside a special token. There, (1) the piece holding the character before
    the cut ends at the cut: non-space pieces take whitespace only in front, or \\r, \\n, / after
    punctuation; (2) the end of the first part acts as the space or newline did: no alternative takes
    either after such a character, `(?!\\S)` holds for both, `$` follows only whitespace; (3) the
    patterns have no lookbehind, so the rest scans as the whole text does from the cut.
    `tests/inputs/test_inputs.py` checks this on random text. A custom regex gets the whole file at once.
    """
    head = f.read(len(BOM))
    skipped = len(BOM) if head == BOM else 0
    buf = bytearray() if skipped else bytearray(head)
    offset = skipped  # where buf starts in the file
    if pretokenizer is None or pretokenizer.name not in CHUNKED_PATTERNS:
        buf += f.read()
        yield decode_utf8(bytes(buf), path, offset), skipped + len(buf)
        return
    tokens = [t.encode() for t in pretokenizer.special_tokens]
    margin = max([len(t) for t in tokens] + [1])  # bytes after a cut needed to judge it
    step = max(chunk_bytes, 1)
    eof, first = False, True
    while True:
        while not eof and len(buf) < step + margin:
            block = f.read(step)
            eof = not block
            buf += block
        if eof and len(buf) <= step:
            cut = len(buf)
        else:
            cut, position = _last_cut(buf, step, tokens), step
            while cut is None:  # no cut within a chunk (text without ASCII spaces): take the next one
                cut, position = _next_cut(buf, position, tokens, eof)
                if cut is None and eof:
                    cut = len(buf)
                elif cut is None:
                    block = f.read(step)
                    eof = not block
                    buf += block
        if cut or first:
            chunk = bytes(buf[:cut])
            del buf[:cut]
            yield decode_utf8(chunk, path, offset), cut + (skipped if first else 0)
            offset += cut
            first = False
        if eof and not buf:
            return


def _last_cut(buf: bytearray, limit: int, tokens: list[bytes]) -> int | None:
    """The last safe cut in buf[1:limit + 1] (buf holds enough bytes beyond it to judge it)."""
    end = min(limit, len(buf) - 1)
    while end > 0:
        start = max(0, end - _CUT_WINDOW)
        for m in reversed(list(_CUT.finditer(buf, start, end + 1))):
            if _clear_of_tokens(buf, m.start() + 1, tokens, eof=False):
                return m.start() + 1
        end = start
    return None


def _next_cut(buf: bytearray, position: int, tokens: list[bytes], eof: bool) -> tuple[int | None, int]:
    """(the first safe cut after byte `position`, or None, and where to go on searching once more
    bytes are read)."""
    while (m := _CUT.search(buf, position)) is not None:
        clear = _clear_of_tokens(buf, m.start() + 1, tokens, eof)
        if clear is None:
            return None, m.start()
        if clear:
            return m.start() + 1, m.start() + 1
        position = m.start() + 1
    return None, max(position, len(buf) - 1)


def _clear_of_tokens(buf: bytearray, cut: int, tokens: list[bytes], eof: bool) -> bool | None:
    """Whether no special token spans the cut (None: the bytes that would tell are not read yet)."""
    for token in tokens:
        n = len(token)
        if n < 2:
            continue
        if cut + n - 1 > len(buf) and not eof:
            return None
        if buf.find(token, max(0, cut - n + 1), cut + n - 1) != -1:
            return False
    return True


def _jsonl_batches(shard: Shard, f: BinaryIO, text_column: str) -> Iterator[tuple[pa.LargeStringArray, int]]:
    """JSON lines: one object per line, its `text_column` field the text; blank lines are skipped."""
    texts: list[str | None] = []
    pending = 0
    offset = 0
    label = _label(shard)
    for line_no, line in enumerate(f, start=1):
        start = offset
        offset += len(line)
        if line_no == 1 and line.startswith(BOM):  # a byte order mark is not text, as in .txt
            line, start = line[len(BOM) :], start + len(BOM)
        text = decode_utf8(line, label, start)
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{shard.path}:{line_no}: invalid JSON ({exc.msg})") from None
        if not isinstance(record, dict) or text_column not in record:
            raise missing_text_column(f"{shard.path}:{line_no}: no field {text_column!r}")
        value = record[text_column]
        if value is not None and not isinstance(value, str):
            raise InputError(
                f"{shard.path}:{line_no}: field {text_column!r} holds {type(value).__name__}, not a string"
            )
        texts.append(value)
        pending += len(line)
        if pending >= JSONL_BATCH_BYTES:
            yield large_strings(texts), pending
            texts, pending = [], 0
    if texts or pending:
        yield large_strings(texts), pending


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__

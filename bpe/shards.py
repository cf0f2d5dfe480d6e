"""Training text: Parquet shards, .txt files (one document each) and .jsonl files, read in batches.

Inputs may be files, directories, globs or fsspec URLs (`file://`, and `s3://` and the like once
the filesystem package is installed). Every problem is reported as a one-line `InputError` that
names the file (and row, line or byte) at fault.
"""

from __future__ import annotations

import fnmatch
import glob
import hashlib
import json
import os
import re
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from bpe.errors import InputError

if TYPE_CHECKING:
    from bpe.pretokenize import Pretokenizer

KINDS = {".parquet": "parquet", ".pq": "parquet", ".txt": "txt", ".jsonl": "jsonl"}
BATCH_ROWS = 16384
JSONL_BATCH_BYTES = 8 << 20
# A .txt file is read and counted in pieces of about this size (see `txt_chunks`); counting one
# takes about 12 bytes per byte on each thread, and larger pieces count no faster.
TXT_CHUNK_BYTES = 2 << 20
BOM = b"\xef\xbb\xbf"  # a UTF-8 byte order mark at the start of a .txt or .jsonl file is not text


@dataclass(frozen=True)
class Shard:
    """One input file: a local path or an fsspec URL."""

    path: str
    kind: str
    size: int

    @property
    def is_url(self) -> bool:
        return "://" in self.path

    def open(self) -> BinaryIO:
        """The file, opened for reading bytes. A local file that is not a regular file (a FIFO, a
        device) is refused rather than read: reading a FIFO would wait for a writer forever."""
        if self.is_url:
            import fsspec

            return fsspec.open(self.path, "rb").open()
        nonblocking = getattr(os, "O_NONBLOCK", 0)  # opening a FIFO without it waits for a writer
        fd = os.open(self.path, os.O_RDONLY | nonblocking)
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise InputError(f"{self.path}: not a regular file ({_file_type(mode)})")
            if nonblocking:
                os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return os.fdopen(fd, "rb")

    def fingerprint(self) -> dict:
        """Path, size and SHA-256 of the content: what makes a shard the same shard."""
        with self.open() as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
        return {"path": self.path, "size": self.size, "sha256": digest}


def _kind_of(path: str) -> str | None:
    return KINDS.get(os.path.splitext(path)[1].lower())


def discover(inputs: Sequence[str]) -> list[Shard]:
    """Expand files, directories, globs and URLs into shards, sorted by path, each once: a local
    file reached by several paths (symbolic links) is the same file (its real path), kept under
    the shortest of them, so that it is neither counted twice nor named differently by input order."""
    if not inputs:
        raise InputError("no input given")
    found: dict[str, Shard] = {}
    for spec in inputs:
        for shard in _expand(str(spec)):
            key = shard.path if shard.is_url else os.path.realpath(shard.path)
            kept = found.get(key)
            if kept is None or (len(shard.path), shard.path) < (len(kept.path), kept.path):
                found[key] = shard
    return sorted(found.values(), key=lambda s: s.path)


def _expand(spec: str) -> list[Shard]:
    if "://" in spec and not spec.startswith("file://"):
        return _expand_url(spec)
    local = spec[len("file://") :] if spec.startswith("file://") else spec
    if glob.has_magic(local):
        paths = _glob(local)
        shards = [_local_shard(p) for p in paths if _kind_of(p) and not os.path.isdir(p)]
        if not shards:
            raise InputError(f"{spec}: matches no .parquet, .txt or .jsonl file")
        return shards
    if os.path.isdir(local):
        shards = []
        for directory in _walk_dirs(local, set()):
            for name in _names(directory, "*"):
                path = os.path.join(directory, name)
                if _kind_of(name) and not os.path.isdir(path):
                    shards.append(_local_shard(path))
        if not shards:
            raise InputError(f"{spec}: directory holds no .parquet, .txt or .jsonl file")
        return shards
    if not os.path.lexists(local):
        raise InputError(f"{spec}: no such file or directory")
    if not _kind_of(local):
        raise InputError(f"{spec}: unsupported file type (expected .parquet, .txt or .jsonl)")
    return [_local_shard(local)]


def _local_shard(path: str) -> Shard:
    """A local input, which must be a readable regular file: a FIFO, device or socket would hang or
    never end, so it is refused."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file (a broken symbolic link?)") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"{path}: not a regular file ({_file_type(info.st_mode)})")
    if not os.access(path, os.R_OK):
        raise InputError(f"{path}: permission denied")
    return Shard(os.path.abspath(path), _kind_of(path) or "", info.st_size)


FILE_TYPES = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def _file_type(mode: int) -> str:
    return next((name for test, name in FILE_TYPES if test(mode)), "not a file")


def _names(directory: str, pattern: str) -> list[str]:
    """Sorted names in `directory` matching a glob component; hidden names only if it asks for them."""
    try:
        names = os.listdir(directory or os.curdir)
    except OSError:
        return []
    if not pattern.startswith("."):
        names = [n for n in names if not n.startswith(".")]
    return sorted(fnmatch.filter(names, pattern))


def _walk_dirs(top: str, seen: set[str]) -> Iterator[str]:
    """`top` and the directories below it (not hidden), following symbolic links but entering each
    real directory once (`seen` holds real paths), so a link loop ends."""
    stack = [top]
    while stack:
        directory = stack.pop()
        real = os.path.realpath(directory or os.curdir)
        if real in seen:
            continue
        seen.add(real)
        yield directory
        subdirs = [os.path.join(directory, n) for n in _names(directory, "*")]
        stack.extend(reversed([d for d in subdirs if os.path.isdir(d)]))


def _glob(pattern: str) -> list[str]:
    """`glob.glob(pattern, recursive=True)`, except that a `**` enters each real directory once: the
    standard one follows a symbolic link loop until the path is too long (listing a file dozens of
    times), and two loops make it run for ever."""
    parts = pattern.split(os.sep)
    head = os.sep if parts[0] == "" else ""
    parts = [p for p in parts if p]
    while parts and not glob.has_magic(parts[0]):
        head = os.path.join(head, parts.pop(0))
    current = [head]
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        matched: list[str] = []
        if part == "**":
            seen: set[str] = set()
            for base in current:
                matched.extend(_walk_dirs(base, seen))
            if last:
                matched = [os.path.join(d, n) for d in matched for n in _names(d, "*")]
        else:
            for base in current:
                for name in _names(base, part):
                    path = os.path.join(base, name)
                    if last or os.path.isdir(path):
                        matched.append(path)
        current = matched
    return sorted(set(current))


def _expand_url(spec: str) -> list[Shard]:
    try:
        import fsspec

        fs, path = fsspec.core.url_to_fs(spec)
    except (ImportError, ValueError) as exc:
        raise InputError(f"{spec}: cannot open this URL ({exc}); install its fsspec filesystem package") from None
    protocol = spec.split("://", 1)[0]
    try:
        if glob.has_magic(path):
            paths = sorted(fs.glob(path))
        elif fs.isdir(path):
            paths = sorted(p for p in fs.find(path) if _kind_of(p))
        elif fs.exists(path):
            paths = [path]
        else:
            raise InputError(f"{spec}: no such file or directory")
    except InputError:
        raise
    except Exception as exc:  # remote filesystems raise their own error types
        raise InputError(f"{spec}: cannot list ({type(exc).__name__}: {exc})") from None
    shards = [Shard(f"{protocol}://{p}", _kind_of(p) or "", int(fs.size(p))) for p in paths if _kind_of(p)]
    if not shards:
        raise InputError(f"{spec}: matches no .parquet, .txt or .jsonl file")
    return shards


def read_batches(
    shard: Shard,
    text_column: str = "text",
    pretokenizer: Pretokenizer | None = None,
    chunk_bytes: int | None = None,
) -> Iterator[tuple[pa.LargeStringArray, int]]:
    """Documents of a shard in batches (nulls kept, for the caller to count and skip), each with
    its share of the file's size, so that progress can be shown in file bytes.

    Given the `pretokenizer` that will count them, a .txt file comes in pieces of about
    `chunk_bytes` (default `TXT_CHUNK_BYTES`) whose counts are exactly those of the whole file
    (see `txt_chunks`); without it, whole."""
    if shard.kind == "parquet":
        yield from _parquet_batches(shard, text_column)
    elif shard.kind == "txt":
        with shard.open() as f:
            for text, share in txt_chunks(f, shard.path, pretokenizer, chunk_bytes or TXT_CHUNK_BYTES):
                yield pa.array([text], pa.large_string()), share
    elif shard.kind == "jsonl":
        yield from _jsonl_batches(shard, text_column)
    else:
        raise InputError(f"{shard.path}: unsupported file type")


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
        raise InputError(
            f"{shard.path}: no column {text_column!r} (columns: {', '.join(schema.names) or 'none'}); "
            "choose one with text_column",
            parameter="text_column",
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


def _parquet_batches(shard: Shard, text_column: str) -> Iterator[tuple[pa.LargeStringArray, int]]:
    with shard.open() as f:
        parquet = _open_parquet(shard, f)
        _parquet_text_field(parquet, shard, text_column)
        rows = max(parquet.metadata.num_rows, 1)
        row = 0
        try:
            for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=[text_column]):
                column = batch.column(0)
                try:
                    column.validate(full=True)
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
    `tests/test_inputs.py` checks this on random text. A custom regex gets the whole file at once.
    """
    head = f.read(len(BOM))
    skipped = len(BOM) if head == BOM else 0
    buf = bytearray() if skipped else bytearray(head)
    offset = skipped  # where buf starts in the file
    if pretokenizer is None or pretokenizer.name not in CHUNKED_PATTERNS:
        buf += f.read()
        yield _decode(bytes(buf), path, offset), skipped + len(buf)
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
            yield _decode(chunk, path, offset), cut + (skipped if first else 0)
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


def _jsonl_batches(shard: Shard, text_column: str) -> Iterator[tuple[pa.LargeStringArray, int]]:
    texts: list[str | None] = []
    pending = 0
    offset = 0
    with shard.open() as f:
        for line_no, line in enumerate(f, start=1):
            start = offset
            offset += len(line)
            if line_no == 1 and line.startswith(BOM):  # a byte order mark is not text, as in .txt
                line, start = line[len(BOM) :], start + len(BOM)
            text = _decode(line, shard.path, start)
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as exc:
                raise InputError(f"{shard.path}:{line_no}: invalid JSON ({exc.msg})") from None
            if not isinstance(record, dict) or text_column not in record:
                raise InputError(
                    f"{shard.path}:{line_no}: no field {text_column!r}; choose one with text_column",
                    parameter="text_column",
                )
            value = record[text_column]
            if value is not None and not isinstance(value, str):
                raise InputError(
                    f"{shard.path}:{line_no}: field {text_column!r} holds {type(value).__name__}, not a string"
                )
            texts.append(value)
            pending += len(line)
            if pending >= JSONL_BATCH_BYTES:
                yield pa.array(texts, pa.large_string()), pending
                texts, pending = [], 0
    if texts or pending:
        yield pa.array(texts, pa.large_string()), pending


def _decode(raw: bytes, path: str, base_offset: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: invalid UTF-8 at byte {base_offset + exc.start}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__

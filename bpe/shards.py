"""Training text: Parquet shards, text files, JSON lines, JSON arrays, CSV, stdin, read in batches.

Inputs may be files, directories, globs or fsspec URLs (`file://`, and `s3://` and the like once
the filesystem package is installed), and `-` for stdin. The suffix decides how a file is read:
`.parquet`/`.pq`, `.jsonl`/`.ndjson`, `.json` (an array of strings or objects, or JSON lines),
`.csv`/`.tsv` (with a header); any other file is UTF-8 text, one document per file
(`text_format="doc"`) or one per line (`"lines"`). A compression suffix (`.gz`, `.zst`, `.bz2`, `.xz`)
is decompressed on the fly by fsspec's codecs, and the suffix before it decides the format.

Every problem is reported as a one-line `InputError` that names the file (and row, line or byte) at
fault. The same `read_batches` serves both engines (the local one on threads, the Dask one on
workers), so they read the same documents from every format; `--sample` and `--limit` are applied
here too (`sample_mask`, `apply_limit`), for the same reason.
"""

from __future__ import annotations

import csv
import fnmatch
import glob
import hashlib
import io
import json
import os
import re
import stat
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bpe import storage
from bpe.errors import InputError
from bpe.settings import TEXT_FORMATS

if TYPE_CHECKING:
    from bpe.pretokenize import Pretokenizer

# Suffix -> how the file is read; any other suffix (or none: `train.en`, `corpus`) is text ("txt").
KINDS = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".txt": "txt",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".csv": "csv",
    ".tsv": "tsv",
}
# Compression suffixes: fsspec infers the codec from them (`infer_compression`); this table only
# names a codec fsspec cannot offer because its package is missing.
COMPRESSIONS = {".gz": "gzip", ".bz2": "bz2", ".xz": "xz", ".lzma": "lzma", ".zst": "zstd", ".zstd": "zstd"}
COMPRESSION_PACKAGES = {"zstd": "zstandard"}
# File types a directory walk or a glob skips, as certainly not text (and refused when named).
BINARY_SUFFIXES = frozenset(
    ".7z .a .arrow .avi .avro .bin .bmp .ckpt .class .db .dll .doc .docx .dylib .epub .exe .feather .flac .gif "
    ".h5 .hdf5 .ico .jar .jpeg .jpg .lance .mkv .mov .mp3 .mp4 .npy .npz .o .ogg .onnx .orc .otf .pdf .pickle "
    ".pkl .png .ppt .pptx .pt .pth .pyc .rar .safetensors .so .sqlite .tar .tgz .tif .tiff .ttf .wav .webp "
    ".whl .woff .woff2 .xls .xlsx .zip".split()
)
SNIFF_BYTES = 8192  # a walked text file with a NUL byte in its first SNIFF_BYTES is skipped as binary
STDIN = "<stdin>"  # the path stdin (`-`) is known by in errors and in the manifest
BATCH_ROWS = 16384
JSONL_BATCH_BYTES = 8 << 20
# A .txt file is read and counted in pieces of about this size (see `txt_chunks`); counting one
# takes about 12 bytes per byte on each thread, and larger pieces count no faster. In "lines" mode
# it is also the block read at a time (whole lines of it make a batch).
TXT_CHUNK_BYTES = 2 << 20
BOM = b"\xef\xbb\xbf"  # a UTF-8 byte order mark at the start of a text, .json(l) or .csv file is not text
SAMPLE_BUCKETS = 1_000_000  # --sample keeps a row when a seeded hash of it, modulo this, is below fraction x this


@dataclass(frozen=True)
class Shard:
    """One input file (a local path or an fsspec URL; `data` holds stdin's bytes) and how to read
    it: `kind` from its suffix, the compression from the suffix after it (see `compression`), and
    the reading options of `text_format`, `sample` (fraction of rows kept, by `seed`) and `budget`
    (what `--limit` leaves for this file: ("rows" | "bytes", amount); see `apply_limit`)."""

    path: str
    kind: str
    size: int
    text_format: str = "doc"
    sample: float | None = None
    seed: int = 0
    budget: tuple[str, int] | None = None
    data: bytes | None = field(default=None, repr=False, compare=False)

    @property
    def is_url(self) -> bool:
        return "://" in self.path

    @property
    def compression(self) -> str | None:
        """The codec of a compressed file (fsspec's name: gzip, bz2, xz, lzma, zstd), from its suffix."""
        return None if self.data is not None else _compression_of(self.path)

    def open_raw(self) -> BinaryIO:
        """The file as stored (compressed or not), opened for reading bytes. A local file that is not
        a regular file (a FIFO, a device) is refused rather than read: reading a FIFO would wait for a
        writer forever."""
        if self.data is not None:
            return io.BytesIO(self.data)
        if self.is_url:
            import fsspec

            return fsspec.open(self.path, "rb", **storage.fs_options(self.path)).open()
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

    def open(self) -> BinaryIO:
        """The file's content, opened for reading bytes: decompressed when its suffix says so."""
        raw = self.open_raw()
        if self.compression is None:
            return raw
        return _decompressing(raw, self)

    def fingerprint(self) -> dict:
        """Path, size and SHA-256 of the content as stored: what makes a shard the same shard."""
        with self.open_raw() as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
        return {"path": self.path, "size": self.size, "sha256": digest}


def _decompressing(raw: BinaryIO, shard: Shard) -> BinaryIO:
    """`raw` decompressed by fsspec's codec for the shard's suffix; a one-line error naming the
    package to install when the codec is not available (zstd without `zstandard`)."""
    from fsspec.compression import compr

    name = shard.compression
    if name not in compr:
        raw.close()
        package = COMPRESSION_PACKAGES.get(name, name)
        raise InputError(f"{shard.path}: reading {name} files needs the {package} package: pip install {package}")
    if name == "zstd" and compr[name].__module__ == "fsspec.compression":  # zstandard's: see _StrictZstd
        return io.BufferedReader(_StrictZstd(raw))
    return io.BufferedReader(compr[name](raw, mode="rb"))  # buffered: some codecs cannot read lines


class _StrictZstd(io.RawIOBase):
    """zstd frames, decompressed one after another, from `zstandard` (the package fsspec's zstd
    codec uses before Python 3.14). fsspec's reader returns what it has of a frame cut short,
    silently: a truncated download would train on part of the file. This one raises EOFError."""

    def __init__(self, raw: BinaryIO) -> None:
        import zstandard

        super().__init__()
        self._raw, self._zstd = raw, zstandard
        self._frame = zstandard.ZstdDecompressor().decompressobj()
        self._in_frame = False  # bytes of the current frame were read and it has not ended
        self._out, self._at = b"", 0
        self._eof = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while self._at == len(self._out) and not self._eof:
            block = self._raw.read(1 << 16)
            if not block:
                if self._in_frame:
                    raise EOFError("the file ends inside a zstd frame (truncated?)")
                self._eof = True
                break
            self._out, self._at = self._decompress(block), 0
        n = min(len(buffer), len(self._out) - self._at)
        buffer[:n] = self._out[self._at : self._at + n]
        self._at += n
        return n

    def _decompress(self, block: bytes) -> bytes:
        out = []
        while block:
            if self._frame.eof:  # the next frame
                self._frame = self._zstd.ZstdDecompressor().decompressobj()
            out.append(self._frame.decompress(block))
            self._in_frame = not self._frame.eof
            block = self._frame.unused_data if self._frame.eof else b""
        return b"".join(out)

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


def _compression_of(path: str) -> str | None:
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in COMPRESSIONS:
        return None
    from fsspec.utils import infer_compression

    return infer_compression(path) or COMPRESSIONS[suffix]


def kind_of(path: str) -> str:
    """How a file is read, from its suffix (the one before a compression suffix): parquet, jsonl,
    json, csv, tsv, or txt for any other (`train.en`, `README`, `corpus.txt.gz`)."""
    stem = path
    if _compression_of(path) is not None:
        stem = os.path.splitext(path)[0]
    return KINDS.get(os.path.splitext(stem)[1].lower(), "txt")


def _refusal(path: str) -> str | None:
    """Why a named file cannot be read at all (None: it can be tried)."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix in BINARY_SUFFIXES:
        return f"a {suffix} file is not text (binary file types are refused; rename it if it holds text)"
    if _compression_of(path) is not None and kind_of(path) == "parquet":
        return "a compressed Parquet file cannot be read (Parquet compresses inside; decompress the file)"
    return None


def _skip_reason(name: str) -> str | None:
    """Why a directory walk or a glob leaves out the file or directory `name` (None: it is read).
    Hidden names (.git, .DS_Store) and `_` names (_SUCCESS, _metadata, _delta_log: what Spark and
    Arrow write beside their data, and skip too) are not data; nor are known binary types."""
    if name.startswith("."):
        return "hidden"
    if name.startswith("_"):
        return "_-prefixed metadata"
    if os.path.splitext(name)[1].lower() in BINARY_SUFFIXES:
        return "binary by suffix"
    if _refusal(name) is not None:
        return "compressed Parquet"
    return None


def _looks_binary(path: str) -> bool:
    """A NUL byte in the first SNIFF_BYTES of an uncompressed local text file: not UTF-8 text."""
    try:
        with open(path, "rb") as f:
            return b"\0" in f.read(SNIFF_BYTES)
    except OSError:
        return False  # the read itself reports what is wrong


class Skipped(list):
    """What discovery left out of directory walks and globs: (path, reason) pairs; `summary()` says
    it in one line."""

    def summary(self) -> str | None:
        """`skipped 3 file(s) in directory walks and globs: 2 hidden (.git/, .DS_Store), 1 binary ...`."""
        if not self:
            return None
        by_reason: dict[str, list[str]] = {}
        for path, reason in self:
            by_reason.setdefault(reason, []).append(os.path.basename(path.rstrip("/")) + ("/" * path.endswith("/")))
        parts = []
        for reason, names in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
            shown = ", ".join(names[:3]) + (f", ... {len(names) - 3} more" if len(names) > 3 else "")
            parts.append(f"{len(names)} {reason} ({shown})")
        return f"skipped {len(self)} file(s) or folder(s) in directory walks and globs: {'; '.join(parts)}"


def discover(inputs: Sequence[str | Shard], skipped: list[tuple[str, str]] | None = None) -> list[Shard]:
    """Expand files, directories, globs, URLs and `-` (stdin, read once, here) into shards, sorted by
    path, each once: a local file reached by several paths (symbolic links) is the same file (its
    real path), kept under the shortest of them, so that it is neither counted twice nor named
    differently by input order. A file named explicitly is read (any unknown suffix as text); a
    directory walk or a glob leaves out hidden and `_` names, known binary types and files with a
    NUL byte near the start, and appends each to `skipped` as (path, reason). Shards pass through."""
    if not inputs:
        raise InputError("no input given")
    found: dict[str, Shard] = {}
    for spec in inputs:
        expanded = [spec] if isinstance(spec, Shard) else _expand(str(spec), skipped)
        for shard in expanded:
            key = shard.path if shard.is_url or shard.data is not None else os.path.realpath(shard.path)
            kept = found.get(key)
            if kept is None or (len(shard.path), shard.path) < (len(kept.path), kept.path):
                found[key] = shard
    return sorted(found.values(), key=lambda s: s.path)


def _expand(spec: str, skipped: list[tuple[str, str]] | None) -> list[Shard]:
    if spec == "-":
        return [_stdin_shard()]
    if "://" in spec and not spec.startswith("file://"):
        return _expand_url(spec, skipped)
    local = spec[len("file://") :] if spec.startswith("file://") else spec
    if glob.has_magic(local):
        shards = _walked([p for p in _glob(local, skipped) if not os.path.isdir(p)], skipped, glob_matched=True)
        if not shards:
            raise InputError(f"{spec}: matches no file to read{_skip_note(skipped)}")
        return shards
    if os.path.isdir(local):
        paths = []
        for directory in _walk_dirs(local, set(), skipped):
            for name in _names(directory, "*", hidden=True):
                path = os.path.join(directory, name)
                if not os.path.isdir(path):
                    paths.append(path)
        shards = _walked(paths, skipped)
        if not shards:
            raise InputError(f"{spec}: directory holds no file to read{_skip_note(skipped)}")
        return shards
    if not os.path.lexists(local):
        raise InputError(f"{spec}: no such file or directory")
    refusal = _refusal(local)
    if refusal is not None:
        raise InputError(f"{spec}: {refusal}")
    return [_local_shard(local)]


def _walked(paths: list[str], skipped: list[tuple[str, str]] | None, glob_matched: bool = False) -> list[Shard]:
    """Shards of the files a walk or a glob found, less those `_skip_reason` or a NUL byte rule out
    (a glob lists a hidden name only when its pattern asks for one: then it is read)."""
    shards = []
    for path in paths:
        name = os.path.basename(path)
        reason = None if glob_matched and name.startswith(".") else _skip_reason(name)
        if reason is None:
            shard = _local_shard(path)
            if shard.kind == "txt" and shard.compression is None and _looks_binary(path):
                reason = "binary by content (a NUL byte)"
            else:
                shards.append(shard)
                continue
        if skipped is not None:
            skipped.append((path, reason))
    return shards


def _skip_note(skipped: list[tuple[str, str]] | None) -> str:
    summary = Skipped(skipped or []).summary()
    return f" ({summary})" if summary else " (hidden, _ and binary files are skipped)"


def _stdin_shard() -> Shard:
    """stdin as one input, read once, here: its fingerprint is the hash of what was read. The text
    is held in memory (and sent to the Dask workers inside the shard); give large data as files."""
    stream = sys.stdin
    if stream is None:
        raise InputError("-: no stdin to read")
    if stream.isatty():
        raise InputError("-: stdin is a terminal; pipe text into it (... | bpe train - ...)")
    buffer = getattr(stream, "buffer", None)  # a text stream put in its place has none
    data = buffer.read() if buffer is not None else stream.read().encode("utf-8", "surrogateescape")
    return Shard(STDIN, "txt", len(data), data=data)


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
    return Shard(os.path.abspath(path), kind_of(path), info.st_size)


FILE_TYPES = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def _file_type(mode: int) -> str:
    return next((name for test, name in FILE_TYPES if test(mode)), "not a file")


def _names(directory: str, pattern: str, hidden: bool = False) -> list[str]:
    """Sorted names in `directory` matching a glob component; hidden names only if it asks for them
    (or `hidden`)."""
    try:
        names = os.listdir(directory or os.curdir)
    except OSError:
        return []
    if not pattern.startswith(".") and not hidden:
        names = [n for n in names if not n.startswith(".")]
    return sorted(fnmatch.filter(names, pattern))


def _walk_dirs(top: str, seen: set[str], skipped: list[tuple[str, str]] | None = None) -> Iterator[str]:
    """`top` and the directories below it, following symbolic links but entering each real
    directory once (`seen` holds real paths), so a link loop ends. Hidden and `_` directories are
    not entered (and are appended to `skipped` with the reason)."""
    stack = [top]
    while stack:
        directory = stack.pop()
        real = os.path.realpath(directory or os.curdir)
        if real in seen:
            continue
        seen.add(real)
        yield directory
        subdirs = []
        for name in _names(directory, "*", hidden=True):
            path = os.path.join(directory, name)
            if not os.path.isdir(path):
                continue
            reason = _skip_reason(name) if name.startswith((".", "_")) else None
            if reason is None:
                subdirs.append(path)
            elif skipped is not None:
                skipped.append((path + "/", reason))
        stack.extend(reversed(subdirs))


def _glob(pattern: str, skipped: list[tuple[str, str]] | None = None) -> list[str]:
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
                matched.extend(_walk_dirs(base, seen, skipped))
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


def _expand_url(spec: str, skipped: list[tuple[str, str]] | None = None) -> list[Shard]:
    try:
        import fsspec

        fs, path = fsspec.core.url_to_fs(spec, **storage.fs_options(spec))
    except (ImportError, ValueError) as exc:
        raise InputError(f"{spec}: cannot open this URL ({exc}); install its fsspec filesystem package") from None
    protocol = spec.split("://", 1)[0]
    named = False
    try:
        if glob.has_magic(path):
            matches = fs.glob(path, detail=True)
            paths = sorted(p for p, info in matches.items() if info.get("type") != "directory")
            below = [p.rsplit("/", 1)[-1] for p in paths]
        elif fs.isdir(path):
            paths = sorted(fs.find(path))
            below = [p[len(path.rstrip("/")) + 1 :] for p in paths]
        elif fs.exists(path):
            paths, below, named = [path], [path.rsplit("/", 1)[-1]], True
        else:
            raise InputError(f"{spec}: no such file or directory")
        shards = []
        for p, rest in zip(paths, below):
            if named:
                refusal = _refusal(p)
                if refusal is not None:
                    raise InputError(f"{spec}: {refusal}")
                reason = None
            else:  # the rules of a local walk: for the folders below the base, and for the name
                *folders, name = rest.split("/")
                hidden = [f for f in folders if f.startswith((".", "_"))]
                reason = _skip_reason(hidden[0]) if hidden else _skip_reason(name)
            if reason is None:
                shards.append(Shard(f"{protocol}://{p}", kind_of(p), int(fs.size(p))))
            elif skipped is not None:
                skipped.append((f"{protocol}://{p}", reason))
    except InputError:
        raise
    except Exception as exc:  # remote filesystems raise their own error types
        raise InputError(f"{spec}: cannot list ({type(exc).__name__}: {exc})") from None
    if not shards:
        raise InputError(f"{spec}: matches no file to read{_skip_note(skipped)}")
    return shards


def read_batches(
    shard: Shard,
    text_column: str = "text",
    pretokenizer: Pretokenizer | None = None,
    chunk_bytes: int | None = None,
) -> Iterator[tuple[pa.LargeStringArray, int]]:
    """Documents of a shard in batches (nulls kept, for the caller to count and skip), each with
    its share of the file's size, so that progress can be shown in file bytes. The shard's
    `sample` and `budget` are applied: what is yielded is exactly what is trained on.

    Given the `pretokenizer` that will count them, a text file read as one document comes in pieces
    of about `chunk_bytes` (default `TXT_CHUNK_BYTES`) whose counts are exactly those of the whole
    file (see `txt_chunks`); without it, whole. Read as lines, it comes in blocks of that size."""
    budget = _Budget(*shard.budget) if shard.budget is not None else None
    yield from _selected_batches(shard, text_column, pretokenizer, chunk_bytes, budget)


def _selected_batches(
    shard: Shard,
    text_column: str,
    pretokenizer: Pretokenizer | None,
    chunk_bytes: int | None,
    budget: _Budget | None,
) -> Iterator[tuple[pa.LargeStringArray, int]]:
    """`_format_batches`, sampled, then cut by `budget` (whose state tells `apply_limit` where it ran out)."""
    one_document = shard.kind == "txt" and shard.text_format == "doc"
    batches = _format_batches(shard, text_column, pretokenizer, chunk_bytes)
    if shard.sample is not None:
        if one_document:
            batches = _sampled_file(shard, batches)
        else:
            batches = ((select_rows(shard, array), share) for array, share in batches)
    if budget is None:
        yield from batches
        return
    for array, share in batches:
        yield budget.take(array, counts_rows=not one_document), share
        if budget.exhausted:
            return
    if one_document:
        budget.end_document()


def _format_batches(
    shard: Shard, text_column: str, pretokenizer: Pretokenizer | None, chunk_bytes: int | None
) -> Iterator[tuple[pa.LargeStringArray, int]]:
    """Every document of the shard, read as its kind says; decompression errors in one line."""
    if shard.kind == "parquet":
        yield from _parquet_batches(shard, text_column)
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
        f = _decompressing(raw, shard) if compressed else raw  # type: ignore[arg-type]
        with f:
            if shard.kind == "txt" and shard.text_format == "lines":
                batches = _line_batches(f, shard, chunk_bytes or TXT_CHUNK_BYTES)
            elif shard.kind == "txt":
                chunks = txt_chunks(f, _label(shard), pretokenizer, chunk_bytes or TXT_CHUNK_BYTES)
                batches = ((pa.array([text], pa.large_string()), share) for text, share in chunks)
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
                yield pa.array([], pa.large_string()), shard.size - reported


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


# --- sampling and limits -------------------------------------------------------------------------


def sample_mask(array: pa.LargeStringArray, fraction: float, seed: int = 0) -> np.ndarray:
    """Which rows `--sample fraction` keeps: FNV-1a of "bpe-sample:{seed}:" + the row's UTF-8 bytes,
    modulo a million, below fraction x a million (the held-out rows' rule, with a seed in front so
    that the sample does not coincide with them). Deterministic by seed, and independent of where
    the row sits: the same row is kept in any file, format, order or engine. Null rows are kept (the
    counter skips and reports them)."""
    from bpe.engine.hashing import hash_buckets  # here: the kernels load only when a sample is asked for

    array = array.cast(pa.large_string()) if array.type != pa.large_string() else array
    if len(array) == 0:
        return np.zeros(0, dtype=bool)
    keyed = pc.binary_join_element_wise(
        pa.scalar(f"bpe-sample:{seed}:", pa.large_string()), array, pa.scalar("", pa.large_string())
    )
    _, offsets_buf, data_buf = keyed.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)[keyed.offset : keyed.offset + len(keyed) + 1]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(1, np.uint8)
    keep = hash_buckets(data, offsets, SAMPLE_BUCKETS) < int(round(fraction * SAMPLE_BUCKETS))
    if array.null_count:
        keep |= array.is_null().to_numpy(zero_copy_only=False)
    return keep


def select_rows(shard: Shard, array: pa.Array) -> pa.LargeStringArray:
    """The rows of a batch of `shard` that its `sample` keeps (all, without one)."""
    array = array.cast(pa.large_string()) if array.type != pa.large_string() else array
    if shard.sample is None:
        return array
    return array.filter(pa.array(sample_mask(array, shard.sample, shard.seed)))


def _sampled_file(
    shard: Shard, batches: Iterator[tuple[pa.LargeStringArray, int]]
) -> Iterator[tuple[pa.LargeStringArray, int]]:
    """A text file read as one document is one row: kept or not whole, by the same rule applied to
    the SHA-256 of its content (its text may be too large to hold, the hash is not)."""
    digest = shard.fingerprint()["sha256"]
    if sample_mask(pa.array([digest], pa.large_string()), shard.sample or 0.0, shard.seed)[0]:
        yield from batches
        return
    empty = pa.array([], pa.large_string())
    for _, share in batches:  # read through for the progress shares; nothing is counted
        yield empty, share


class _Budget:
    """What `--limit` leaves to read: `unit` "rows" (documents; null rows do not count) or "bytes"
    (UTF-8 bytes of text; the document that crosses the limit is cut at the last character that fits)."""

    def __init__(self, unit: str, amount: int) -> None:
        if unit not in ("rows", "bytes") or amount < 1:
            raise ValueError(f"a limit is ('rows' | 'bytes', amount >= 1), not ({unit!r}, {amount!r})")
        self.unit, self.left, self.exhausted = unit, amount, False

    def take(self, array: pa.LargeStringArray, counts_rows: bool = True) -> pa.LargeStringArray:
        """The part of `array` within the budget (spending it). A text read as one document comes in
        several arrays: its rows are counted once, by `end_document` (`counts_rows` False)."""
        if self.exhausted or len(array) == 0:
            return array.slice(0, 0)
        if self.unit == "rows":
            if not counts_rows:
                return array
            rows = np.cumsum(array.is_valid().to_numpy(zero_copy_only=False))
            if rows[-1] < self.left:
                self.left -= int(rows[-1])
                return array
            end = int(np.searchsorted(rows, self.left)) + 1  # through the row that spends the last one
            self.left, self.exhausted = 0, True
            return array.slice(0, end)
        sizes = np.cumsum(pc.fill_null(pc.binary_length(array), 0).to_numpy(zero_copy_only=False))
        reaching = int(np.searchsorted(sizes, self.left))  # the first row with which the text reaches the limit
        if reaching == len(sizes):
            self.left -= int(sizes[-1])
            return array
        before = int(sizes[reaching - 1]) if reaching else 0
        kept = array.slice(0, reaching + 1)
        if sizes[reaching] > self.left:  # it crosses the limit: cut it at the last character that fits
            cut = array[reaching].as_py().encode("utf-8")[: self.left - before].decode("utf-8", "ignore")
            kept = pa.concat_arrays([array.slice(0, reaching), pa.array([cut], pa.large_string())])
        self.left, self.exhausted = 0, True
        return kept

    def end_document(self) -> None:
        """A text file read as one document has ended: it was one row."""
        if self.unit == "rows" and not self.exhausted:
            self.left -= 1
            self.exhausted = self.left == 0


def apply_limit(
    shards: Sequence[Shard], limit: tuple[str, int], text_column: str = "text", pretokenizer: Pretokenizer | None = None
) -> list[Shard]:
    """The shards that hold the first `limit` of the input (("rows" | "bytes", amount): documents in
    the shards' order, within each in file order, after sampling): those read whole as they are,
    and the one where the limit runs out with the rest of the budget (`Shard.budget`); the shards
    after it are left out. It reads the input up to the limit to find out where that is, here,
    once, so that both engines, whose workers read shards independently, read exactly the same."""
    budget = _Budget(*limit)
    planned = []
    for shard in shards:
        left = budget.left
        for _ in _selected_batches(shard, text_column, pretokenizer, None, budget):
            pass
        if budget.exhausted:
            planned.append(replace(shard, budget=(budget.unit, left)))
            break
        planned.append(shard)
    return planned


def with_options(
    shards: Iterable[Shard], text_format: str = "doc", sample: float | None = None, seed: int = 0
) -> list[Shard]:
    """The shards, to be read with these options (see `Shard`)."""
    return [replace(s, text_format=text_format, sample=sample, seed=seed) for s in shards]


def select_documents(
    batches: Iterable[pa.Array], sample: float | None = None, seed: int = 0, limit: tuple[str, int] | None = None
) -> Iterator[pa.LargeStringArray]:
    """In-memory documents in batches, sampled and limited by the rules files are (`sample_mask`,
    `_Budget`)."""
    budget = _Budget(*limit) if limit is not None else None
    for array in batches:
        array = array.cast(pa.large_string()) if array.type != pa.large_string() else array
        if sample is not None:
            array = array.filter(pa.array(sample_mask(array, sample, seed)))
        if budget is not None:
            array = budget.take(array)
        yield array
        if budget is not None and budget.exhausted:
            return


def describe_inputs(paths: Sequence[str], settings: dict) -> str:
    """One line for the command's summary: the files by kind, how text files were read, and the
    sample and limit (`settings` as the manifest records them)."""
    kinds: dict[str, int] = {}
    for path in paths:
        kind = "text" if path == STDIN or kind_of(path) == "txt" else kind_of(path)
        kinds[kind] = kinds.get(kind, 0) + 1
    names = {"parquet": "Parquet", "jsonl": "JSON lines", "json": "JSON", "csv": "CSV", "tsv": "TSV"}
    parts = [f"{n} {names.get(kind, kind)}" for kind, n in sorted(kinds.items())]
    line = ", ".join(parts) if parts else "in-memory texts"
    if "text" in kinds:
        how = "one document per line" if settings.get("text_format") == "lines" else "one document per file"
        line += f"; text files read {how} (--text-format {settings.get('text_format', 'doc')})"
    if settings.get("sample") is not None:
        line += f"; --sample {settings['sample']:g} (seed {settings.get('seed', 0)})"
    if settings.get("limit") is not None:
        line += f"; --limit {settings['limit']}"
    return line


# --- the formats ---------------------------------------------------------------------------------


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
        text = _decode(data[:end], label, offset)
        lines = text.split("\n")
        if not eof or text.endswith("\n") or not text:
            lines.pop()  # after the last newline: nothing, or the start of a line still being read
        docs = [line[:-1] if line.endswith("\r") else line for line in lines]
        yield pa.array([d for d in docs if d], pa.large_string()), end + (skipped if first else 0)
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
    text = _decode(raw[start:], _label(shard), start)
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
                raise InputError(
                    f"{shard.path}: element {i}: no field {text_column!r}; choose one with text_column",
                    parameter="text_column",
                )
            record = record[text_column]
        if record is not None and not isinstance(record, str):
            raise InputError(f"{shard.path}: element {i}: holds {type(record).__name__}, not a string")
        texts.append(record)
    for i in range(0, max(len(texts), 1), BATCH_ROWS):
        part = texts[i : i + BATCH_ROWS]
        yield pa.array(part, pa.large_string()), len(raw) * len(part) // max(len(texts), 1)


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
            yield _decode(line, label, start)

    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # documents are longer than csv's default 128 KiB
    reader = csv.reader(lines(), delimiter="\t" if shard.kind == "tsv" else ",")
    try:
        header = next(reader, None)
        if header is None:
            return
        if text_column not in header:
            raise InputError(
                f"{shard.path}: no column {text_column!r} (columns: {', '.join(header) or 'none'}); "
                "choose one with text_column",
                parameter="text_column",
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
                yield pa.array(texts, pa.large_string()), position[0] - reported
                texts, reported = [], position[0]
        yield pa.array(texts, pa.large_string()), position[0] - reported
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
        text = _decode(line, label, start)
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


# --- in-memory documents -------------------------------------------------------------------------


def iter_texts(
    texts: object,
    text_column: str = "text",
    sample: float | None = None,
    seed: int = 0,
    limit: tuple[str, int] | None = None,
    batch_rows: int = 8192,
) -> Iterator[str | None]:
    """The documents of what `train(texts)` was given: an iterable of strings (None: a null row), of
    dicts (rows: the text in their `text_column` field), or a Hugging Face `datasets.Dataset` /
    `IterableDataset` (duck-typed, read `batch_rows` at a time, never converted whole), sampled and
    limited as files are. A bare string is refused here, at once: iterating it would train on its
    characters (rows are checked as they are read)."""
    if isinstance(texts, (str, bytes, bytearray)):
        raise TypeError(
            f"texts: expected an iterable of documents, such as a list of str, got a {type(texts).__name__}; "
            "pass [text] to train on one document, or files=path to read a file"
        )
    if isinstance(texts, dict):
        raise TypeError("texts: expected an iterable of documents, got a dict; pass a list of dicts (one per row)")
    if _is_dataset(texts):
        documents = _dataset_texts(texts, text_column, batch_rows)
    elif isinstance(texts, pa.Table) or (hasattr(texts, "columns") and hasattr(texts, "iloc")):  # or pandas'
        names = texts.column_names if isinstance(texts, pa.Table) else list(texts.columns)
        if text_column not in names:  # iterating a table would give its column names
            raise InputError(f"texts: the table has no column {text_column!r}; choose one with text_column",
                             parameter="text_column")  # fmt: skip
        documents = _row_texts(texts[text_column].to_pylist() if isinstance(texts, pa.Table) else texts[text_column],
                               text_column)  # fmt: skip
    elif isinstance(texts, (pa.Array, pa.ChunkedArray)):
        documents = iter(texts.to_pylist())
    elif not isinstance(texts, Iterable):
        raise TypeError(f"texts: expected an iterable of documents, such as a list of str, got {type(texts).__name__}")
    else:
        documents = _row_texts(texts, text_column)
    if sample is None and limit is None:
        return documents
    batches = (pa.array(batch, pa.large_string()) for batch in _batched(documents, batch_rows))
    return (text for array in select_documents(batches, sample, seed, limit) for text in array.to_pylist())


def _is_dataset(texts: object) -> bool:
    """A Hugging Face `datasets.Dataset` or `IterableDataset` (or anything shaped like one)."""
    return all(hasattr(texts, name) for name in ("iter", "select_columns", "column_names"))


def _dataset_texts(dataset, text_column: str, batch_rows: int) -> Iterator[str | None]:
    columns = dataset.column_names
    if columns is not None and text_column not in columns:
        raise InputError(
            f"texts: the dataset has no column {text_column!r} (columns: {', '.join(columns) or 'none'}); "
            "choose one with text_column",
            parameter="text_column",
        )
    row = 0
    for batch in dataset.select_columns([text_column]).iter(batch_size=batch_rows):
        for value in batch[text_column]:
            if value is not None and not isinstance(value, str):
                raise InputError(f"texts: row {row}: column {text_column!r} holds {type(value).__name__}, not a string")
            row += 1
            yield value


def _row_texts(rows: Iterable, text_column: str) -> Iterator[str | None]:
    """Strings as they are; dicts (any mapping) by their `text_column` field; anything else refused."""
    from collections.abc import Mapping

    for row, value in enumerate(rows):
        if isinstance(value, Mapping):
            if text_column not in value:
                raise InputError(
                    f"texts: row {row} has no field {text_column!r} (fields: {', '.join(map(str, value)) or 'none'}); "
                    "choose one with text_column",
                    parameter="text_column",
                )
            value = value[text_column]
            if value is not None and not isinstance(value, str):
                raise InputError(f"texts: row {row}: field {text_column!r} holds {type(value).__name__}, not a string")
        elif value is not None and not isinstance(value, str):
            raise TypeError(f"texts: row {row} is a {type(value).__name__}, not a str or a dict")
        yield value


def _batched(items: Iterator, n: int) -> Iterator[list]:
    batch = []
    for item in items:
        batch.append(item)
        if len(batch) >= n:
            yield batch
            batch = []
    if batch:
        yield batch

"""One input file, a `Shard`: where it is (a local path, an fsspec URL, or stdin's bytes), how it
is read (its kind, from its suffix, and the reading options), how it is decompressed, and its
fingerprint.

The suffix decides how a file is read: `.parquet`/`.pq`, `.jsonl`/`.ndjson`, `.json`, `.csv`/`.tsv`;
any other file is UTF-8 text (see `bpe.inputs.readers`). A compression suffix (`.gz`, `.zst`,
`.bz2`, `.xz`) is decompressed on the fly by fsspec's codecs, and the suffix before it decides the
format.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import BinaryIO

from bpe import storage
from bpe.errors import InputError
from bpe.storage import file_type

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
        return None if self.data is not None else compression_of(self.path)

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
                raise InputError(f"{self.path}: not a regular file ({file_type(mode)})")
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
        return decompressing(raw, self)

    def fingerprint(self) -> dict:
        """Path, size and SHA-256 of the content as stored: what makes a shard the same shard."""
        with self.open_raw() as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
        return {"path": self.path, "size": self.size, "sha256": digest}


def decompressing(raw: BinaryIO, shard: Shard) -> BinaryIO:
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


def compression_of(path: str) -> str | None:
    """The codec a path's suffix names (fsspec's name), or None for an uncompressed file."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in COMPRESSIONS:
        return None
    from fsspec.utils import infer_compression

    return infer_compression(path) or COMPRESSIONS[suffix]


def kind_of(path: str) -> str:
    """How a file is read, from its suffix (the one before a compression suffix): parquet, jsonl,
    json, csv, tsv, or txt for any other (`train.en`, `README`, `corpus.txt.gz`)."""
    stem = path
    if compression_of(path) is not None:
        stem = os.path.splitext(path)[0]
    return KINDS.get(os.path.splitext(stem)[1].lower(), "txt")


def with_options(
    shards: Iterable[Shard], text_format: str = "doc", sample: float | None = None, seed: int = 0
) -> list[Shard]:
    """The shards, to be read with these options (see `Shard`)."""
    return [replace(s, text_format=text_format, sample=sample, seed=seed) for s in shards]


@dataclass(frozen=True)
class StreamShard(Shard):
    """An input read as it comes, once (standard input for `bpe encode`), never closed."""

    stream: BinaryIO | None = field(default=None, repr=False, compare=False)

    def open_raw(self) -> BinaryIO:
        return _Borrowed(self.stream)  # type: ignore[return-value]


class _Borrowed(io.RawIOBase):
    """A stream read through without closing it (stdin stays open for whoever reads it next)."""

    def __init__(self, stream: BinaryIO) -> None:
        super().__init__()
        self._stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        return self._stream.readinto(buffer) or 0

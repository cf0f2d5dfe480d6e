"""The writing stage of `encode_inputs`: the output formats (`OUTPUT_FORMATS`) and where they go.

`txt` is one line of space-separated ids per document, `jsonl` one `{"ids": [...]}` per document,
`npy` one flat array and `bin` the same ids, raw, as nanoGPT's `train.bin`; the binary ones as
uint16 when every id fits, else uint32. The offsets file says where each document starts in the
flat sequence (an int64 .npy of documents + 1 entries). A file is written under a temporary name
beside it and renamed into place when complete (`bpe.storage.StagedFile`).
"""

from __future__ import annotations

import io
import os
import sys
from typing import IO, BinaryIO

import numpy as np

from bpe.engine.errors import Spelling
from bpe.errors import SettingsError
from bpe.storage import StagedFile

OUTPUT_FORMATS = ("txt", "jsonl", "npy", "bin")
SUFFIX_FORMATS = {".npy": "npy", ".bin": "bin", ".jsonl": "jsonl", ".ndjson": "jsonl"}
TEXT_IDS = 1 << 16  # ids turned into text at a time
NPY_HEADER_BYTES = 128  # room kept for the .npy header, written last: it holds the length


def output_format(requested: str | None, out: str | None, names: Spelling = Spelling()) -> str:
    """`format`, or the one `out`'s suffix names (.npy, .bin, .jsonl), else txt."""
    if requested is not None:
        if requested not in OUTPUT_FORMATS:
            raise SettingsError(
                f"{names('format')}: expected one of {', '.join(OUTPUT_FORMATS)}, got {requested!r}",
                parameter="format",
            )
        return requested
    return SUFFIX_FORMATS.get(os.path.splitext(out or "")[1].lower(), "txt")


def check_distinct(out: str | None, offsets: str | None, names: Spelling = Spelling()) -> None:
    """Refuse `out` and `offsets` naming one file (`ids.npy`, `./ids.npy`, through a symlinked
    directory): each would be written over the other. Checked before anything is written."""
    if out is not None and offsets is not None and _replaced(out) == _replaced(offsets):
        raise SettingsError(
            f"{names('out')} {out} and {names('offsets')} {offsets} name the same file; give each its own path",
            parameter="offsets",
        )


def _replaced(path: str) -> str:
    """The file that writing `path` puts in place: its directory resolved and its name (a symlink
    there is replaced, not followed), or, for a device or FIFO written in place, the path resolved."""
    if os.path.exists(path) and not os.path.isfile(path):
        return os.path.realpath(path)
    directory, name = os.path.split(os.path.abspath(path))
    return os.path.join(os.path.realpath(directory), name)


class Target:
    """Where an output goes: stdout, or `path`, published whole by `bpe.storage.StagedFile` (a
    temporary file beside it renamed into place by `commit`; an existing file refused unless
    `force`; `abort` removes the temporary file; /dev/null or a FIFO written in place). `shown`
    names it in errors (`out ids.npy`)."""

    def __init__(self, path: str | None, binary: bool, force: bool, shown: str, replace_hint: str) -> None:
        self.path, self.binary = path, binary
        self.file = None
        if path is not None:
            self.file = StagedFile(path, force=force, shown=shown, replace_hint=replace_hint, fsync=False)

    def open(self) -> IO:
        if self.file is None:
            return sys.stdout.buffer if self.binary else sys.stdout
        stream: IO = self.file.open()
        if self.binary:
            return stream
        return io.TextIOWrapper(stream, encoding="utf-8", newline="\n")

    def commit(self) -> None:
        if self.file is not None:
            self.file.publish()

    def abort(self) -> None:
        if self.file is not None:
            self.file.discard()


class TextWriter:
    """Documents as text: `prefix`, the ids joined by `separator`, `suffix`; a document may come in
    parts over several batches."""

    def __init__(self, stream: IO[str], prefix: str, separator: str, suffix: str, n_vocab: int) -> None:
        self.stream, self.prefix, self.separator, self.suffix = stream, prefix, separator, suffix
        self._names = [str(i) for i in range(n_vocab)]  # faster than str() of each id
        self._open = False  # a document's prefix is written, its suffix not yet
        self._any = False  # the open document has ids written

    def write(self, ids: np.ndarray, ends: np.ndarray) -> None:
        name, separator, parts = self._names.__getitem__, self.separator, []
        start = 0
        for end, closes in [*((e, True) for e in ends.tolist()), (len(ids), False)]:
            if start == end and not closes:
                break
            if not self._open:
                parts.append(self.prefix)
                self._open, self._any = True, False
            for at in range(start, end, TEXT_IDS):  # as Python ints a few at a time: 36 bytes each
                if self._any:
                    parts.append(separator)
                parts.append(separator.join(map(name, ids[at : min(at + TEXT_IDS, end)].tolist())))
                self._any = True
            if closes:
                parts.append(self.suffix)
                self._open = False
            start = end
        self.stream.write("".join(parts))

    def close(self) -> None:
        if self._open:
            self.stream.write(self.suffix)
            self._open = False


class BinaryWriter:
    """Ids as raw little-endian integers of `dtype` (nanoGPT's train.bin), or with `npy` as a .npy
    file of one flat array: its header, which holds the length, is written at the end, into room
    kept for it at the start."""

    def __init__(self, stream: BinaryIO, dtype: np.dtype, npy: bool) -> None:
        self.stream, self.dtype, self.npy, self.count = stream, np.dtype(dtype).newbyteorder("<"), npy, 0
        if npy:
            stream.write(npy_header(self.dtype, 0))

    def write(self, ids: np.ndarray, ends: np.ndarray | None = None) -> None:
        self.stream.write(np.ascontiguousarray(ids, dtype=self.dtype).data)
        self.count += len(ids)

    def close(self) -> None:
        if self.npy:
            self.stream.seek(0)
            self.stream.write(npy_header(self.dtype, self.count))
            self.stream.seek(0, io.SEEK_END)


def ids_writer(stream: IO, fmt: str, dtype: np.dtype, n_vocab: int) -> TextWriter | BinaryWriter:
    """The writer of output format `fmt` (one of OUTPUT_FORMATS) on `stream`."""
    if fmt == "txt":
        return TextWriter(stream, "", " ", "\n", n_vocab)
    if fmt == "jsonl":
        return TextWriter(stream, '{"ids": [', ", ", "]}\n", n_vocab)
    return BinaryWriter(stream, dtype, npy=fmt == "npy")


def npy_header(dtype: np.dtype, length: int) -> bytes:
    """A version 1.0 .npy header for a flat array of `length` items, padded to NPY_HEADER_BYTES
    (a multiple of 64, as numpy aligns data), so that it can be rewritten in place with the length.

    >>> import io, numpy as np
    >>> data = npy_header(np.dtype("<u2"), 3) + np.array([1, 2, 3], "<u2").tobytes()
    >>> np.load(io.BytesIO(data)).tolist()
    [1, 2, 3]
    """
    text = f"{{'descr': '{np.dtype(dtype).str}', 'fortran_order': False, 'shape': ({length},), }}"
    room = NPY_HEADER_BYTES - 10  # magic, version and the header's length come first
    return b"\x93NUMPY\x01\x00" + room.to_bytes(2, "little") + text.ljust(room - 1).encode("latin1") + b"\n"


class OffsetsWriter:
    """Where each document starts in the flat sequence of ids, and where the last ends: an int64
    .npy of documents + 1 entries (document i is ids[offsets[i]:offsets[i + 1]])."""

    def __init__(self, stream: BinaryIO) -> None:
        self.array = BinaryWriter(stream, np.dtype(np.int64), npy=True)
        self.array.write(np.zeros(1, np.int64))
        self.base = 0

    def write(self, ids: np.ndarray, ends: np.ndarray) -> None:
        self.array.write(ends.astype(np.int64) + self.base)
        self.base += len(ids)

    def close(self) -> None:
        self.array.close()


def close_abandoned(stream: IO) -> None:
    """Close an output being given up: what it still buffers may not fit (a full disk), and is
    dropped rather than raised again, so that the temporary file is removed after it."""
    try:
        stream.close()
    except OSError:
        pass

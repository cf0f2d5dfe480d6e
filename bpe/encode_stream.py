"""`bpe encode`: token ids of files, stdin or text arguments, streamed in bounded memory.

Inputs are read by the training readers (`bpe.inputs`: every format, compression, `--text-column`,
`--text-format`), in batches of about `BATCH_BYTES` of text. A reader thread reads ahead, an
encoder thread encodes each batch on the tokenizer's threads (`Tokenizer.encode_batch_to_numpy`),
and the calling thread writes, so the three overlap and memory holds a few batches whatever the
size of the input. A text file read as one document comes in pieces cut where the split pattern
cannot join text across the cut (`bpe.inputs.formats.txt_chunks`): encoding the pieces gives exactly the ids
of the whole text.

Outputs (`FORMATS`): `txt` (one line of space-separated ids per document), `jsonl` (one
`{"ids": [...]}` per document), `npy` (one flat array) and `bin` (the same ids, raw, as nanoGPT's
`train.bin`), the binary ones as uint16 when every id fits, else uint32. `eot` appends the
tokenizer's end-of-text token after each document; `offsets` writes where each document starts in
the flat sequence (an int64 .npy of documents + 1 entries). A file is written under a temporary
name beside it and renamed into place when complete (`bpe.storage.StagedFile`); an existing one is
kept unless `force`.

A special token's text inside a document (`<|endoftext|>` typed into a web page) is an error naming
the file and document, as in `Tokenizer.encode`: it would otherwise become a document boundary
that no one put there. `allow_special` encodes it as the special token, `special_as_text` as text.
"""

from __future__ import annotations

import io
import os
import queue
import re
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, BinaryIO, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bpe.errors import InputError, SettingsError, SpecialTokenError
from bpe.inputs.discover import STDIN, Skipped, discover, stdin_shard
from bpe.inputs.formats import check_parquet
from bpe.inputs.read import read_batches
from bpe.inputs.shard import Shard, with_options
from bpe.storage import StagedFile

if TYPE_CHECKING:
    from bpe.tokenizer import Tokenizer

FORMATS = ("txt", "jsonl", "npy", "bin")
SUFFIX_FORMATS = {".npy": "npy", ".bin": "bin", ".jsonl": "jsonl", ".ndjson": "jsonl"}
BATCH_BYTES = 2 << 20  # text encoded at a time; a few batches are in memory at once
AHEAD = 2  # batches each stage may run ahead of the next
# A text file read as one document comes in pieces of about this size, several to a batch (encoded
# on as many threads). As a Python str a piece may take 4 bytes per character (one emoji does it).
PIECE_BYTES = 1 << 18
TEXT_IDS = 1 << 16  # ids turned into text at a time
NPY_HEADER_BYTES = 128  # room kept for the .npy header, written last: it holds the length
# An argument that is not a file but looks like one (`ten.txt`, `data/x`, `~/a`) is an error rather
# than text to encode: a mistyped file name would otherwise be encoded as its own letters.
_PATH_LIKE = re.compile(r"[^\s]*[/\\][^\s]*|~[^\s]*|[^\s.]+(\.[^\s.]+)*\.[A-Za-z][A-Za-z0-9]{0,7}")

T = TypeVar("T")


# --- what the arguments are ----------------------------------------------------------------------


@dataclass(frozen=True)
class Inputs:
    """What `bpe encode` reads: `text` (the arguments, as bytes as the command got them), or the
    `specs` (files, directories, globs, URLs, `-`) in the order given; `implicit_stdin` when no
    argument was given (the old form: stdin, quietly)."""

    specs: tuple[str, ...] = ()
    text: bytes | None = None
    implicit_stdin: bool = False


def classify_arguments(arguments: list[str], as_text: bool = False) -> Inputs:
    """Files or text? `as_text` (`--text`): the arguments, joined by spaces, are the text. Otherwise
    `-`, a URL and every argument naming an existing file, directory or glob match is an input; if
    none is, the arguments are text, as before files were read, unless one looks like a path
    (`ten.txt`, `data/x`): a file that does not exist is an error, never encoded as its name."""
    if as_text:
        # Python hands over invalid bytes in arguments as lone surrogates; this gives them back.
        return Inputs(text=" ".join(arguments).encode("utf-8", "surrogateescape"))
    if not arguments:
        return Inputs(specs=("-",), implicit_stdin=True)
    found = [a for a in arguments if _is_input(a)]
    if len(found) == len(arguments):
        return Inputs(specs=tuple(arguments))
    missing = [a for a in arguments if a not in found]
    if found or any(_PATH_LIKE.fullmatch(a) for a in missing):
        name = next((a for a in missing if _PATH_LIKE.fullmatch(a)), missing[0])
        raise InputError(f"{name}: no such file or directory (to encode the arguments as text, pass --text)")
    return Inputs(text=" ".join(arguments).encode("utf-8", "surrogateescape"))


def _is_input(argument: str) -> bool:
    import glob

    if argument == "-":
        return True
    if "://" in argument:
        return not argument.lower().startswith(("http://", "https://"))  # a web address in text is text
    local = argument[len("file://") :] if argument.startswith("file://") else argument
    return os.path.lexists(local) or (glob.has_magic(local) and bool(glob.glob(local)))


def find_shards(inputs: Inputs, text_format: str, text_column: str) -> tuple[list[Shard], Skipped]:
    """The shards to encode, in the order of the arguments (a directory's or glob's files sorted by
    path), each with `text_format`; Parquet files are checked before anything is read."""
    skipped = Skipped()
    if inputs.text is not None:
        shards = [Shard("arguments", "txt", len(inputs.text), data=inputs.text)]
    else:
        if inputs.specs.count("-") > 1:
            raise InputError("-: stdin is given twice; it can be read once")
        shards = []
        for spec in inputs.specs:
            shards += [stdin_shard(streamed=True)] if spec == "-" else discover([spec], skipped)
    shards = with_options(shards, text_format)
    for shard in shards:
        if shard.kind == "parquet":
            check_parquet(shard, text_column)
    return shards, skipped


# --- reading and encoding ------------------------------------------------------------------------


@dataclass
class _Batch:
    """Texts to encode at once. `ends[i]` is False where the document goes on in the next text (a
    text file read as one document comes in pieces); `read` counts bytes of the input files."""

    texts: list[str] = field(default_factory=list)
    ends: list[bool] = field(default_factory=list)
    text_bytes: int = 0
    read: int = 0
    nulls: int = 0
    origins: list[_Origin] = field(default_factory=list)

    def origin_of(self, index: int) -> str:
        """Where text `index` of the batch comes from: `data.parquet: document 12` (counting the
        file's documents from 0), or the file alone for a text file read as one document."""
        origin = next(o for o in reversed(self.origins) if o.start <= index)
        if origin.document is None:
            return origin.path
        return f"{origin.path}: document {origin.document + index - origin.start}"


@dataclass
class _Origin:
    """Texts `start`, `start + 1`, ... of a batch are documents `document`, `document + 1`, ... of
    the file `path` (None: pieces of a file read as one document)."""

    start: int
    path: str
    document: int | None


@dataclass
class _Encoded:
    """A batch's ids, and the positions in them where documents end (after the end-of-text token,
    with `eot`); ids after the last end belong to a document that goes on in the next batch."""

    ids: np.ndarray
    ends: np.ndarray
    text_bytes: int
    read: int
    nulls: int
    tokens: int  # ids of the text, less the end-of-text tokens added


def read_texts(
    shards: Iterable[Shard],
    text_column: str,
    tokenizer: Tokenizer,
    batch_bytes: int = BATCH_BYTES,
    drop_final_newline: bool = False,
) -> Iterator[_Batch]:
    """The documents of the shards, in batches of about `batch_bytes` of text. Null rows are
    skipped (and counted). `drop_final_newline`: stdin read as one document loses one final
    newline, as `bpe encode` always did (`echo` adds one)."""
    batch = _Batch()
    for shard in shards:
        strip = drop_final_newline and shard.path == STDIN
        whole = shard.kind == "txt" and shard.text_format == "doc"
        documents = 0
        for texts, ends, text_bytes, read, nulls in _documents(shard, text_column, tokenizer, strip):
            if texts:
                batch.origins.append(_Origin(len(batch.texts), shard.path, None if whole else documents))
                documents += len(texts)
            batch.texts += texts
            batch.ends += ends
            batch.text_bytes += text_bytes
            batch.read += read
            batch.nulls += nulls
            if batch.text_bytes >= batch_bytes:
                yield batch
                batch = _Batch()
    if batch.texts or batch.read or batch.nulls:
        yield batch


def _documents(
    shard: Shard, text_column: str, tokenizer: Tokenizer, drop_final_newline: bool
) -> Iterator[tuple[list[str], list[bool], int, int, int]]:
    """(texts, ends, text bytes, file bytes read, null rows) of each batch the shard's reader gives.
    A text file read as one document comes in pieces: each is held back until the next one shows
    that it was not the last."""
    batches = read_batches(shard, text_column, pretokenizer=tokenizer.pretokenizer, chunk_bytes=PIECE_BYTES)
    if not (shard.kind == "txt" and shard.text_format == "doc"):
        for array, read in batches:
            nulls = array.null_count
            if nulls:
                array = array.drop_null()
            texts = array.to_pylist()
            yield texts, [True] * len(texts), _utf8_bytes(array), read, nulls
        return
    held: tuple[str, int] = ("", 0)  # an empty file is one empty document
    first = True
    for array, read in batches:
        if len(array) == 0:  # the rest of a compressed file's bytes, for progress
            yield [], [], 0, read, 0
            continue
        if not first:
            yield [held[0]], [False], held[1], 0, 0
        held, first = (array[0].as_py(), _utf8_bytes(array)), False
        yield [], [], 0, read, 0
    text, size = held
    if drop_final_newline and text.endswith("\n"):
        text, size = text[:-1], size - 1
    yield [text], [True], size, 0, 0


def _utf8_bytes(array: pa.Array) -> int:
    return int(pc.sum(pc.binary_length(array)).as_py() or 0) if len(array) else 0


def encode_texts(
    batches: Iterable[_Batch],
    tokenizer: Tokenizer,
    num_threads: int,
    special_as_text: bool,
    eot: int | None,
    allow_special: bool = False,
) -> Iterator[_Encoded]:
    """Each batch encoded on `num_threads` threads, its pieces of one document joined, and `eot`
    (an id, or None) appended after each document that ends in it. A special token's text in a
    document is an error naming the document (so that no document can forge a boundary), unless
    `allow_special` encodes it as the special token or `special_as_text` as ordinary text."""
    allowed = "all" if allow_special else ()
    for batch in batches:
        try:
            ids, offsets = tokenizer.encode_batch_to_numpy(
                batch.texts, num_threads=num_threads, allowed_special=allowed, special_as_text=special_as_text
            )
        except SpecialTokenError as exc:
            raise SpecialTokenError(
                f"{batch.origin_of(exc.row or 0)}: holds the special token {exc.token!r} as text; pass "
                "--allow-special to encode it as the special token, or --special-as-text as ordinary text"
            ) from None
        tokens = len(ids)
        ends = offsets[1:][np.asarray(batch.ends, dtype=bool)] if batch.texts else np.zeros(0, np.int64)
        if eot is not None and len(ends):
            ids = np.insert(ids, ends, np.asarray(eot, dtype=ids.dtype))
            ends = ends + np.arange(1, len(ends) + 1)
        yield _Encoded(ids, ends, batch.text_bytes, batch.read, batch.nulls, tokens)


def ahead(items: Iterator[T], depth: int = AHEAD) -> Iterator[T]:
    """The items, produced by a thread of their own up to `depth` ahead of the consumer; an error
    there is raised here. Stopping early (an error, Ctrl-C) stops the thread at its next item."""
    slots: queue.Queue = queue.Queue(depth)
    stop = threading.Event()
    done = object()

    def put(entry: tuple[bool, object]) -> bool:
        while not stop.is_set():
            try:
                slots.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put((True, item)):
                    break
            else:
                put((True, done))
        except BaseException as exc:  # raised again in the consumer
            put((False, exc))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=produce, name="bpe-encode-ahead", daemon=True)
    thread.start()
    try:
        while True:
            ok, item = slots.get()
            if not ok:
                raise item  # type: ignore[misc]
            if item is done:
                return
            yield item  # type: ignore[misc]
    finally:
        stop.set()


# --- writing -------------------------------------------------------------------------------------


class _Target:
    """Where the output goes: stdout, or `path`, published whole by `bpe.storage.StagedFile` (a
    temporary file beside it renamed into place by `commit`; an existing file refused unless
    `force`; `abort` removes the temporary file; /dev/null or a FIFO written in place)."""

    def __init__(self, path: str | None, binary: bool, force: bool, flag: str = "--out") -> None:
        self.path, self.binary = path, binary
        self.file = None
        if path is not None:
            self.file = StagedFile(
                path, force=force, shown=f"{flag} {path}", replace_hint="use --force to replace it", fsync=False
            )

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


class _TextWriter:
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


class _BinaryWriter:
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


class _Offsets:
    """Where each document starts in the flat sequence of ids, and where the last ends: an int64
    .npy of documents + 1 entries (document i is ids[offsets[i]:offsets[i + 1]])."""

    def __init__(self, stream: BinaryIO) -> None:
        self.array = _BinaryWriter(stream, np.dtype(np.int64), npy=True)
        self.array.write(np.zeros(1, np.int64))
        self.base = 0

    def write(self, ids: np.ndarray, ends: np.ndarray) -> None:
        self.array.write(ends.astype(np.int64) + self.base)
        self.base += len(ids)

    def close(self) -> None:
        self.array.close()


# --- the command ---------------------------------------------------------------------------------


@dataclass
class Summary:
    """What an encode run did, for its last line on stderr (and for scripts and benchmarks)."""

    files: int = 0
    documents: int = 0
    nulls: int = 0
    text_bytes: int = 0
    tokens: int = 0
    ids_written: int = 0
    seconds: float = 0.0
    dtype: str = ""
    out: str = "stdout"
    format: str = "txt"
    skipped: str | None = None

    def line(self) -> str:
        """`encoded 292,218 documents from 8 file(s): 49.0 MB -> 12,705,101 tokens (3.854 bytes per
        token) in 5.2 s: 9.4 MB/s, 2,443,289 tokens/s; npy (uint16) -> ids.npy`. The tokens are the
        ids written; with end-of-text ids among them, `(12,412,883 of text + 292,218 end-of-text;
        3.948 bytes per text token)`."""
        s = max(self.seconds, 1e-9)
        nulls = f" ({self.nulls:,} null rows skipped)" if self.nulls else ""
        kind = f"{self.format} ({self.dtype})" if self.format in ("npy", "bin") else self.format
        return (
            f"encoded {self.documents:,} document(s){nulls} from {self.files} input(s): "
            f"{self.text_bytes / 1e6:,.1f} MB -> {self.ids_written:,} tokens{self._breakdown()} in "
            f"{self.seconds:.1f} s: {self.text_bytes / 1e6 / s:,.1f} MB/s, {self.ids_written / s:,.0f} tokens/s; "
            f"{kind} -> {self.out}"
        )

    def _breakdown(self) -> str:
        """` (3.854 bytes per token)`, or with end-of-text ids written, how many, and the bytes per
        token of the text alone."""
        end_of_text = self.ids_written - self.tokens
        parts = [f"{self.tokens:,} of text + {end_of_text:,} end-of-text"] if end_of_text else []
        if self.tokens:
            parts.append(f"{self.text_bytes / self.tokens:.3f} bytes per {'text ' if end_of_text else ''}token")
        return f" ({'; '.join(parts)})" if parts else ""


class _Progress:
    """One line on stderr, redrawn at most 4 times a second, when stderr is a terminal."""

    def __init__(self, total_read: int, enabled: bool) -> None:
        self.total, self.enabled = total_read, enabled and sys.stderr.isatty()
        self.started = self.last = time.perf_counter()
        self.read = self.text_bytes = self.tokens = 0

    def update(self, batch: _Encoded) -> None:
        self.read += batch.read
        self.text_bytes += batch.text_bytes
        self.tokens += len(batch.ids)  # as the summary counts them: the ids written
        now = time.perf_counter()
        if not self.enabled or now - self.last < 0.25:
            return
        self.last = now
        rate = self.text_bytes / 1e6 / max(now - self.started, 1e-9)
        share = f" ({100 * self.read / self.total:.0f}% of {self.total / 1e6:,.1f} MB read)" if self.total else ""
        sys.stderr.write(
            f"\rencoding: {self.text_bytes / 1e6:,.1f} MB{share}, {self.tokens:,} tokens, {rate:,.1f} MB/s\x1b[K"
        )
        sys.stderr.flush()

    def finish(self) -> None:
        if self.enabled and self.last > self.started:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


def output_format(requested: str | None, out: str | None) -> str:
    """`--format`, or the one `--out`'s suffix names (.npy, .bin, .jsonl), else txt."""
    if requested is not None:
        if requested not in FORMATS:
            raise SettingsError(f"--format: expected one of {', '.join(FORMATS)}, got {requested!r}")
        return requested
    return SUFFIX_FORMATS.get(os.path.splitext(out or "")[1].lower(), "txt")


def encode_inputs(
    tokenizer: Tokenizer,
    inputs: Inputs,
    *,
    out: str | None = None,
    format: str | None = None,
    force: bool = False,
    eot: bool = False,
    offsets: str | None = None,
    text_column: str = "text",
    text_format: str = "doc",
    num_threads: int | None = None,
    allow_special: bool = False,
    special_as_text: bool = False,
    progress: bool = True,
    batch_bytes: int | None = None,
) -> Summary:
    """Encode the inputs into `out` (stdout when None) as `format`; see the module's docstring."""
    pa.set_memory_pool(pa.system_memory_pool())  # jemalloc, Arrow's default, keeps freed batches
    fmt = output_format(format, out)
    if out == "-":
        out = None
    if fmt == "npy" and out is None:
        raise SettingsError("--format npy needs --out: the length, in the header, is known only at the end")
    if fmt in ("npy", "bin") and out is None and sys.stdout.isatty():
        raise SettingsError(f"--format {fmt}: binary ids are not written to a terminal; give --out or redirect")
    eot_id = None
    if eot:
        eot_id = tokenizer.eot_token
        if eot_id is None:
            raise SettingsError("--eot: this tokenizer has no end-of-text token (<|endoftext|> or an eos role)")
    threads = num_threads or _cores()
    check_distinct(out, offsets)
    target = _Target(out, fmt in ("npy", "bin"), force)
    offsets_target = _Target(offsets, True, force, flag="--offsets") if offsets else None
    shards, skipped = find_shards(inputs, text_format, text_column)
    summary = Summary(
        files=len(shards), dtype=tokenizer.ids_dtype.name, out=out or "stdout", format=fmt, skipped=skipped.summary()
    )
    started = time.perf_counter()
    meter = _Progress(sum(s.size for s in shards), progress)
    targets = [t for t in (target, offsets_target) if t is not None]
    stream = offsets_stream = None
    try:
        stream = target.open()
        writer: _TextWriter | _BinaryWriter
        if fmt == "txt":
            writer = _TextWriter(stream, "", " ", "\n", tokenizer.n_vocab)
        elif fmt == "jsonl":
            writer = _TextWriter(stream, '{"ids": [', ", ", "]}\n", tokenizer.n_vocab)
        else:
            writer = _BinaryWriter(stream, tokenizer.ids_dtype, npy=fmt == "npy")
        offsets_stream = offsets_target.open() if offsets_target is not None else None
        offsets_writer = _Offsets(offsets_stream) if offsets_stream is not None else None
        batches = read_texts(shards, text_column, tokenizer, batch_bytes or BATCH_BYTES, drop_final_newline=True)
        encoded = ahead(encode_texts(ahead(batches), tokenizer, threads, special_as_text, eot_id, allow_special))
        try:
            for batch in encoded:
                writer.write(batch.ids, batch.ends)
                if offsets_writer is not None:
                    offsets_writer.write(batch.ids, batch.ends)
                summary.documents += len(batch.ends)
                summary.nulls += batch.nulls
                summary.text_bytes += batch.text_bytes
                summary.tokens += batch.tokens
                summary.ids_written += len(batch.ids)
                meter.update(batch)
        finally:
            encoded.close()  # type: ignore[attr-defined]
            meter.finish()
        writer.close()
        if offsets_writer is not None:
            offsets_writer.close()
        for stream_ in (stream, offsets_stream):
            if stream_ is not None:
                stream_.flush()
                if stream_ not in (sys.stdout, sys.stdout.buffer):
                    stream_.close()
        for t in targets:
            t.commit()
    except BaseException:
        for stream_ in (stream, offsets_stream):
            if stream_ is not None and stream_ not in (sys.stdout, sys.stdout.buffer):
                _close_abandoned(stream_)
        for t in targets:
            t.abort()
        raise
    summary.seconds = time.perf_counter() - started
    return summary


def check_distinct(out: str | None, offsets: str | None) -> None:
    """Refuse `--out` and `--offsets` naming one file (`ids.npy`, `./ids.npy`, through a symlinked
    directory): each would be written over the other. Checked before anything is written."""
    if out is not None and offsets is not None and _replaced(out) == _replaced(offsets):
        raise SettingsError(f"--out {out} and --offsets {offsets} name the same file; give each its own path")


def _replaced(path: str) -> str:
    """The file that writing `path` puts in place: its directory resolved and its name (a symlink
    there is replaced, not followed), or, for a device or FIFO written in place, the path resolved."""
    if os.path.exists(path) and not os.path.isfile(path):
        return os.path.realpath(path)
    directory, name = os.path.split(os.path.abspath(path))
    return os.path.join(os.path.realpath(directory), name)


def _close_abandoned(stream: IO) -> None:
    """Close an output being given up: what it still buffers may not fit (a full disk), and is
    dropped rather than raised again, so that the temporary file is removed after it."""
    try:
        stream.close()
    except OSError:
        pass


def map_large_blocks() -> None:
    """Have glibc map each block of 256 KiB or more on its own, and unmap it when freed. By default
    it raises that threshold as such blocks are freed (to 32 MB), after which batches come from a
    heap that keeps the freed space: in `bpe encode`, tens of MB more at the peak. Process-wide,
    so the command calls it, not the library; a no-op where the C library is not glibc."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        mallopt = getattr(libc, "mallopt", None)
    except OSError:
        return
    if mallopt is not None and hasattr(libc, "gnu_get_libc_version"):
        mallopt(-3, 256 << 10)  # M_MMAP_THRESHOLD


def _cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return max(len(os.sched_getaffinity(0)), 1)
    return os.cpu_count() or 1

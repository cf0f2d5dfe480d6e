"""Training text: Parquet shards, .txt files (one document each) and .jsonl files, read in batches.

Inputs may be files, directories, globs or fsspec URLs (`file://`, and `s3://` and the like once
the filesystem package is installed). Every problem is reported as a one-line `InputError` that
names the file (and row, line or byte) at fault.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from bpe.errors import InputError

KINDS = {".parquet": "parquet", ".pq": "parquet", ".txt": "txt", ".jsonl": "jsonl"}
BATCH_ROWS = 16384
JSONL_BATCH_BYTES = 8 << 20


@dataclass(frozen=True)
class Shard:
    """One input file: a local path or an fsspec URL."""

    path: str
    kind: str
    size: int

    @property
    def is_url(self) -> bool:
        return "://" in self.path

    def open(self):
        if self.is_url:
            import fsspec

            return fsspec.open(self.path, "rb").open()
        return open(self.path, "rb")

    def fingerprint(self) -> dict:
        """Path, size and SHA-256 of the content: what makes a shard the same shard."""
        with self.open() as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
        return {"path": self.path, "size": self.size, "sha256": digest}


def _kind_of(path: str) -> str | None:
    return KINDS.get(os.path.splitext(path)[1].lower())


def discover(inputs: Sequence[str]) -> list[Shard]:
    """Expand files, directories, globs and URLs into shards, sorted by path, each once."""
    if not inputs:
        raise InputError("no input given")
    found: dict[str, Shard] = {}
    for spec in inputs:
        for shard in _expand(str(spec)):
            found.setdefault(shard.path, shard)
    return sorted(found.values(), key=lambda s: s.path)


def _expand(spec: str) -> list[Shard]:
    if "://" in spec and not spec.startswith("file://"):
        return _expand_url(spec)
    local = spec[len("file://") :] if spec.startswith("file://") else spec
    if glob.has_magic(local):
        paths = sorted(glob.glob(local, recursive=True))
        shards = [_local_shard(p, spec) for p in paths if os.path.isfile(p) and _kind_of(p)]
        if not shards:
            raise InputError(f"{spec}: matches no .parquet, .txt or .jsonl file")
        return shards
    if os.path.isdir(local):
        shards = []
        for root, dirs, files in os.walk(local):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(files):
                if _kind_of(name) and not name.startswith("."):
                    shards.append(_local_shard(os.path.join(root, name), spec))
        if not shards:
            raise InputError(f"{spec}: directory holds no .parquet, .txt or .jsonl file")
        return shards
    if not os.path.exists(local):
        raise InputError(f"{spec}: no such file or directory")
    if not _kind_of(local):
        raise InputError(f"{spec}: unsupported file type (expected .parquet, .txt or .jsonl)")
    return [_local_shard(local, spec)]


def _local_shard(path: str, spec: str) -> Shard:
    if not os.access(path, os.R_OK):
        raise InputError(f"{path}: permission denied")
    return Shard(os.path.abspath(path), _kind_of(path) or "", os.path.getsize(path))


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


def read_batches(shard: Shard, text_column: str = "text") -> Iterator[tuple[pa.LargeStringArray, int]]:
    """Documents of a shard in batches (nulls kept, for the caller to count and skip), each with
    its share of the file's size, so that progress can be shown in file bytes."""
    if shard.kind == "parquet":
        yield from _parquet_batches(shard, text_column)
    elif shard.kind == "txt":
        yield from ((batch, shard.size) for batch in _txt_batches(shard))
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
    if not (pa.types.is_string(field.type) or pa.types.is_large_string(field.type)):
        raise InputError(f"{shard.path}: column {text_column!r} holds {field.type}, not strings")
    return field


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


def _txt_batches(shard: Shard) -> Iterator[pa.LargeStringArray]:
    with shard.open() as f:
        raw = f.read()
    yield pa.array([_decode(raw, shard.path, 0)], pa.large_string())


def _jsonl_batches(shard: Shard, text_column: str) -> Iterator[tuple[pa.LargeStringArray, int]]:
    texts: list[str | None] = []
    pending = 0
    offset = 0
    with shard.open() as f:
        for line_no, line in enumerate(f, start=1):
            start = offset
            offset += len(line)
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

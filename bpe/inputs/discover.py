"""Finding the inputs: files, directories, globs, fsspec URLs (`file://`, and `s3://` and the like
once the filesystem package is installed) and `-` for stdin, expanded into shards, each once.

A file named explicitly is read (any unknown suffix as text); a directory walk or a glob leaves out
hidden and `_` names, known binary types and files with a NUL byte near the start, and says so
(`Skipped`). `describe_inputs` is the line the command's summary gives the inputs.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import stat
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from bpe import storage
from bpe.errors import InputError
from bpe.inputs.shard import Shard, StreamShard, compression_of, kind_of

if TYPE_CHECKING:
    from bpe.manifest import SettingsRecord

# File types a directory walk or a glob skips, as certainly not text (and refused when named).
BINARY_SUFFIXES = frozenset(
    ".7z .a .arrow .avi .avro .bin .bmp .ckpt .class .db .dll .doc .docx .dylib .epub .exe .feather .flac .gif "
    ".h5 .hdf5 .ico .jar .jpeg .jpg .lance .mkv .mov .mp3 .mp4 .npy .npz .o .ogg .onnx .orc .otf .pdf .pickle "
    ".pkl .png .ppt .pptx .pt .pth .pyc .rar .safetensors .so .sqlite .tar .tgz .tif .tiff .ttf .wav .webp "
    ".whl .woff .woff2 .xls .xlsx .zip".split()
)
SNIFF_BYTES = 8192  # a walked text file with a NUL byte in its first SNIFF_BYTES is skipped as binary
STDIN = "<stdin>"  # the path stdin (`-`) is known by in errors and in the manifest


def _refusal(path: str) -> str | None:
    """Why a named file cannot be read at all (None: it can be tried)."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix in BINARY_SUFFIXES:
        return f"a {suffix} file is not text (binary file types are refused; rename it if it holds text)"
    if compression_of(path) is not None and kind_of(path) == "parquet":
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
        return [stdin_shard()]
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


def stdin_shard(*, streamed: bool = False) -> Shard:
    """stdin as one input. Training reads it whole, here: its fingerprint is the hash of what was
    read, and the Dask workers get the text inside the shard (give large data as files), so a
    terminal is refused. `streamed` (encoding) reads it as it comes instead, typed or piped."""
    stream = sys.stdin
    if stream is None:
        raise InputError("-: no stdin to read")
    buffer = getattr(stream, "buffer", None)  # a text stream put in its place (tests, embedding) has none
    if streamed and buffer is not None:
        return StreamShard(STDIN, "txt", 0, stream=buffer)
    if not streamed and stream.isatty():
        raise InputError("-: stdin is a terminal; pipe text into it (... | bpe train - ...)")
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
        raise InputError(f"{path}: not a regular file ({storage.file_type(info.st_mode)})")
    if not os.access(path, os.R_OK):
        raise InputError(f"{path}: permission denied")
    return Shard(os.path.abspath(path), kind_of(path), info.st_size)


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
        # without fsspec's listings cache (as every use of a store here): a process that lists the
        # same place again (a notebook, a long-lived worker, flow runs in one process) must find the
        # files added since, and not a stale listing's
        fs, path = storage.filesystem(spec)
    except (ImportError, ValueError) as exc:
        raise InputError(f"{spec}: cannot open this URL ({exc}); install its fsspec filesystem package") from None
    protocol = spec.split("://", 1)[0]
    named = False
    try:
        if glob.has_magic(path):
            found = fs.glob(path, detail=True)
            paths = sorted(p for p, info in found.items() if info.get("type") != "directory")
            below = [p.rsplit("/", 1)[-1] for p in paths]
        elif fs.isdir(path):
            found = fs.find(path, detail=True)  # the sizes with the names: no request per file
            paths = sorted(found)
            below = [p[len(path.rstrip("/")) + 1 :] for p in paths]
        elif fs.exists(path):
            found = {path: fs.info(path)}
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
                size = found[p].get("size")
                shards.append(Shard(f"{protocol}://{p}", kind_of(p), int(fs.size(p) if size is None else size)))
            elif skipped is not None:
                skipped.append((f"{protocol}://{p}", reason))
    except InputError:
        raise
    except Exception as exc:  # remote filesystems raise their own error types
        raise InputError(f"{spec}: cannot list ({type(exc).__name__}: {exc})") from None
    if not shards:
        raise InputError(f"{spec}: matches no file to read{_skip_note(skipped)}")
    return shards


def describe_inputs(paths: Sequence[str], settings: SettingsRecord) -> str:
    """One line for the command's summary: the files by kind, how text files were read, and the
    sample and limit (`settings` as the manifest records them)."""
    kinds: dict[str, int] = {}
    for path in paths:
        kind = "text" if path == STDIN or kind_of(path) == "txt" else kind_of(path)
        kinds[kind] = kinds.get(kind, 0) + 1
    names = {"parquet": "Parquet", "jsonl": "JSON lines", "json": "JSON", "csv": "CSV", "tsv": "TSV"}
    parts = [f"{n} {names.get(kind, kind)}" for kind, n in sorted(kinds.items())]
    line = ", ".join(parts) if parts else "in-memory texts"
    text_format = settings.text_format or "doc"
    if "text" in kinds:
        how = "one document per line" if text_format == "lines" else "one document per file"
        line += f"; text files read {how} (--text-format {text_format})"
    if settings.sample is not None:
        line += f"; --sample {settings.sample:g} (seed {settings.seed or 0})"
    if settings.limit is not None:
        line += f"; --limit {settings.limit}"
    return line

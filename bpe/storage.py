"""Where shared files live: a local path or an fsspec URL (`s3://`, `gs://`, `file://`), one API.

Every file that crosses a process goes through here: the count cache, the Dask engine's scratch
(word buckets, checkpoints), held-out rows, versions, tokenizer output and `bpe encode`'s output.
Whatever is written is staged, then published whole: a file is written under a temporary name of
this process beside its place and renamed there (`StagedFile`, `write_file`); a directory (a
tokenizer, a version) is staged beside its place and renamed there (`publish_directory`,
`stage_directory` + `publish_staged`). On object storage each file is written locally, then
uploaded as one object, which readers see whole or not at all, and a directory is complete when
its `COMPLETE` marker is there, uploaded last. A failed write leaves nothing half-written, and an
existing file or directory is replaced only when the caller says so.

Endpoints and credentials come from the storage library's own settings (for S3: `AWS_ENDPOINT_URL`,
`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_DEFAULT_REGION`), never from ours.

>>> join("s3://bucket/cache/", "counts", "a.json")
's3://bucket/cache/counts/a.json'
>>> is_remote("s3://bucket/x"), is_remote("file:///tmp/x"), is_remote("/tmp/x")
(True, False, False)
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from bpe.errors import MissingExtra, full_disk, is_full
from bpe.leftovers import sweep, temporary_prefix

COMPLETE = "COMPLETE"  # marks a complete directory (object storage; a versioned store everywhere), written last
LOCAL_PROTOCOLS = ("file", "local")


def is_remote(path: str | Path) -> bool:
    """Whether `path` is a URL of a filesystem other than this machine's (s3://, gs://, ...)."""
    text = str(path)
    return "://" in text and text.split("://", 1)[0] not in LOCAL_PROTOCOLS


def local_path(path: str | Path) -> str:
    """A local path as the OS names it (`file:///tmp/x` -> `/tmp/x`)."""
    text = str(path)
    return text.split("://", 1)[1] if text.startswith(("file://", "local://")) else text


def join(base: str | Path, *parts: str) -> str:
    """`base`/`parts...`, as a URL for a URL and as a path for a path."""
    if is_remote(base):
        return "/".join([str(base).rstrip("/"), *(p.strip("/") for p in parts)])
    return os.path.join(local_path(base), *parts)


def beside(target: str | Path, suffix: str) -> str | None:
    """A sibling of `target`: its last name with `suffix` added, in the same directory or bucket
    (`tok/` -> `tok-300`, `s3://bucket/tok/` -> `s3://bucket/tok-300`). None when `target` has no
    name of its own to add to: a bucket (beside it would be another bucket), `/`, `.` or `..`.

    >>> beside("runs/tok/", "-300"), beside("s3://bucket/tok", "-300"), beside("file:///tmp/tok", "-300")
    ('runs/tok-300', 's3://bucket/tok-300', 'file:///tmp/tok-300')
    >>> [beside(t, "-300") for t in ("s3://bucket/", "s3://bucket", "/", ".", "./", "tok/..", "file:///")]
    [None, None, None, None, None, None, None]
    """
    text = str(target)
    scheme, sep, path = text.partition("://") if "://" in text else ("", "", text)
    path = path.rstrip("/")
    parent, _, name = path.rpartition("/")
    if name in ("", ".", "..") or (is_remote(text) and not parent):  # the first name of a URL is its bucket
        return None
    return f"{scheme}{sep}{path}{suffix}"


# The standard AWS variables, passed to s3fs as options when set: fsspec keeps one filesystem per
# distinct options, so a process whose endpoint or credentials change gets a filesystem for the new
# ones rather than the first it made.
_S3_OPTIONS = {
    "endpoint_url": "AWS_ENDPOINT_URL",
    "key": "AWS_ACCESS_KEY_ID",
    "secret": "AWS_SECRET_ACCESS_KEY",
    "token": "AWS_SESSION_TOKEN",
}


def fs_options(url: str) -> dict:
    """Options for the filesystem of `url` beyond fsspec's defaults: for s3://, the AWS_* settings
    in force now (see _S3_OPTIONS)."""
    if url.split("://", 1)[0] not in ("s3", "s3a"):
        return {}
    return {option: os.environ[name] for option, name in _S3_OPTIONS.items() if os.environ.get(name)}


def filesystem(url: str):
    """(fsspec filesystem, path within it) of a URL. Listings are not cached: other processes
    write the same store, and a stale listing would hide their versions."""
    import fsspec

    try:
        try:
            return fsspec.core.url_to_fs(url, use_listings_cache=False, **fs_options(url))
        except TypeError:  # a filesystem without a listings cache
            return fsspec.core.url_to_fs(url, **fs_options(url))
    except ImportError as exc:
        protocol = url.split("://", 1)[0]
        extra = "s3" if protocol in ("s3", "s3a") else None
        if extra:
            from bpe.install import install_extra

            how = install_extra(extra)
        else:
            how = f"install the fsspec package for {protocol}://"
        raise MissingExtra(f"{url}: {protocol}:// needs its filesystem package ({exc}): {how}") from None


FILE_TYPES = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def file_type(mode: int) -> str:
    """What a file that is not a regular file is, in words, for an error ("a FIFO")."""
    return next((name for test, name in FILE_TYPES if test(mode)), "not a file")


class Checked:
    """How `open_regular` refuses what it cannot read: the error class, the words after "not a
    regular file (a FIFO)" (", so not a tokenizer file"), and at most `limit` bytes, described
    by `limit_text` ("256 MiB, the most a tokenizer file may hold")."""

    def __init__(self, error: type[Exception], kind: str = "", limit: int | None = None, limit_text: str = "") -> None:
        self.error, self.kind, self.limit = error, kind, limit
        self.limit_text = limit_text or (f"{limit:,} bytes" if limit is not None else "")

    def regular(self, path: str | Path, info: os.stat_result) -> None:
        """Refuse a path whose `os.stat` (links followed) is not a regular file, or is too large."""
        if not stat.S_ISREG(info.st_mode):
            raise self.error(f"{path}: not a regular file ({file_type(info.st_mode)}){self.kind}")
        self.size(str(path), info.st_size)

    def size(self, where: str, size: int) -> None:
        if self.limit is not None and size > self.limit:
            raise self.error(f"{where}: holds {size:,} bytes, more than {self.limit_text}")


class _Bounded(io.RawIOBase):
    """A file's bytes, refused once more than the limit has been read (a file that grows while it
    is read, or one whose size the system does not report)."""

    def __init__(self, file: BinaryIO, path: str | Path, checked: Checked) -> None:
        self._file, self._path, self._checked, self._read = file, path, checked, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        try:
            n = self._file.readinto(buffer)
        except OSError as exc:
            raise self._checked.error(f"{self._path}: cannot read it ({exc.strerror or exc})") from None
        self._read += n or 0
        if self._checked.limit is not None and self._read > self._checked.limit:
            raise self._checked.error(f"{self._path}: holds more than {self._checked.limit_text}")
        return n or 0

    def close(self) -> None:
        self._file.close()
        super().close()


def open_regular(path: str | Path, checked: Checked) -> io.BufferedReader:
    """A file opened for reading bytes once it is known to be a regular file (a link to one is
    fine) of at most `checked.limit` bytes: a FIFO, device or directory is refused without a
    blocking open (a FIFO would wait for a writer forever, /dev/zero would fill memory), and so
    is one that grows past the limit as it is read. Errors are `checked.error`, one line naming
    `path`. A URL is opened on its filesystem, with the same limit."""
    if is_remote(path):
        fs, inner = filesystem(str(path))
        try:
            info = fs.info(inner)
        except FileNotFoundError:
            raise checked.error(f"{path}: missing") from None
        if info.get("type") == "directory":
            raise checked.error(f"{path}: not a regular file (a directory){checked.kind}")
        checked.size(str(path), int(info.get("size") or 0))
        return io.BufferedReader(_Bounded(fs.open(inner, "rb"), path, checked))
    local = local_path(path)
    try:
        checked.regular(path, os.stat(local))
        # O_NONBLOCK: should the path be swapped for a FIFO after the check, opening it does not wait.
        fd = os.open(local, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise checked.error(f"{path}: missing") from None
    except OSError as exc:
        raise checked.error(f"{path}: cannot read it ({exc.strerror})") from None
    try:
        checked.regular(path, os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise
    return io.BufferedReader(_Bounded(os.fdopen(fd, "rb", buffering=0), path, checked))


def read_regular(path: str | Path, checked: Checked) -> bytes:
    """The bytes of a file `open_regular` accepts."""
    with open_regular(path, checked) as f:
        return f.read()


@contextmanager
def naming_url(url: str | Path):
    """Inside, a URL that cannot be read (no credentials, no bucket, no endpoint, a refused
    connection: each library has its own errors) is one InputError naming it; our own errors, a
    missing file and any error of a local path pass through."""
    from bpe.errors import BpeError, InputError

    try:
        yield
    except (BpeError, FileNotFoundError):
        raise
    except Exception as exc:
        if not is_remote(url):
            raise
        reason = (str(exc).splitlines() or [""])[0]
        raise InputError(f"{url}: cannot read it ({type(exc).__name__}: {reason})") from None


def exists(path: str | Path) -> bool:
    if is_remote(path):
        fs, inner = filesystem(str(path))
        return fs.exists(inner)
    return os.path.exists(local_path(path))


def open_read(path: str | Path) -> BinaryIO:
    """The file opened for reading bytes (seekable: Parquet and NumPy readers seek)."""
    if is_remote(path):
        fs, inner = filesystem(str(path))
        return fs.open(inner, "rb")
    return open(local_path(path), "rb")


def read_bytes(path: str | Path) -> bytes:
    if is_remote(path):
        fs, inner = filesystem(str(path))
        return fs.cat_file(inner)
    with open(local_path(path), "rb") as f:
        return f.read()


def write_file(path: str | Path, write: Callable[[str], object]) -> str:
    """Call write(tmp) to fill a local temporary file, then put it at `path` whole: renamed into
    place (after fsync; see `StagedFile`) on a local filesystem, an existing file replaced;
    uploaded as one object elsewhere. Returns `path`."""
    target = str(path)
    if is_remote(target):
        fd, tmp = tempfile.mkstemp(prefix=f"bpe-upload-{os.getpid()}-")
        os.close(fd)
        try:
            write(tmp)
            fs, inner = filesystem(target)
            fs.put_file(tmp, inner)
        finally:
            os.unlink(tmp)
        return target
    target = local_path(target)
    os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
    staged = StagedFile(target, force=True)
    try:
        write(staged.temporary)
        staged.publish()
    except BaseException:
        staged.discard()
        raise
    return target


def file_digest(path: str | Path) -> str:
    """The BLAKE2b-256 digest (hex) of a file's bytes, local or remote, read in blocks."""
    digest = hashlib.blake2b(digest_size=32)
    with open_read(path) as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def write_file_digest(path: str | Path, write: Callable[[str], object]) -> str:
    """`write_file`, returning the digest (`file_digest`) of the bytes put at `path`: those of
    the temporary file, hashed before it is renamed or uploaded."""
    digests = []

    def write_and_hash(tmp: str) -> None:
        write(tmp)
        digests.append(file_digest(tmp))

    write_file(path, write_and_hash)
    return digests[0]


def write_bytes(path: str | Path, data: bytes) -> str:
    """Write `data` to `path` whole (see `write_file`)."""
    return write_file(path, lambda tmp: Path(tmp).write_bytes(data))


def copy(source: str | Path, target: str | Path) -> None:
    """Copy one file whole (a server-side copy when both ends are in one object store)."""
    if is_remote(source) and is_remote(target):
        fs, inner = filesystem(str(source))
        fs.copy(inner, filesystem(str(target))[1])
    elif is_remote(source):
        fs, inner = filesystem(str(source))
        write_file(target, lambda tmp: fs.get_file(inner, tmp))
    else:
        write_file(target, lambda tmp: shutil.copyfile(local_path(source), tmp))


def remove(path: str | Path) -> None:
    """Remove one file; a file already gone is not an error."""
    if is_remote(path):
        fs, inner = filesystem(str(path))
        try:
            fs.rm_file(inner)
        except FileNotFoundError:
            pass
    else:
        Path(local_path(path)).unlink(missing_ok=True)


def remove_tree(path: str | Path) -> None:
    """Remove a directory (or prefix) and everything in it; nothing there is not an error."""
    if is_remote(path):
        fs, inner = filesystem(str(path))
        try:
            fs.rm(inner, recursive=True)
        except FileNotFoundError:
            pass
    else:
        shutil.rmtree(local_path(path), ignore_errors=True)


def listing(url: str) -> list[str]:
    """Names of the entries directly under a remote directory (empty when there is none)."""
    fs, inner = filesystem(url)
    try:
        return sorted(entry.rstrip("/").rsplit("/", 1)[-1] for entry in fs.ls(inner, detail=False))
    except FileNotFoundError:
        return []


def sizes(url: str) -> dict[str, int]:
    """Name -> size in bytes of the files directly under a remote directory (empty when there is none)."""
    fs, inner = filesystem(url)
    try:
        entries = fs.ls(inner, detail=True)
    except FileNotFoundError:
        return {}
    return {
        entry["name"].rstrip("/").rsplit("/", 1)[-1]: int(entry.get("size") or 0)
        for entry in entries
        if entry.get("type") != "directory"
    }


@contextmanager
def downloaded(url: str, names: list[str]):
    """A local temporary directory holding those of `names` found under `url` (removed afterwards)."""
    fs, inner = filesystem(url)
    target = Path(tempfile.mkdtemp(prefix=f"bpe-download-{os.getpid()}-"))
    try:
        present = set(listing(url))
        for name in names:
            if name in present:
                fs.get_file(f"{inner.rstrip('/')}/{name}", str(target / name))
        yield target
    finally:
        shutil.rmtree(target, ignore_errors=True)


# -- publishing whole: a file, a directory ---------------------------------------------------------


class StagedFile:
    """A local file published whole: written under a temporary name beside `path`
    (`.<name>.tmp-<pid>`), then renamed into place by `publish`, or removed by `discard`. An
    existing file is refused unless `force`; a path that exists but is no regular file (/dev/null,
    a FIFO) is written in place, never replaced. `shown` names the file in messages (`--out
    ids.npy`), `replace_hint` says what replaces an existing one; `fsync`: flush the bytes to disk
    before the rename."""

    def __init__(
        self,
        path: str,
        *,
        force: bool,
        shown: str | None = None,
        replace_hint: str = "force=True replaces it",
        fsync: bool = True,
    ) -> None:
        from bpe.errors import InputError

        self.path, self.shown, self.fsync, self.in_place = path, shown or path, fsync, False
        if os.path.isdir(path):
            raise InputError(f"{self.shown}: is a directory")
        if os.path.exists(path) and not os.path.isfile(path):  # /dev/null, a FIFO: written to, never replaced
            self.temporary, self.in_place = path, True
            return
        if os.path.lexists(path) and not force:
            raise FileExistsError(f"{self.shown}: already exists ({replace_hint})")
        directory, name = os.path.split(os.path.abspath(path))
        if not os.path.isdir(directory):
            raise InputError(f"{self.shown}: no such directory {directory}")
        self.temporary = os.path.join(directory, f".{name}.tmp-{os.getpid()}")

    def open(self) -> BinaryIO:
        """The temporary file (or the device written in place) opened for writing bytes: a full
        disk (or quota) is an OutputError naming `shown` and how far the file got."""
        try:
            return io.BufferedWriter(_OutputFile(self))
        except OSError as exc:
            if not is_full(exc):
                raise
            raise full_disk(exc, self.shown) from exc

    def publish(self) -> None:
        """Put the written file in place."""
        if self.in_place:
            return
        if self.fsync:
            with open(self.temporary, "rb") as f:
                os.fsync(f.fileno())
        os.replace(self.temporary, self.path)

    def discard(self) -> None:
        """Remove the temporary file; nothing of it is left."""
        if not self.in_place:
            Path(self.temporary).unlink(missing_ok=True)


class _OutputFile(io.FileIO):
    """The file a `StagedFile` is written to: a full disk is an error naming the user's path, never
    the temporary file's."""

    def __init__(self, staged: StagedFile) -> None:
        super().__init__(staged.temporary, "wb")
        self.staged = staged

    def write(self, data) -> int:  # type: ignore[override]
        try:
            return super().write(data)
        except OSError as exc:
            if not is_full(exc):
                raise
            got = "" if self.staged.in_place else f"after writing {self.tell():,} bytes"
            raise full_disk(exc, self.staged.shown, got) from exc


def check_target(
    target: str | Path,
    owned: Sequence[str],
    *,
    force: bool,
    shown: str | None = None,
    replace_hint: str = "force=True replaces it",
    kind: str = "tokenizer",
    marked: bool = False,
) -> None:
    """Refuse, before any work is done, a `target` that `publish_staged` would refuse (a directory
    of this `kind` unless `force`, one holding other files only, a file; see `_refuse_existing`),
    or a place this process cannot write (probed by creating and removing an entry there).
    `shown` is how a write error names the target (`--out tok/`), `replace_hint` what replaces an
    existing directory ("use --force to replace it")."""
    shown = shown or str(target)
    from bpe.errors import BpeError, InputError

    if is_remote(target):
        try:
            present = listing(str(target))
            probe = join(str(target), f".bpe-probe-{os.getpid()}")
            write_bytes(probe, b"")
            remove(probe)
        except BpeError:
            raise
        except Exception as exc:  # no bucket, no credentials, no endpoint: each library has its own errors
            raise InputError(f"{shown}: cannot write there ({type(exc).__name__}: {exc})") from None
        _refuse_existing_remote(str(target), present, owned, force, replace_hint, kind, marked)
        return
    path = Path(local_path(target))
    _refuse_existing_local(path, owned, force, replace_hint, kind, marked)
    place = path.absolute()
    while not place.exists():
        place = place.parent
    if not place.is_dir():
        raise InputError(f"{shown}: {place} is a file, not a directory")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".bpe-probe-", dir=place))
    except OSError as exc:
        raise InputError(f"{shown}: cannot write in {place} ({exc.strerror})") from None


def _refuse_existing_remote(
    url: str, present: Sequence[str], owned: Sequence[str], force: bool, replace_hint: str, kind: str, marked: bool
) -> list[str]:
    """Refuse to publish at `url`, whose entries are `present`, when it holds a directory of this
    kind (unless `force`) or other files only; returns the entries the new directory replaces.
    A directory is of this kind when it holds `owned` files or the COMPLETE marker; a `marked` one
    only with the marker, and its files without one (an upload cut short) are written over."""
    ours = [name for name in present if name == COMPLETE or (not marked and name in owned)]
    if ours and not force:
        raise FileExistsError(f"{url}: already holds a {kind} ({replace_hint})")
    if present and not ours and not marked:
        raise FileExistsError(f"{url}: exists and holds other files; choose an empty or new prefix")
    return list(present) if marked else ours


def _refuse_existing_local(
    path: Path,
    owned: Sequence[str],
    force: bool,
    replace_hint: str,
    kind: str,
    marked: bool,
    staged: Path | None = None,
) -> None:
    """As `_refuse_existing_remote`, for a local directory: a file, or a directory holding files
    but no directory of this kind (for a `marked` kind: no COMPLETE marker), is refused. `staged`,
    the staging directory inside it, does not count."""
    if not path.exists():
        return
    if not path.is_dir():
        raise FileExistsError(f"{path}: exists and is not a directory")
    held = (path / COMPLETE).exists() if marked else any((path / name).exists() for name in owned)
    if held:
        if not force:
            raise FileExistsError(f"{path}: already holds a {kind} ({replace_hint})")
    elif any(entry != staged for entry in path.iterdir()):
        raise FileExistsError(f"{path}: exists and holds other files; choose an empty or new directory")


def stage_directory(target: str | Path) -> Path:
    """A new local directory to write a directory for `target` in, before `publish_staged`: beside
    `target` on a local filesystem (inside it when it exists, to be replaced), so that publishing
    is a rename; a temporary directory of this machine for an object store URL. What killed
    processes left there is swept first."""
    if is_remote(target):
        return Path(tempfile.mkdtemp(prefix=temporary_prefix("bpe-export-")))
    path = Path(local_path(target)).absolute()
    if path.exists():
        beside = path  # the staging directory sits inside: same filesystem, no other permission needed
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        beside = path.parent
    sweep(beside, f".{path.name}.tmp-")  # what a killed writer left
    staged = Path(tempfile.mkdtemp(prefix=temporary_prefix(f".{path.name}.tmp-"), dir=beside))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(staged, 0o777 & ~umask)
    return staged


def discard_staged(staged: Path) -> None:
    """Remove a staged directory and what was written in it."""
    shutil.rmtree(staged, ignore_errors=True)


def publish_staged(
    staged: Path,
    target: str | Path,
    *,
    owned: Sequence[str] = (),
    last: str,
    kind: str = "tokenizer",
    force: bool = False,
    replace_hint: str = "force=True replaces it",
    marked: bool = False,
) -> None:
    """Put what was written in `staged` (from `stage_directory(target)`) at `target` (a path or an
    object store URL) whole: renamed into place, or uploaded with `last` after the other files and
    the COMPLETE marker last. `owned` names the files a directory of this `kind` holds, `last` the
    one that names what the others are. An existing directory of this kind is kept unless `force`;
    one holding other files only is refused. `marked`: the directory counts only with its COMPLETE
    marker, on a local filesystem too (a versioned store). On success `staged` is gone; on failure
    it stays, for the caller to publish again or discard. A full disk (or quota) on a local
    filesystem is an OutputError naming `target` as given."""
    if is_remote(target):
        _publish_remote(staged, str(target), owned, last, kind, force, replace_hint, marked)
        return
    with _naming_full_disk(target, kind):
        _publish_local(staged, Path(local_path(target)).absolute(), owned, last, kind, force, replace_hint, marked)


def publish_directory(
    target: str | Path,
    write: Callable[[Path], object],
    *,
    owned: Sequence[str],
    last: str,
    kind: str = "tokenizer",
    force: bool = False,
    replace_hint: str = "force=True replaces it",
) -> None:
    """Check `target` (`check_target`), call write(staging_dir) on a staged directory, then publish
    it (`publish_staged`); nothing is left of the files when anything fails."""
    check_target(target, owned, force=force, replace_hint=replace_hint, kind=kind)
    with _naming_full_disk(None if is_remote(target) else target, kind):
        staged = stage_directory(target)
        try:
            write(staged)
            publish_staged(staged, target, owned=owned, last=last, kind=kind, force=force, replace_hint=replace_hint)
        except BaseException:
            discard_staged(staged)
            raise


@contextmanager
def _naming_full_disk(target: str | Path | None, kind: str):
    """A full disk (or quota) inside is an OutputError naming `target` as the user gave it (None:
    left as it is)."""
    from bpe.errors import OutputError

    try:
        yield
    except OSError as exc:
        if target is None or not is_full(exc) or isinstance(exc, OutputError):
            raise
        raise full_disk(exc, target, f"while writing the {kind} files") from exc


def mark_complete(url: str) -> None:
    """Write the COMPLETE marker of the directory at `url` (an object store's): last, once every
    other file is there."""
    write_bytes(join(url, COMPLETE), _marker())


def _marker() -> bytes:
    """The COMPLETE marker's content: when the directory was published (UTC)."""
    return f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n".encode()


def _publish_local(
    staged: Path, target: Path, owned: Sequence[str], last: str, kind: str, force: bool, replace_hint: str, marked: bool
) -> None:
    """A new directory is renamed into place; an existing one (with `force`) gets each file
    replaced by a rename, `last` last, and keeps every file not `owned`. A `marked` one gets its
    COMPLETE marker last (before the rename of a new one)."""
    _refuse_existing_local(target, owned, force, replace_hint, kind, marked, staged)
    for f in staged.iterdir():
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
    if staged.parent != target:
        if marked:
            _write_synced(staged / COMPLETE, _marker())
        os.rename(staged, target)
        return
    if marked:
        (target / COMPLETE).unlink(missing_ok=True)  # incomplete until every new file is there
    written = sorted((f.name for f in staged.iterdir()), key=lambda name: name == last)
    for name in written:
        os.replace(staged / name, target / name)
    for name in set(owned) - set(written):
        (target / name).unlink(missing_ok=True)
    staged.rmdir()
    if marked:
        _write_synced(target / COMPLETE, _marker())


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _publish_remote(
    staged: Path, url: str, owned: Sequence[str], last: str, kind: str, force: bool, replace_hint: str, marked: bool
) -> None:
    """Object storage: the files uploaded with `last` after the others and the COMPLETE marker
    last; readers ignore a directory without the marker. With `force`, the old marker goes first,
    so the directory reads incomplete until every new file is up."""
    replaced = _refuse_existing_remote(url, listing(url), owned, force, replace_hint, kind, marked)
    written = sorted((f.name for f in staged.iterdir()), key=lambda name: name == last)
    fs, inner = filesystem(url)
    base = inner.rstrip("/")
    if COMPLETE in replaced:
        fs.rm(f"{base}/{COMPLETE}")
    for name in set(replaced) - set(written) - {COMPLETE}:
        remove(join(url, name))
    for name in written:
        fs.put_file(str(staged / name), f"{base}/{name}")
    fs.pipe_file(f"{base}/{COMPLETE}", _marker())
    discard_staged(staged)

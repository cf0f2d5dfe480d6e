"""Where shared files live: a local path or an fsspec URL (`s3://`, `gs://`, `file://`), one API.

Every file that crosses a process goes through here: the count cache, the Dask engine's scratch
(word shards, checkpoints), held-out rows, versions and tokenizer output. A file is complete or
absent: on a local filesystem it is written to a temporary name of this process and renamed into
place; on object storage it is written locally, then uploaded as one object, which readers see
whole or not at all. A directory of files (a tokenizer) is complete when its `COMPLETE` marker
is there, and that marker is written last.

Endpoints and credentials come from the storage library's own settings (for S3: `AWS_ENDPOINT_URL`,
`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_DEFAULT_REGION`), never from ours.

>>> join("s3://bucket/cache/", "counts", "a.json")
's3://bucket/cache/counts/a.json'
>>> is_remote("s3://bucket/x"), is_remote("file:///tmp/x"), is_remote("/tmp/x")
(True, False, False)
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from bpe.errors import MissingExtra, full_disk, is_full
from bpe.leftovers import sweep, temporary_prefix

COMPLETE = "COMPLETE"  # the marker of a complete directory on object storage, written last
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
        how = f"pip install 'bpe-trainer[{extra}]'" if extra else f"install the fsspec package for {protocol}://"
        raise MissingExtra(f"{url}: {protocol}:// needs its filesystem package ({exc}): {how}") from None


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
    place (after fsync) on a local filesystem, uploaded as one object elsewhere. Returns `path`."""
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
    tmp = f"{target}.tmp-{os.getpid()}"
    try:
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
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


def upload_directory(local: Path, url: str, names: list[str] | None = None) -> None:
    """Upload the files of `local` under `url`, then the COMPLETE marker: a reader that requires the
    marker never takes a half-written directory for a whole one. An existing marker is removed
    first, so a directory being replaced reads as incomplete until the new files are all there."""
    fs, inner = filesystem(url)
    marker = f"{inner.rstrip('/')}/{COMPLETE}"
    if fs.exists(marker):
        fs.rm(marker)
    for name in names if names is not None else sorted(p.name for p in Path(local).iterdir()):
        fs.put_file(str(Path(local) / name), f"{inner.rstrip('/')}/{name}")
    fs.pipe_file(marker, b"complete\n")


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


# -- publishing a directory whole -------------------------------------------------------------------


def check_target(
    target: str | Path,
    owned: Sequence[str],
    *,
    force: bool,
    shown: str | None = None,
    replace_hint: str = "force=True replaces it",
) -> None:
    """Refuse, before any work is done, a `target` that `publish_directory` would refuse: one that
    holds `owned` files (a directory of this kind) unless `force`, one that holds other files only
    or is a file; or a place this process cannot write (probed by creating and removing an entry
    there). `shown` is how a write error names the target (`--out tok/`), `replace_hint` what
    replaces an existing directory ("use --force to replace it")."""
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
        ours = [name for name in present if name in owned or name == COMPLETE]
        if ours and not force:
            raise FileExistsError(f"{target}: already holds a tokenizer ({replace_hint})")
        if present and not ours:
            raise FileExistsError(f"{target}: exists and holds other files; choose an empty or new prefix")
        return
    path = Path(local_path(target))
    if path.exists():
        if not path.is_dir():
            raise FileExistsError(f"{path}: exists and is not a directory")
        if any((path / name).exists() for name in owned):
            if not force:
                raise FileExistsError(f"{path}: already holds a tokenizer ({replace_hint})")
        elif any(path.iterdir()):
            raise FileExistsError(f"{path}: exists and holds other files; choose an empty or new directory")
    place = path.absolute()
    while not place.exists():
        place = place.parent
    if not place.is_dir():
        raise InputError(f"{shown}: {place} is a file, not a directory")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".bpe-probe-", dir=place))
    except OSError as exc:
        raise InputError(f"{shown}: cannot write in {place} ({exc.strerror})") from None


def publish_directory(
    target: str | Path, write: Callable[[Path], object], *, owned: Sequence[str], last: str, force: bool = False
) -> None:
    """Call write(staging_dir), then put what it wrote at `target` (a path or an object store URL)
    whole: `owned` names the files a directory of this kind holds, `last` the one written last (it
    names what the others are). An existing directory holding `owned` files is kept unless
    `force`; a directory holding other files only is refused. A full disk (or quota) is an
    OutputError naming `target` as given; nothing is left of the files."""
    if is_remote(target):
        _publish_remote(str(target), write, owned, last, force)
        return
    try:
        _publish_local(Path(local_path(target)).absolute(), write, owned, last, force)
    except OSError as exc:
        if not is_full(exc):
            raise
        raise full_disk(exc, target, "while writing the tokenizer files") from exc


def _publish_local(target: Path, write, owned: Sequence[str], last: str, force: bool) -> None:
    """A new directory is staged beside `target` and renamed into place; an existing one (with
    `force`) gets each file replaced by a rename, `last` last, and keeps every file not `owned`."""
    check_target(target, owned, force=force)
    if target.exists():
        beside = target  # the staging directory sits inside: same filesystem, no other permission needed
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        beside = target.parent
    sweep(beside, f".{target.name}.tmp-")  # what a killed export left
    tmp = Path(tempfile.mkdtemp(prefix=temporary_prefix(f".{target.name}.tmp-"), dir=beside))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)
    try:
        write(tmp)
        for f in tmp.iterdir():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        if beside == target:
            _replace_files(tmp, target, owned, last)
        else:
            os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _publish_remote(url: str, write, owned: Sequence[str], last: str, force: bool) -> None:
    """Object storage: write(tmp_dir) locally, then upload the files with `last` after the others
    and the COMPLETE marker last; readers ignore a directory without the marker. With `force`, the
    old marker goes first, so the directory reads incomplete until every new file is up."""
    check_target(url, owned, force=force)
    ours = [name for name in listing(url) if name in owned or name == COMPLETE]
    with tempfile.TemporaryDirectory(prefix=temporary_prefix("bpe-export-")) as tmp:
        write(Path(tmp))
        written = sorted((f.name for f in Path(tmp).iterdir()), key=lambda name: name == last)
        remove(join(url, COMPLETE))
        for name in set(ours) - set(written) - {COMPLETE}:
            remove(join(url, name))
        upload_directory(Path(tmp), url, written)


def _replace_files(staged: Path, target: Path, owned: Sequence[str], last: str) -> None:
    """Move the staged files over those in `target`, `last` last, and drop `owned` files of the
    old directory that the new one does not have."""
    written = sorted((f.name for f in staged.iterdir()), key=lambda name: name == last)
    for name in written:
        os.replace(staged / name, target / name)
    for name in set(owned) - set(written):
        (target / name).unlink(missing_ok=True)
    staged.rmdir()

"""The versioned artifact store: `<root>/<name>/v0001/`, `v0002/`, ... and `<root>/<name>/latest`.

A version is staged in a local temporary directory and moved into place whole: on a local
filesystem by one rename; elsewhere (any fsspec URL) by an upload followed by a `COMPLETE` marker,
which readers require. Version numbers are reserved with an exclusive-create lock file, so two
concurrent runs never get the same one, and `latest` is moved last, and only forward.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import tempfile
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bpe.errors import SettingsError
from bpe.leftovers import process_is_gone

VERSION = re.compile(r"^v(\d{4,})$")
COMPLETE = "COMPLETE"
# A tokenizer's name is one path segment: it cannot climb out of the artifact root ("..") or nest.
ABANDONED_AFTER = 24 * 3600.0  # seconds after which another host's reservation is abandoned
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def check_name(name: str) -> str:
    """`name` if it is a safe tokenizer name (letters, digits, '.', '_', '-'; not starting with '.')."""
    if not isinstance(name, str) or not SAFE_NAME.fullmatch(name):
        raise SettingsError(
            f"name: expected letters, digits, '.', '_' or '-', starting with a letter or digit, got {name!r}",
            parameter="name",
        )
    return name


@dataclass
class Staged:
    """A version being written: fill `directory`, then `VersionStore.commit` it (or `abort`)."""

    version: str
    directory: Path


class VersionStore:
    """Versions of one tokenizer under `root` (a local path or an fsspec URL)."""

    def __init__(self, root: str, name: str) -> None:
        import fsspec

        self.url = f"{str(root).rstrip('/')}/{check_name(name)}"
        self.fs, self.base = fsspec.core.url_to_fs(self.url)
        self.local = "file" in (self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,))
        self.name = name

    # -- reading -----------------------------------------------------------------------------

    def versions(self) -> list[str]:
        """Complete versions, oldest first."""
        if not self.fs.exists(self.base):
            return []
        found = []
        for entry in self.fs.ls(self.base, detail=False):
            name = entry.rstrip("/").rsplit("/", 1)[-1]
            if VERSION.match(name) and self.fs.exists(f"{self.base}/{name}/{COMPLETE}"):
                found.append(name)
        return sorted(found, key=lambda v: int(v[1:]))

    def latest(self) -> str | None:
        """The version `latest` names (falling back to the newest complete one)."""
        pointed = self._pointer()
        if pointed:
            return pointed
        versions = self.versions()
        return versions[-1] if versions else None

    def _pointer(self) -> str | None:
        """The version `latest` names; anything but a version name (a tampered pointer) is ignored."""
        pointer = f"{self.base}/latest"
        named = None
        if self.local and os.path.islink(pointer):
            named = os.readlink(pointer)
        elif self.fs.exists(pointer) and self.fs.isfile(pointer):
            named = self.fs.cat_file(pointer).decode().strip()
        return named if named and VERSION.match(named) else None

    def path(self, version: str) -> str:
        """Where a version lives; only version names are accepted, so no path leaves the store."""
        if not VERSION.match(str(version)):
            raise SettingsError(f"{self.url}: {version!r} is not a version name (v0001, v0002, ...)")
        return f"{self.base}/{version}"

    def location(self, version: str) -> str:
        """A version as users name it: a path, or a URL with its protocol (`s3://bucket/.../v0002`)."""
        path = self.path(version)
        return path if self.local else f"{self.url}/{version}"

    def manifest(self, version: str) -> dict:
        return json.loads(self.fs.cat_file(f"{self.path(version)}/manifest.json"))

    def local_copy(self, version: str) -> Path:
        """A local directory holding the version (the directory itself on a local filesystem)."""
        if self.local:
            return Path(self.path(version))
        target = Path(tempfile.mkdtemp(prefix=f"bpe-{self.name}-{version}-"))
        self.fs.get(self.path(version) + "/", str(target), recursive=True)
        return target

    # -- writing -----------------------------------------------------------------------------

    def stage(self) -> Staged:
        """Reserve the next version number and a local directory to write it in."""
        self.fs.makedirs(self.base, exist_ok=True)
        self._sweep_abandoned()
        while True:
            # One listing for both: a committed version's directory appears before its lock goes, so
            # any single listing shows one or the other (two listings could miss both).
            names = self._names()
            taken = [int(v[1:]) for v in names if VERSION.match(v)]
            taken += [int(m.group(1)) for v in names if (m := re.match(r"^\.v(\d+)\.lock$", v))]
            number = max(taken, default=0) + 1
            version = f"v{number:04d}"
            lock = f"{self.base}/.{version}.lock"
            try:
                with self.fs.open(lock, "xb") as f:
                    f.write(f"{socket.gethostname()} {os.getpid()} {time.time()}\n".encode())
            except FileExistsError:
                continue  # another run holds this number
            if self.fs.exists(self.path(version)):
                # Another run reserved, wrote and released this number since the listing above: a
                # version moves into place before its lock goes, so holding the lock, we see it.
                self.fs.rm(lock)
                continue
            if self.local:
                directory = Path(self.base) / f".{version}.tmp-{uuid.uuid4().hex[:8]}"
                directory.mkdir()
            else:
                directory = Path(tempfile.mkdtemp(prefix=f"bpe-{self.name}-{version}-"))
            return Staged(version, directory)

    def _sweep_abandoned(self) -> None:
        """Drop the reservations of publishers that died between stage and commit (their lock, and
        on a local store their staging directory): the lock names its host, process and time; it
        is abandoned when that process is gone from this host, or, from another host, after a day."""
        for name in self._names():
            match = re.match(r"^\.(v\d+)\.lock$", name)
            if not match:
                continue
            try:
                host, pid, taken = self.fs.cat_file(f"{self.base}/{name}").decode().split()
                abandoned = (host == socket.gethostname() and process_is_gone(int(pid))) or (
                    time.time() - float(taken) > ABANDONED_AFTER
                )
            except (FileNotFoundError, ValueError):
                continue  # gone meanwhile, or being written, or not ours
            if abandoned:
                if self.local:
                    for stale in Path(self.base).glob(f".{match.group(1)}.tmp-*"):
                        shutil.rmtree(stale, ignore_errors=True)
                self.fs.rm(f"{self.base}/{name}")

    def commit(self, staged: Staged) -> str:
        """Move the staged version into place, then move `latest` to it if it is the newest."""
        (staged.directory / COMPLETE).write_text(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n")
        final = self.path(staged.version)
        if self.local:
            os.chmod(staged.directory, 0o755)
            os.rename(staged.directory, final)
        else:
            marker = staged.directory / COMPLETE
            files = [p for p in staged.directory.iterdir() if p != marker]
            for p in files:
                self.fs.put_file(str(p), f"{final}/{p.name}")
            self.fs.put_file(str(marker), f"{final}/{COMPLETE}")
            shutil.rmtree(staged.directory, ignore_errors=True)
        self._advance_latest(staged.version)
        self.fs.rm(f"{self.base}/.{staged.version}.lock")
        return final

    def abort(self, staged: Staged) -> None:
        """Forget a staged version: nothing of it stays, and `latest` does not move."""
        shutil.rmtree(staged.directory, ignore_errors=True)
        try:
            self.fs.rm(f"{self.base}/.{staged.version}.lock")
        except FileNotFoundError:
            pass

    def _names(self) -> list[str]:
        try:
            entries = self.fs.ls(self.base, detail=False)
        except FileNotFoundError:  # object storage has no empty directories: nothing published yet
            return []
        return [e.rstrip("/").rsplit("/", 1)[-1] for e in entries]

    def _advance_latest(self, version: str) -> None:
        with self._lock(".latest.lock"):
            current = self._pointer()
            if current and VERSION.match(current) and int(current[1:]) >= int(version[1:]):
                return
            pointer = f"{self.base}/latest"
            if self.local:
                tmp = f"{pointer}.tmp-{uuid.uuid4().hex[:8]}"
                os.symlink(version, tmp)
                os.replace(tmp, pointer)
            else:
                self.fs.pipe_file(pointer, f"{version}\n".encode())

    @contextmanager
    def _lock(self, name: str, stale_after: float = 60.0):
        path = f"{self.base}/{name}"
        deadline = time.monotonic() + 2 * stale_after
        while True:
            try:
                with self.fs.open(path, "xb") as f:
                    f.write(str(time.time()).encode())
                break
            except FileExistsError:
                age = self._lock_age(path)
                if age is None:
                    continue  # released meanwhile
                if age > stale_after:
                    self.fs.rm(path)  # left by a run that died holding it
                    continue
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{path}: lock held too long") from None
                time.sleep(0.05)
        try:
            yield
        finally:
            self.fs.rm(path)

    def _lock_age(self, path: str) -> float | None:
        """Seconds since a lock was taken: the time written in it or, while its holder has not
        written it yet (an empty file), the file's own modification time. None if it is gone."""
        try:
            text = self.fs.cat_file(path).decode().strip()
            taken = float(text) if text else self.fs.modified(path).timestamp()
        except FileNotFoundError:
            return None
        except ValueError:  # not written by us: judge by the file's age
            taken = self.fs.modified(path).timestamp()
        return time.time() - taken


def describe_versions(store: VersionStore) -> list[dict]:
    """One row per version for `bpe versions`: date, vocabulary, data, compression."""
    latest = store.latest()
    rows = []
    for version in store.versions():
        try:
            m = store.manifest(version)
        except (FileNotFoundError, json.JSONDecodeError):
            continue
        evaluation = m.get("evaluation") or {}
        rows.append(
            {
                "version": version,
                "latest": version == latest,
                "created": m.get("created", ""),
                "vocab_size": m.get("result", {}).get("vocab_size"),
                "shards": len(m.get("data", {}).get("shards") or []),
                "data_bytes": m.get("counts", {}).get("bytes"),
                "bytes_per_token": evaluation.get("bytes_per_token"),
            }
        )
    return rows

"""The versioned artifact store: `<root>/<name>/v0001/`, `v0002/`, ... and `<root>/<name>/latest`.

A version is staged in a local directory and published whole by `bpe.storage` (`stage_directory`,
`publish_staged`): on a local filesystem by one rename; elsewhere (any fsspec URL) by an upload
followed by the `COMPLETE` marker. Readers require the marker everywhere, and a published version
is never written over. Version numbers are reserved with an exclusive-create lock file, so two
concurrent runs never get the same one, and `latest` is moved last: by a publish only forward, and
only for a version published as promoted (the main line, or an experiment run with promote=True).

`promote` and `rollback` move `latest` deliberately, backwards too, under the same lock as a
publish. Every move of `latest` (and every publish and prune) is appended to `history.jsonl` beside
the versions, rewritten whole (temporary name + rename, or one object) under that lock: the versions
themselves are never rewritten once published, the history has one order across all of them, and it
outlives the versions that retention removes. `rollback` goes back one step on the stack of
promotions this history gives (a publish or promote that moved `latest` pushes; a rollback pops).
"""

from __future__ import annotations

import errno
import getpass
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from bpe import storage
from bpe.errors import InputError, OutputError, SettingsError, full_disk
from bpe.formats.manifest_json import MANIFEST_FILE
from bpe.leftovers import process_is_gone, temporary_prefix
from bpe.manifest import Manifest
from bpe.storage import COMPLETE, Checked

VERSION = re.compile(r"^v(\d{4,})$")
HISTORY = "history.jsonl"  # one JSON object per line: every publish, promote, rollback and prune
# The history grows with the store's life, so it is read as a stream, a line at a time, with no
# bound on its size; a line longer than any event is not one (an event is a few hundred bytes).
HISTORY_FILE = Checked(InputError, ", so not a store's history")
LONGEST_EVENT = 64 << 10
MAIN, EXPERIMENT = "main", "experiment"  # a version's channel
# A tokenizer's name is one path segment: it cannot climb out of the artifact root ("..") or nest.
ABANDONED_AFTER = 24 * 3600.0  # seconds after which another host's reservation is abandoned
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# Filesystem faults that meet a retry again: no room (disk, quota, file size), no right, no such place.
LASTING_ERRNOS = frozenset(
    {
        errno.ENOSPC,
        errno.EDQUOT,
        errno.EFBIG,
        errno.EROFS,
        errno.EACCES,
        errno.EPERM,
        errno.ENAMETOOLONG,
        errno.ENOTDIR,
        errno.EISDIR,
        errno.ELOOP,
    }
)


def lasting(exc: BaseException) -> bool:
    """Whether `exc` is a filesystem fault that trying again would meet again (a full disk, a
    read-only or forbidden path), rather than a transient one (a dropped connection)."""
    return isinstance(exc, OSError) and not isinstance(exc, OutputError) and exc.errno in LASTING_ERRNOS


def check_name(name: str) -> str:
    """`name` if it is a safe tokenizer name (letters, digits, '.', '_', '-'; not starting with '.')."""
    if not isinstance(name, str) or not SAFE_NAME.fullmatch(name):
        raise SettingsError(
            f"name: expected letters, digits, '.', '_' or '-', starting with a letter or digit, got {name!r}",
            parameter="name",
        )
    return name


def who() -> str:
    """Who moved `latest`, for the history: user@host."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid()) if hasattr(os, "getuid") else "unknown"
    return f"{user}@{socket.gethostname()}"


def _lines(f: BinaryIO) -> Iterator[bytes]:
    """The lines of a file read a line at a time, each of at most LONGEST_EVENT bytes: the rest of
    a longer one is skipped, and it is given cut (no JSON object then)."""
    while line := f.readline(LONGEST_EVENT):
        if not line.endswith(b"\n") and len(line) == LONGEST_EVENT:
            while (rest := f.readline(LONGEST_EVENT)) and not rest.endswith(b"\n"):
                pass
        yield line


def describe_names(versions: list[str]) -> str:
    """The versions a store holds, for an error message: `versions: v0001, v0002` (abridged)."""
    if not versions:
        return "the store holds no versions"
    shown = versions if len(versions) <= 6 else [*versions[:2], "...", *versions[-3:]]
    return f"versions: {', '.join(shown)}"


@dataclass
class Promotions:
    """Where `latest` has been. `stack`: the versions it was moved to, oldest first, its top the
    current one; a publish or promote that moved it pushes, a rollback goes back down to the version
    it moved to. `rollback` moves `latest` to the nearest version below the top that is still in
    the store. `promoted`: every version that was ever `latest`."""

    latest: str | None
    stack: list[str] = field(default_factory=list)
    promoted: set[str] = field(default_factory=set)
    versions: list[str] = field(default_factory=list)

    @property
    def rollback_target(self) -> str | None:
        """The version `bpe rollback` would move `latest` to, or None."""
        existing = set(self.versions)
        for version in reversed(self.stack[:-1]):
            if version in existing and version != self.latest:
                return version
        return None

    @classmethod
    def replay(cls, history: list[dict], latest: str | None, versions: list[str]) -> Promotions:
        """The stack from the history's moves of `latest`; the pointer itself has the last word (a
        move whose history line was never written, say)."""
        stack: list[str] = []
        promoted: set[str] = set()

        def push(version: str) -> None:
            if not stack or stack[-1] != version:
                stack.append(version)
            promoted.add(version)

        def back_to(version: str) -> None:
            del stack[len(stack) - stack[::-1].index(version) :]

        for event in history:
            before, after = event.get("latest_before"), event.get("latest_after")
            if not isinstance(after, str) or not VERSION.match(after) or after == before:
                continue
            if event.get("action") == "rollback" and after in stack:
                back_to(after)
            else:
                push(after)
        if latest and (not stack or stack[-1] != latest):
            if latest in stack:
                back_to(latest)
            else:
                push(latest)
        return cls(latest, stack, promoted, list(versions))


@dataclass
class Removed:
    """A version a prune took out of the store: where its files were, and, if some could not be
    deleted, what stayed there and why (None: all gone)."""

    version: str
    location: str
    left: str | None = None


@dataclass
class Staged:
    """A version being written: fill `directory`, then `VersionStore.commit` it (or `abort`)."""

    version: str
    directory: Path


class VersionStore:
    """Versions of one tokenizer under `root` (a local path or an fsspec URL)."""

    def __init__(self, root: str, name: str) -> None:
        self.url = f"{str(root).rstrip('/')}/{check_name(name)}"
        # Listings are not cached: other processes publish, promote and prune the same store.
        self.fs, self.base = storage.filesystem(self.url)
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
        """The version `latest` names (falling back to the newest complete one not published as an
        unpromoted experiment: a store holding only experiments has no latest)."""
        pointed = self._pointer()
        if pointed:
            return pointed
        for version in reversed(self.versions()):
            try:
                if self.manifest(version).promoted is not False:
                    return version
            except (FileNotFoundError, ValueError):
                return version  # a version whose manifest cannot be read: taken as the main line's
        return None

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

    def manifest(self, version: str) -> Manifest:
        """A version's manifest; FileNotFoundError, or ValueError for one that is not a JSON object."""
        return Manifest.from_json(json.loads(self.fs.cat_file(f"{self.path(version)}/manifest.json")))

    def history(self) -> list[dict]:
        """Every recorded publish, promote, rollback and prune, oldest first (a line that is not a
        JSON object, e.g. edited by hand, is skipped). Read a line at a time: the file grows with
        the store's life; one that is not a regular file (a FIFO, a device) is an InputError."""
        events = []
        with self._open_history() as f:
            for line in _lines(f) if f is not None else ():
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if isinstance(event, dict):
                    events.append(event)
        return events

    @contextmanager
    def _open_history(self) -> Iterator[BinaryIO | None]:
        """The history opened for reading (`storage.open_regular`, no bound), or None when there is none."""
        path = f"{self.base}/{HISTORY}" if self.local else storage.join(self.url, HISTORY)
        if not (os.path.lexists(path) if self.local else self.fs.exists(f"{self.base}/{HISTORY}")):
            yield None
            return
        with storage.open_regular(path, HISTORY_FILE) as f:
            yield f

    def channels(self, versions: list[str] | None = None) -> dict[str, str]:
        """Each version's channel, `main` or `experiment` (one whose manifest cannot be read: main)."""
        found = {}
        for version in self.versions() if versions is None else versions:
            try:
                found[version] = self.manifest(version).channel or MAIN
            except (FileNotFoundError, ValueError):
                found[version] = MAIN
        return found

    def promotions(self) -> Promotions:
        """Where `latest` has been: see `Promotions`."""
        return Promotions.replay(self.history(), self.latest(), self.versions())

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
            with self.writing(version, "while reserving it"):
                try:
                    with self.fs.open(lock, "xb") as f:
                        f.write(f"{socket.gethostname()} {os.getpid()} {time.time()}\n".encode())
                except FileExistsError:
                    continue  # another run holds this number
                except BaseException:
                    self._remove_lock(lock)  # created, but not written (a full disk, say)
                    raise
                if self.fs.exists(self.path(version)):
                    # Another run reserved, wrote and released this number since the listing above: a
                    # version moves into place before its lock goes, so holding the lock, we see it.
                    self.fs.rm(lock)
                    continue
                try:
                    return Staged(version, storage.stage_directory(self.location(version)))
                except BaseException:
                    self._remove_lock(lock)
                    raise

    @contextmanager
    def writing(self, version: str, doing: str) -> Iterator[None]:
        """A lasting filesystem fault inside (a full disk, a read-only directory) is an OutputError,
        one line naming where `version` goes and what was being done; a transient one stays as it is."""
        try:
            yield
        except OSError as exc:
            if not lasting(exc):
                raise
            raise full_disk(exc, self.location(version), f"{doing}; nothing is published") from exc

    def _remove_lock(self, lock: str) -> None:
        try:
            self.fs.rm(lock)
        except FileNotFoundError:
            pass

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

    def commit(self, staged: Staged, promote: bool | None = None, by: str | None = None) -> str:
        """Move the staged version into place, then, if it is promoted, move `latest` to it if it
        is the newest; the publish is recorded in the history. `promote` None: as the staged
        manifest says (`promoted`, true when absent: the main line)."""
        described = Manifest()
        try:
            described = Manifest.from_json(json.loads((staged.directory / "manifest.json").read_text()))
        except (FileNotFoundError, ValueError):
            pass
        if promote is None:
            promote = described.promoted is not False
        storage.publish_staged(
            staged.directory,
            self.location(staged.version),
            last=MANIFEST_FILE,
            kind="version",
            replace_hint="a published version is never replaced",
            marked=True,
        )
        final = self.path(staged.version)
        flow_run = (described.prefect or {}).get("flow_run_id")
        try:
            with self.writing(staged.version, "while moving latest to it"):
                self._advance_latest(
                    staged.version,
                    promote,
                    channel=described.channel or MAIN,
                    by=by or (f"flow run {flow_run}" if flow_run else None),
                )
        except BaseException:
            self._take_back(staged)  # not published after all: neither `latest` nor the history names it
            raise
        self.fs.rm(f"{self.base}/.{staged.version}.lock")
        return final

    def _take_back(self, staged: Staged) -> None:
        """Undo the move into place of a version whose publish failed after it: back to its staging
        directory (a rename, which needs no room), or, on object storage, its marker then its files."""
        if self.local:
            os.rename(self.path(staged.version), staged.directory)
        else:
            self.fs.rm(f"{self.path(staged.version)}/{COMPLETE}")
            self._remove_files(self.path(staged.version))

    def abort(self, staged: Staged) -> None:
        """Forget a staged version: nothing of it stays, and `latest` does not move."""
        storage.discard_staged(staged.directory)
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

    def _advance_latest(self, version: str, promote: bool = True, channel: str = MAIN, by: str | None = None) -> None:
        """A publish: `latest` moves to `version` if it is promoted and newer than the current one
        (a publish never moves `latest` back); recorded in the history either way."""
        with self._lock(".latest.lock"):
            current = self._pointer()
            forward = not current or int(current[1:]) < int(version[1:])
            moves = promote and forward
            after = version if moves else current
            self._record("publish", version, current, after, by, move=moves, channel=channel, promoted=promote)

    def promote(self, version: str, by: str | None = None) -> tuple[str | None, str]:
        """Move `latest` to `version` (backwards too) and record it; returns (before, after). An
        unknown version is an InputError; promoting the latest version changes nothing."""
        self.path(version)
        with self._lock(".latest.lock"):
            versions = self.versions()
            if version not in versions:
                raise InputError(f"{self.location_of_store()}: no version {version} ({describe_names(versions)})")
            before = self.latest()
            if before == version:  # already latest (perhaps by the fallback): write the pointer, record nothing
                if self._pointer() != version:
                    self._set_latest(version)
                return before, version
            self._record("promote", version, before, version, by, move=True)
        return before, version

    def rollback(self, by: str | None = None) -> tuple[str, str]:
        """Move `latest` back to the version promoted before it (see `Promotions`) and record it;
        returns (before, after). Nothing to go back to is an InputError."""
        with self._lock(".latest.lock"):
            promotions = self.promotions()
            current, target = promotions.latest, promotions.rollback_target
            if current is None:
                raise InputError(f"{self.location_of_store()}: nothing to roll back: no version is latest")
            if target is None:
                raise InputError(
                    f"{self.location_of_store()}: nothing to roll back to: no version was promoted "
                    f"before {current} (that is still in the store)"
                )
            self._record("rollback", target, current, target, by, move=True)
        return current, target

    def unpublish(self, version: str, protected, by: str | None = None) -> Removed | None:
        """Take `version` out of the store for good, unless `protected(promotions)` (called under
        the lock, with the store's state then) names it: it stops being a version at once (renamed
        away, or its COMPLETE marker removed), then its files go. Returns what was removed (with
        what of its files stayed, if any could not be deleted: `sweep_pruned` retries them), or
        None if it stays. The newest version is never removed: the next publish would be given its
        number again."""
        self.path(version)
        with self._lock(".latest.lock"):
            promotions = self.promotions()
            if version not in promotions.versions[:-1] or version in protected(promotions):
                return None
            if self.local:
                gone = f"{self.base}/.{version}.pruned-{uuid.uuid4().hex[:8]}"
                os.rename(self.path(version), gone)
            else:
                gone = self.path(version)
                self.fs.rm(f"{gone}/{COMPLETE}")
            self._record("prune", version, promotions.latest, promotions.latest, by)
        return Removed(version, self._location_of(gone), self._remove_files(gone))

    def sweep_pruned(self) -> list[Removed]:
        """Finish what an earlier prune left (interrupted, or with files it could not delete): a
        renamed-away version on a local store; on object storage, a version directory without its
        COMPLETE marker, without a reservation lock, and older than the newest complete version (so
        no upload can be under way in it). Returns each, with what still stays of it."""
        names = self._names()
        swept = []
        if self.local:
            for name in names:
                if match := re.match(r"^\.(v\d+)\.pruned-[0-9a-f]+$", name):
                    gone = f"{self.base}/{name}"
                    swept.append(Removed(match.group(1), gone, self._remove_files(gone)))
            return swept
        complete = self.versions()
        if not complete:
            return swept
        newest = int(complete[-1][1:])
        locked = {m.group(1) for n in names if (m := re.match(r"^\.(v\d+)\.lock$", n))}
        for name in names:
            if VERSION.match(name) and name not in complete and name not in locked and int(name[1:]) < newest:
                swept.append(Removed(name, self.location(name), self._remove_files(self.path(name))))
        return swept

    def _location_of(self, path: str) -> str:
        """A path under the store as users name it (with its protocol on object storage)."""
        return path if self.local else f"{self.url}/{path.removeprefix(self.base).lstrip('/')}"

    def _remove_files(self, path: str) -> str | None:
        """Delete a directory and what it holds; None when all went, else what stayed and why."""
        if not self.local:
            try:
                self.fs.rm(path, recursive=True)
            except FileNotFoundError:
                pass
            except OSError as exc:
                return f"{exc.strerror or type(exc).__name__}: {exc.filename or self._location_of(path)}"
            return None
        failures: list[tuple[str, BaseException]] = []
        if sys.version_info >= (3, 12):
            shutil.rmtree(path, onexc=lambda _, where, exc: failures.append((where, exc)))
        else:
            shutil.rmtree(path, onerror=lambda _, where, info: failures.append((where, info[1])))
        if not os.path.lexists(path):
            return None
        stayed = sum(len(files) for _, _, files in os.walk(path))
        where, error = failures[0] if failures else (path, OSError("not deleted"))
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        return f"{stayed} file(s) ({reason}: {where})"

    def location_of_store(self) -> str:
        """The store as users name it (`artifacts/demo`, `s3://bucket/artifacts/demo`)."""
        return self.url

    def _set_latest(self, version: str) -> None:
        """Point `latest` at `version` in one step (a symlink renamed over it, or one object)."""
        pointer = f"{self.base}/latest"
        if self.local:
            tmp = f"{pointer}.tmp-{uuid.uuid4().hex[:8]}"
            os.symlink(version, tmp)
            os.replace(tmp, pointer)
        else:
            self.fs.pipe_file(pointer, f"{version}\n".encode())

    def _record(
        self,
        action: str,
        version: str,
        before: str | None,
        after: str | None,
        by: str | None,
        move: bool = False,
        **details,
    ) -> None:
        """Append one event to the history (the caller holds `.latest.lock`), and with `move`, point
        `latest` at `after`. The new history is written first (it is what needs room, and the old
        one may be refused), under a temporary name, then `latest` moves, then the history is
        renamed over the old one (one object on object storage): a reader sees the history before
        or after, never half of it, and a failure leaves `latest` where it was."""
        history = self._new_history(action, version, before, after, by, **details)
        try:
            if move:
                self._set_latest(after)
            self._put_history(history)
        except BaseException:
            self._drop_history(history)
            raise

    def _new_history(
        self, action: str, version: str, before: str | None, after: str | None, by: str | None, **details
    ) -> str:
        """The history with one more event, copied a block at a time into a temporary file (beside
        the old one; on object storage, on this machine), whose path `_put_history` puts in place."""
        event = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "action": action,
            "version": version,
            "latest_before": before,
            "latest_after": after,
            **details,
            "by": by or who(),
        }
        if self.local:  # beside the history, to be renamed over it
            tmp = f"{self.base}/.{HISTORY}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        else:  # on this machine, to be uploaded as one object
            fd, tmp = tempfile.mkstemp(prefix=temporary_prefix("bpe-history-"))
            os.close(fd)
        try:
            with open(tmp, "wb") as out, self._open_history() as old:
                last = b"\n"
                while old is not None and (block := old.read(1 << 20)):
                    out.write(block)
                    last = block[-1:]
                out.write((b"" if last == b"\n" else b"\n") + (json.dumps(event) + "\n").encode())
                out.flush()
                os.fsync(out.fileno())
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return tmp

    def _put_history(self, history: str) -> None:
        if self.local:
            os.replace(history, f"{self.base}/{HISTORY}")
        else:
            self.fs.put_file(history, f"{self.base}/{HISTORY}")
            Path(history).unlink(missing_ok=True)

    def _drop_history(self, history: str) -> None:
        Path(history).unlink(missing_ok=True)

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
            except BaseException:
                self._remove_lock(path)  # created, but not written (a full disk, say)
                raise
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
    """One row per version for `bpe versions`: date, channel, vocabulary, data, compression, and
    its change in bytes per token against the version that served (was `latest`) when it was
    published, as the history records it: after a rollback, the version rolled back to (for a
    version the history does not record, the newest version before it that was ever `latest`).
    Only like with like: both measured on the same evaluation rows (`evaluation.eval_set.
    fingerprint`: figures on other text do not compare) at the same vocabulary size (a larger
    vocabulary compresses better by itself). Otherwise `incomparable` says why there is no
    change: the other's vocabulary size, its other evaluation rows, or that it was pruned."""
    history = store.history()
    promotions = Promotions.replay(history, store.latest(), store.versions())
    serving = {e["version"]: e.get("latest_before") for e in history if e.get("action") == "publish"}
    figures: dict[str, tuple[Manifest, float | None, str | None, int | None]] = {}
    for version in promotions.versions:
        try:
            m = store.manifest(version)
        except (FileNotFoundError, json.JSONDecodeError):
            continue
        evaluation = m.evaluation or {}
        eval_set = (evaluation.get("eval_set") or {}).get("fingerprint")
        vocab_size = m.result.vocab_size if m.result is not None else None
        figures[version] = (m, evaluation.get("bytes_per_token"), eval_set, vocab_size)
    rows = []
    newest_promoted = None  # the fallback: the newest version so far that was ever latest
    for version, (m, bytes_per_token, eval_set, vocab_size) in figures.items():
        compared = serving[version] if version in serving else newest_promoted
        then = figures.get(compared) if compared is not None else None
        change, incomparable = None, None
        measured = then is not None and isinstance(bytes_per_token, (int, float)) and isinstance(then[1], (int, float))
        if compared is not None and compared not in promotions.versions:
            incomparable = "pruned"
        elif measured and not (eval_set and then[2] == eval_set):
            incomparable = "other evaluation rows"
        elif measured and vocab_size != then[3]:
            incomparable = f"{then[3]:,} tokens" if isinstance(then[3], int) else "unknown vocabulary size"
        elif measured:
            change = bytes_per_token - then[1]
        rows.append(
            {
                "version": version,
                "latest": version == promotions.latest,
                "promoted": version in promotions.promoted,
                "rollback_target": version == promotions.rollback_target,
                "channel": m.channel or MAIN,
                "created": m.created or "",
                "vocab_size": vocab_size,
                "shards": len((m.data.shards if m.data is not None else None) or []),
                "data_bytes": m.counts.bytes if m.counts is not None else None,
                "bytes_per_token": bytes_per_token,
                "eval_set": eval_set,
                "previous_promoted": compared,
                "change": change,
                "incomparable": incomparable,
            }
        )
        if version in promotions.promoted:
            newest_promoted = version
    return rows

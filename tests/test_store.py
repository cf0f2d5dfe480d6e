"""The versioned artifact store: numbered versions, moved into place whole, `latest` moved last."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import threading
import time

import pytest
import yaml

from bpe.errors import SettingsError
from bpe.pipeline.config import load_config
from bpe.pipeline.store import COMPLETE, VersionStore, describe_versions


def publish(root: str, name: str = "tok", payload: str = "x") -> str:
    store = VersionStore(root, name)
    staged = store.stage()
    (staged.directory / "manifest.json").write_text(json.dumps({"payload": payload, "created": "now"}))
    store.commit(staged)
    return staged.version


def test_versions_are_numbered_and_latest_follows(tmp_path):
    root = str(tmp_path)
    assert publish(root) == "v0001"
    assert publish(root) == "v0002"
    store = VersionStore(root, "tok")
    assert store.versions() == ["v0001", "v0002"] and store.latest() == "v0002"
    assert os.readlink(tmp_path / "tok" / "latest") == "v0002"
    assert (tmp_path / "tok" / "latest" / COMPLETE).exists()
    assert [r["version"] for r in describe_versions(store)] == ["v0001", "v0002"]


def test_an_aborted_version_leaves_nothing_and_latest_stays(tmp_path):
    root = str(tmp_path)
    publish(root)
    store = VersionStore(root, "tok")
    staged = store.stage()
    (staged.directory / "merges.txt").write_text("half")
    store.abort(staged)
    assert sorted(p.name for p in (tmp_path / "tok").iterdir()) == ["latest", "v0001"]
    assert store.latest() == "v0001"
    assert publish(root) == "v0002"


def test_latest_never_moves_back(tmp_path):
    store = VersionStore(str(tmp_path), "tok")
    first, second = store.stage(), store.stage()
    assert (first.version, second.version) == ("v0001", "v0002")
    for staged in (second, first):  # the later number finishes first
        (staged.directory / "manifest.json").write_text("{}")
        store.commit(staged)
    assert store.latest() == "v0002" and store.versions() == ["v0001", "v0002"]


def test_a_version_committed_while_another_run_reserves_a_number_is_not_taken_twice(tmp_path):
    """Run A commits v0001 (its directory appears, then its lock goes) just as run B reads the
    store's listing: B must not see "no v0001 directory" and "no v0001 lock" in two listings."""
    first, second = VersionStore(str(tmp_path), "tok"), VersionStore(str(tmp_path), "tok")
    staged = first.stage()
    (staged.directory / "manifest.json").write_text("{}")
    listing = second._names
    committed = []

    def listing_while_the_other_run_commits():
        names = listing()
        if not committed:
            committed.append(first.commit(staged))
        return names

    second._names = listing_while_the_other_run_commits
    assert second.stage().version == "v0002"


def test_a_number_reserved_and_published_by_another_run_after_the_listing_is_not_reused(tmp_path):
    """Run B lists the store; before B takes a lock, run A reserves, writes and publishes the number
    B chose (and drops its lock): B must notice the version and take the next number."""
    first, second = VersionStore(str(tmp_path), "tok"), VersionStore(str(tmp_path), "tok")
    listing = second._names
    published = []

    def listing_then_another_run_publishes():
        names = listing()
        if not published:
            staged = first.stage()
            (staged.directory / "manifest.json").write_text("{}")
            published.append(first.commit(staged))
        return names

    second._names = listing_then_another_run_publishes
    staged = second.stage()
    assert published and staged.version == "v0002"
    (staged.directory / "manifest.json").write_text("{}")
    second.commit(staged)
    assert second.versions() == ["v0001", "v0002"]


def _stage_and_commit(root: str, queue) -> None:
    queue.put(publish(root, payload=str(os.getpid())))


def test_concurrent_runs_never_collide(tmp_path):
    queue = multiprocessing.get_context("spawn").Queue()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_stage_and_commit, args=(str(tmp_path), queue)) for _ in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    got = sorted(queue.get(timeout=5) for _ in procs)
    assert got == [f"v{i:04d}" for i in range(1, 7)]
    store = VersionStore(str(tmp_path), "tok")
    assert store.versions() == got and store.latest() == "v0006"
    assert not [p for p in (tmp_path / "tok").iterdir() if p.name.startswith(".")]


def test_any_fsspec_filesystem(tmp_path):
    url = "memory://bpe-store-test"
    assert publish(url) == "v0001" and publish(url) == "v0002"
    store = VersionStore(url, "tok")
    assert store.latest() == "v0002" and store.versions() == ["v0001", "v0002"]
    assert json.loads((store.local_copy("v0002") / "manifest.json").read_text())["payload"] == "x"


def test_incomplete_uploads_are_not_versions():
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("/bpe-half/tok/v0007/manifest.json", b"{}")  # no COMPLETE marker: an interrupted upload
    store = VersionStore("memory://bpe-half", "tok")
    assert store.versions() == [] and store.latest() is None
    with pytest.raises(FileNotFoundError):
        store.manifest("v0008")


def test_a_lock_its_holder_is_still_writing_is_not_taken_for_stale(tmp_path):
    """Another run has just created `.latest.lock` and not yet written its time into it: a commit
    must wait for it, not delete it as stale."""
    store = VersionStore(str(tmp_path), "tok")
    staged = store.stage()
    (staged.directory / "manifest.json").write_text("{}")
    held = tmp_path / "tok" / ".latest.lock"
    held.write_bytes(b"")
    committing = threading.Thread(target=store.commit, args=(staged,))
    committing.start()
    time.sleep(0.5)
    assert held.exists() and committing.is_alive(), "the commit took a lock another run holds"
    held.unlink()  # the other run is done
    committing.join(10)
    assert not committing.is_alive() and store.latest() == "v0001"


@pytest.mark.parametrize("name", ["..", ".", "../elsewhere", "a/b", ".hidden", "tok\n", "-rf"])
def test_names_that_could_leave_the_artifact_root_are_refused(tmp_path, name):
    root = tmp_path / "root"
    with pytest.raises(SettingsError, match="^name: expected letters"):
        VersionStore(str(root), name)
    config = tmp_path / "tok.yaml"
    config.write_text(yaml.safe_dump({"name": name, "data": "x/", "vocab_size": 300, "artifact_root": str(root)}))
    with pytest.raises(SettingsError, match=f"^{config}: name: expected letters"):
        load_config(config)
    assert not (tmp_path / "elsewhere").exists() and not root.exists()


def test_a_tampered_latest_pointer_leads_nowhere_outside_the_store(tmp_path):
    store = VersionStore(str(tmp_path), "tok")
    assert publish(str(tmp_path)) == "v0001"
    pointer = tmp_path / "tok" / "latest"
    pointer.unlink()
    os.symlink("../../etc", pointer)
    assert store.latest() == "v0001"  # the newest complete version, not the planted path
    with pytest.raises(SettingsError, match="is not a version name"):
        store.path("../../etc")


def _publish_many(root: str, count: int, queue) -> None:
    for _ in range(count):
        queue.put(publish(root, payload=str(os.getpid())))


@pytest.mark.chaos
def test_two_hundred_concurrent_publishes_never_collide(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_publish_many, args=(str(tmp_path), 10, queue)) for _ in range(20)]
    for p in procs:
        p.start()
    got = sorted(queue.get(timeout=120) for _ in range(200))
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    assert got == [f"v{i:04d}" for i in range(1, 201)]
    store = VersionStore(str(tmp_path), "tok")
    assert store.versions() == got and store.latest() == "v0200"
    assert not [p for p in (tmp_path / "tok").iterdir() if p.name.startswith(".")]


def _stage_then_die(root: str) -> None:
    VersionStore(root, "tok").stage()
    os.kill(os.getpid(), signal.SIGKILL)  # killed between stage and commit


def test_a_publisher_killed_between_stage_and_commit_leaves_nothing_for_good(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    victim = ctx.Process(target=_stage_then_die, args=(str(tmp_path),))
    victim.start()
    victim.join(60)
    assert victim.exitcode == -signal.SIGKILL
    assert sorted(p.name.split("-")[0] for p in (tmp_path / "tok").iterdir()) == [".v0001.lock", ".v0001.tmp"]
    assert publish(str(tmp_path)) == "v0001"  # the next run sweeps what the dead one reserved, and reuses it
    assert sorted(p.name for p in (tmp_path / "tok").iterdir()) == ["latest", "v0001"]

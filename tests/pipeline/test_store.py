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
from bpe.pipeline.store import COMPLETE, Staged, VersionStore, describe_versions
from tests.conftest import HEADROOM, limited, not_a_regular_file, publish_as
from tests.publishers import publish, publish_many, stage_and_commit, stage_then_die


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
    assert sorted(p.name for p in (tmp_path / "tok").iterdir()) == ["history.jsonl", "latest", "v0001"]
    assert [e["action"] for e in store.history()] == ["publish"]  # the aborted version left no trace
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


def test_concurrent_runs_never_collide(tmp_path):
    queue = multiprocessing.get_context("spawn").Queue()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=stage_and_commit, args=(str(tmp_path), queue)) for _ in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    got = sorted(queue.get(timeout=5) for _ in procs)
    assert got == [f"v{i:04d}" for i in range(1, 7)]
    events = VersionStore(str(tmp_path), "tok").history()  # one history line each, none lost to a race
    assert sorted(e["version"] for e in events) == got and {e["action"] for e in events} == {"publish"}
    store = VersionStore(str(tmp_path), "tok")
    assert store.versions() == got and store.latest() == "v0006"
    assert not [p for p in (tmp_path / "tok").iterdir() if p.name.startswith(".")]


def test_any_fsspec_filesystem(tmp_path):
    url = "memory://bpe-store-test"
    assert publish(url) == "v0001" and publish(url) == "v0002"
    store = VersionStore(url, "tok")
    assert store.latest() == "v0002" and store.versions() == ["v0001", "v0002"]
    assert store.manifest("v0002")["payload"] == "x"


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


def test_a_published_version_is_never_written_over(tmp_path):
    """Should a version's number be published by someone else meanwhile (a store edited by hand), the
    commit is refused, the published version keeps its files and the staged one can be aborted."""
    store = VersionStore(str(tmp_path), "tok")
    staged = store.stage()
    (staged.directory / "manifest.json").write_text('{"payload": "mine"}')
    placed = tmp_path / "tok" / staged.version
    placed.mkdir()
    (placed / "manifest.json").write_text('{"payload": "theirs"}')
    (placed / COMPLETE).write_text("now\n")
    with pytest.raises(FileExistsError, match=r"v0001: already holds a version \(a published version is never"):
        store.commit(staged)
    assert json.loads((placed / "manifest.json").read_text()) == {"payload": "theirs"}
    assert staged.directory.exists(), "the staged version stays, for a retry or an abort"
    store.abort(staged)
    assert sorted(p.name for p in (tmp_path / "tok").iterdir()) == ["v0001"]


def test_an_upload_cut_short_is_written_over_and_a_complete_version_is_not():
    import fsspec

    fs = fsspec.filesystem("memory")
    store = VersionStore("memory://bpe-retry", "tok")
    staged = store.stage()
    (staged.directory / "manifest.json").write_text('{"payload": "whole"}')
    fs.pipe(f"/bpe-retry/tok/{staged.version}/manifest.json", b"{half")  # a commit that died mid-upload
    fs.pipe(f"/bpe-retry/tok/{staged.version}/stale.txt", b"x")
    store.commit(staged)
    assert store.versions() == ["v0001"] and store.manifest("v0001") == {"payload": "whole"}
    names = sorted(p.rsplit("/", 1)[-1] for p in fs.ls("/bpe-retry/tok/v0001", detail=False))
    assert names == [COMPLETE, "manifest.json"], "the stale file is gone"
    again = store.stage()
    (again.directory / "manifest.json").write_text("{}")
    with pytest.raises(FileExistsError, match="already holds a version"):
        store.commit(Staged("v0001", again.directory))  # as if the number were handed out twice
    assert store.manifest("v0001") == {"payload": "whole"}
    store.abort(again)


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


@pytest.mark.chaos
def test_two_hundred_concurrent_publishes_never_collide(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=publish_many, args=(str(tmp_path), 10, queue)) for _ in range(20)]
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


def test_a_publisher_killed_between_stage_and_commit_leaves_nothing_for_good(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    victim = ctx.Process(target=stage_then_die, args=(str(tmp_path),))
    victim.start()
    victim.join(60)
    assert victim.exitcode == -signal.SIGKILL
    assert sorted(p.name.split("-")[0] for p in (tmp_path / "tok").iterdir()) == [".v0001.lock", ".v0001.tmp"]
    assert publish(str(tmp_path)) == "v0001"  # the next run sweeps what the dead one reserved, and reuses it
    assert sorted(p.name for p in (tmp_path / "tok").iterdir()) == ["history.jsonl", "latest", "v0001"]


# -- channels, promote, rollback, prune (without Prefect) -----------------------------------------


def test_an_experiment_does_not_move_latest_unless_promoted(tmp_path):
    store = VersionStore(str(tmp_path), "tok")
    assert publish_as(store, "experiment") == "v0001"
    assert store.latest() is None, "a store holding only an unpromoted experiment has no latest"
    assert not (tmp_path / "tok" / "latest").exists()
    assert publish_as(store) == "v0002" and store.latest() == "v0002"
    assert publish_as(store, "experiment") == "v0003" and store.latest() == "v0002"
    assert publish_as(store, "experiment", promoted=True) == "v0004" and store.latest() == "v0004"
    events = store.history()
    assert [(e["action"], e["version"], e["channel"], e["latest_before"], e["latest_after"]) for e in events] == [
        ("publish", "v0001", "experiment", None, None),
        ("publish", "v0002", "main", None, "v0002"),
        ("publish", "v0003", "experiment", "v0002", "v0002"),
        ("publish", "v0004", "experiment", "v0002", "v0004"),
    ]
    rows = {r["version"]: r for r in describe_versions(store)}
    assert [rows[v]["channel"] for v in sorted(rows)] == ["experiment", "main", "experiment", "experiment"]
    assert [v for v in sorted(rows) if rows[v]["promoted"]] == ["v0002", "v0004"]


def test_promote_moves_latest_backwards_and_is_recorded(tmp_path):
    store = VersionStore(str(tmp_path), "tok")
    for _ in range(3):
        publish_as(store)
    assert store.promote("v0001", by="tester") == ("v0003", "v0001")
    assert store.latest() == "v0001" and os.readlink(tmp_path / "tok" / "latest") == "v0001"
    last = store.history()[-1]
    assert (last["action"], last["version"], last["latest_before"], last["latest_after"], last["by"]) == (
        "promote",
        "v0001",
        "v0003",
        "v0001",
        "tester",
    )
    assert store.promote("v0001") == ("v0001", "v0001") and len(store.history()) == 4, "a no-op is not recorded"
    publish_as(store)  # a new main-line version moves latest forward again
    assert store.latest() == "v0004"


def test_promoting_an_unknown_version_is_an_error_and_changes_nothing(tmp_path):
    from bpe.errors import InputError

    store = VersionStore(str(tmp_path), "tok")
    publish_as(store)
    with pytest.raises(InputError, match=r"tok: no version v0009 \(versions: v0001\)$"):
        store.promote("v0009")
    with pytest.raises(SettingsError, match="is not a version name"):
        store.promote("latest")
    assert store.latest() == "v0001" and len(store.history()) == 1


def test_rollback_walks_back_the_promotions_and_undoes_a_promote(tmp_path):
    from bpe.errors import InputError

    store = VersionStore(str(tmp_path), "tok")
    for _ in range(3):
        publish_as(store)  # v0001, v0002, v0003: each promoted when published
    publish_as(store, "experiment")  # v0004: never latest, never a rollback target
    assert store.rollback() == ("v0003", "v0002")
    assert store.promote("v0004") == ("v0002", "v0004")
    assert store.rollback() == ("v0004", "v0002"), "a rollback after a promote undoes the promote"
    assert store.rollback() == ("v0002", "v0001")
    with pytest.raises(InputError, match="nothing to roll back to: no version was promoted before v0001"):
        store.rollback()
    assert store.latest() == "v0001"
    assert [e["action"] for e in store.history()][-4:] == ["rollback", "promote", "rollback", "rollback"]


def test_versions_show_the_change_against_the_previous_promoted_version(tmp_path):
    store = VersionStore(str(tmp_path), "tok")
    publish_as(store, bpt=3.5)  # v0001
    publish_as(store, "experiment", bpt=3.75)  # v0002: compared with v0001
    publish_as(store, bpt=3.6)  # v0003: compared with v0001 (v0002 was never promoted)
    publish_as(store, bpt=3.4)  # v0004: compared with v0003
    rows = describe_versions(store)
    assert [(r["previous_promoted"], r["change"] and round(r["change"], 6)) for r in rows] == [
        (None, None),
        ("v0001", 0.25),
        ("v0001", 0.1),
        ("v0003", -0.2),
    ]
    assert [r["rollback_target"] for r in rows] == [False, False, True, False]


def test_versions_measured_on_other_evaluation_rows_show_no_change(tmp_path):
    """A figure on other text (a lost evaluation set frozen again, a subset) is not compared."""
    store = VersionStore(str(tmp_path), "tok")
    publish_as(store, bpt=3.5, eval_set="set-a")
    publish_as(store, bpt=3.6, eval_set="set-b")
    publish_as(store, bpt=3.7, eval_set="set-b")
    rows = describe_versions(store)
    assert [r["change"] and round(r["change"], 6) for r in rows] == [None, None, 0.1]


def test_prune_keeps_latest_the_rollback_target_and_the_newest_main_line_version(tmp_path):
    from bpe.pipeline.retention import prune_versions

    store = VersionStore(str(tmp_path), "tok")
    for _ in range(4):
        publish_as(store)  # v0001 .. v0004
    publish_as(store, "experiment")  # v0005
    publish_as(store, "experiment")  # v0006
    store.promote("v0002")  # latest v0002; rollback would return to v0004
    plan = prune_versions(store, keep=1)
    assert plan.keep == {
        "v0002": "latest",
        "v0004": "rollback target, newest main-line version",
        "v0006": "among the 1 newest",
    }
    assert plan.remove == ["v0001", "v0003", "v0005"]
    assert store.versions() == [f"v{i:04d}" for i in range(1, 7)], "a dry run removes nothing"
    plan = prune_versions(store, keep=1, apply=True, by="tester")
    assert plan.removed == ["v0001", "v0003", "v0005"] and plan.spared == []
    assert store.versions() == ["v0002", "v0004", "v0006"] and store.latest() == "v0002"
    assert sorted(p.name for p in (tmp_path / "tok").iterdir()) == [
        "history.jsonl",
        "latest",
        "v0002",
        "v0004",
        "v0006",
    ]
    pruned = [e["version"] for e in store.history() if e["action"] == "prune"]
    assert pruned == ["v0001", "v0003", "v0005"]
    assert store.rollback() == ("v0002", "v0004")
    assert publish_as(store) == "v0007", "numbers are never given out again"


def test_a_version_promoted_while_a_prune_runs_is_spared(tmp_path):
    from bpe.pipeline.retention import plan_prune, protected_versions

    store = VersionStore(str(tmp_path), "tok")
    for _ in range(4):
        publish_as(store)
    plan = plan_prune(store, keep=1)
    assert plan.remove == ["v0001", "v0002"]
    store.promote("v0001")  # another operator, between the plan and the removal
    channels = store.channels()
    assert not store.unpublish("v0001", lambda p: protected_versions(p, channels))
    assert store.unpublish("v0002", lambda p: protected_versions(p, channels))
    assert store.versions() == ["v0001", "v0003", "v0004"] and store.latest() == "v0001"
    assert not store.unpublish("v0004", lambda p: {}), "the newest version is never removed"


def test_prune_on_object_storage_unpublishes_before_deleting(tmp_path):
    """On object storage a version stops being one when its COMPLETE marker goes; a prune cut
    short after that leaves files that the next prune removes."""
    import fsspec

    from bpe.pipeline.retention import prune_versions

    store = VersionStore("memory://bpe-prune", "tok")
    for _ in range(3):
        publish_as(store)
    fs = fsspec.filesystem("memory")
    fs.rm("/bpe-prune/tok/v0001/COMPLETE")  # an earlier prune got this far
    assert store.versions() == ["v0002", "v0003"]
    plan = prune_versions(store, keep=1, apply=True)
    assert plan.removed == [] and plan.keep == {
        "v0002": "rollback target",
        "v0003": "among the 1 newest, latest, newest main-line version",
    }
    assert not fs.exists("/bpe-prune/tok/v0001"), "what the interrupted prune left is gone"
    assert store.promote("v0002") == ("v0003", "v0002") and store.latest() == "v0002"
    assert fs.cat_file("/bpe-prune/tok/latest") == b"v0002\n"


def test_prune_needs_keep_of_at_least_one(tmp_path):
    from bpe.pipeline.retention import plan_prune

    store = VersionStore(str(tmp_path), "tok")
    publish_as(store)
    with pytest.raises(SettingsError, match=r"^--keep: expected an integer >= 1"):
        plan_prune(store, 0)


def publish_files(store: VersionStore, size: int = 6000) -> Staged:
    """Stage a version with a few files of `size` bytes and a manifest, as the flow leaves one."""
    staged = store.stage()
    for name in ("vocab.json", "merges.txt", "tokenizer.json"):
        (staged.directory / name).write_bytes(b"x" * size)
    (staged.directory / "manifest.json").write_text(json.dumps({"created": "now", "promoted": True}))
    return staged


@pytest.mark.parametrize("room", range(5))
def test_a_full_disk_at_any_step_of_a_commit_leaves_the_store_as_it_was(small_disk, room):
    """With `room` pages left when a staged version is committed (none, or enough for some of the
    steps: its COMPLETE marker, the `latest` lock, the new history), the commit either completes or
    fails in one line naming the version, and after the abort the store is as it was: same
    versions, same `latest`, same history, nothing beside them (no lock, no staging directory);
    with room again the next publish takes the same number."""
    from bpe.errors import OutputError

    disk, fill = small_disk
    store = VersionStore(str(disk), "tok")
    store.commit(publish_files(store))
    before = (sorted(p.name for p in (disk / "tok").iterdir()), store.latest(), store.history())
    staged = publish_files(store)
    filler = fill(room)
    try:
        try:
            store.commit(staged)
        except BaseException:
            store.abort(staged)
            raise
    except OutputError as exc:
        assert str(exc).startswith(f"{disk}/tok/v0002: no space left on device while "), exc
        assert (sorted(p.name for p in (disk / "tok").iterdir()), store.latest(), store.history()) == before
        filler.unlink()
        store.commit(publish_files(store))
    else:
        assert room > 2, "committed with no room to commit"
    assert store.versions() == ["v0001", "v0002"] and store.latest() == "v0002"
    assert [e["version"] for e in store.history()] == ["v0001", "v0002"]


# -- the history: read a line at a time, a regular file only -------------------------------------


@pytest.mark.parametrize("replacement", ["/dev/zero", "fifo"])
@pytest.mark.parametrize("command", [["history"], ["promote", "1"]])
def test_a_history_that_is_not_a_regular_file_is_refused_without_reading_it(tmp_path, command, replacement):
    """/dev/zero would fill memory, a FIFO wait for a writer forever: `bpe history` and `bpe promote`
    run in a process of their own, under a time limit and an address-space limit."""
    store = VersionStore(str(tmp_path), "tok")
    publish_as(store)
    publish_as(store)
    history = tmp_path / "tok" / "history.jsonl"
    history.unlink()
    not_a_regular_file(history, replacement)
    args = [command[0], str(tmp_path / "tok"), *command[1:]]
    done = limited(f"sys.exit(bpe.cli.main({args!r}))", imports="bpe.cli, bpe.pipeline.store, fsspec", timeout=30)
    kind = "a character device" if replacement == "/dev/zero" else "a FIFO"
    assert (done.returncode, done.stdout) == (1, ""), done.stderr[-2000:]
    assert done.stderr == f"bpe: error: {history}: not a regular file ({kind}), so not a store's history\n"
    assert store.latest() == "v0002", "a refused promote changes nothing"


def test_a_history_larger_than_memory_is_read_a_line_at_a_time(tmp_path):
    """A history grows with the store's life: `bpe history` keeps one line in memory, not the file
    (here 256 MB of NUL bytes on one line, then the events, in a process whose address space holds
    half of it), and a promote copies it into the new history a block at a time."""
    store = VersionStore(str(tmp_path), "tok")
    publish_as(store)
    history = tmp_path / "tok" / "history.jsonl"
    events = history.read_bytes()
    with open(history, "wb") as f:
        f.truncate(2 * HEADROOM)  # sparse: costs no disk
        f.seek(2 * HEADROOM)
        f.write(b"\n" + events)
    done = limited(f"sys.exit(bpe.cli.main(['history', {str(tmp_path / 'tok')!r}]))", imports="bpe.cli, fsspec")
    assert done.returncode == 0, done.stderr[-2000:]
    assert [line.split()[1:4] for line in done.stdout.splitlines()[1:]] == [["publish", "v0001", "-"]]
    publish_as(store)
    assert [e["version"] for e in store.history()] == ["v0001", "v0002"]
    assert history.stat().st_size > 2 * HEADROOM, "what was there is kept"

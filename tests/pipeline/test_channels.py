"""Channels, promote and rollback, retention: the commands an operator types, and the train-bpe
flow against real services (a Prefect server, a process worker, a Dask scheduler with two
workers, all on 127.0.0.1: the session's, shared with `tests.pipeline.test_pipeline`, see tests/conftest.py).

A run with the configuration's own settings publishes to the main line and moves `latest`; a run
whose parameters change a training setting publishes an experiment that leaves `latest` alone
unless promote=True. `bpe promote`, `bpe rollback` move `latest` and are recorded in the store's
history; `bpe prune` and `bpe prune-cache` list, and with --yes remove, what retention lets go.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from bpe.cli import main
from bpe.errors import SettingsError
from bpe.pipeline.config import Retention, load_config
from bpe.pipeline.retention import mark_in_use, sweep_count_cache
from bpe.pipeline.store import VersionStore, describe_versions
from tests.conftest import publish_as, stdlib_paragraphs, unique_bucket, write_parquet
from tests.pipeline import test_pipeline
from tests.pipeline.conftest import BPE, claim_deployment_names, deploy, pipeline_config, write_config
from tests.pipeline.test_pipeline import SETTINGS, run_deployment, run_here

# The session's Prefect server, process worker and Dask cluster, with a directory of this module's own.
services = test_pipeline.services

DAY = 86400.0


def bpe(capsys, *args: str) -> tuple[int, str, str]:
    """The `bpe` command in this process: (exit status, stdout, stderr)."""
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# -- the commands, without services ---------------------------------------------------------------


def test_promote_and_rollback_commands(tmp_path, capsys):
    store = VersionStore(str(tmp_path), "tok")
    publish_as(store, bpt=3.5)
    publish_as(store, "experiment", bpt=3.75)
    where = f"{tmp_path}/tok"
    assert bpe(capsys, "promote", where, "2") == (
        0,
        f"{where}: latest v0001 -> v0002 (promoted; recorded in {where}/history.jsonl)\n",
        "",
    )
    assert store.latest() == "v0002"
    code, out, _ = bpe(capsys, "promote", where, "v0002")
    assert code == 0 and out == f"{where}: v0002 is already latest; nothing changed\n"
    code, out, _ = bpe(capsys, "rollback", where)
    assert code == 0 and out.startswith(f"{where}: latest v0002 -> v0001 (rolled back;")
    code, out, _ = bpe(capsys, "history", where)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["time", "action", "version", "latest", "by"]
    assert [line.split()[1:4] for line in lines[1:]] == [
        ["publish", "v0001", "-"],
        ["publish", "v0002", "v0001"],
        ["promote", "v0002", "v0001"],
        ["rollback", "v0001", "v0002"],
    ]
    assert "v0001 (stays)" in lines[2] and "[publish (experiment)]" in lines[2]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["promote", "{root}/tok", "v0007"], "bpe: error: {root}/tok: no version v0007 (versions: v0001)"),
        (
            ["promote", "{root}/tok", "newest"],
            "bpe: error: {root}/tok: 'newest' is not a version name (v0001, v0002, ...)",
        ),
        (
            ["rollback", "{root}/tok"],
            "bpe: error: {root}/tok: nothing to roll back to: no version was promoted "
            "before v0001 (that is still in the store)",
        ),
        (
            ["promote", "{root}/tokk", "v0001"],
            "bpe: error: {root}/tokk: no such artifact store (expected <artifact root>/<tokenizer name>)",
        ),
        (
            ["rollback", "{root}/tok/v0001/manifest.json"],
            "bpe: error: {root}/tok/v0001/manifest.json: is not a directory (expected <artifact root>/<tokenizer "
            "name>)",
        ),
        (
            ["prune", "{root}/tokk", "--keep", "3"],
            "bpe: error: {root}/tokk: no such artifact store (expected <artifact root>/<tokenizer name>)",
        ),
        (
            ["prune", "{root}/tok", "--keep", "0"],
            "bpe: error: --keep: expected an integer >= 1 (the newest version always stays), got 0",
        ),
        (
            ["prune-cache", "{root}/nocache", "--older-than", "30"],
            "bpe: error: {root}/nocache: no such count cache "
            "(expected a configuration's cache_dir, e.g. "
            "artifacts/.cache)",
        ),
    ],
)
def test_mistakes_are_one_line_and_a_non_zero_exit(tmp_path, capsys, args, message):
    store = VersionStore(str(tmp_path), "tok")
    publish_as(store)
    before = (store.latest(), store.history())
    code, out, err = bpe(capsys, *[a.format(root=tmp_path) for a in args])
    assert (code, out, err) == (1, "", message.format(root=tmp_path) + "\n")
    assert (store.latest(), store.history()) == before, "a refused command changes nothing"


def test_versions_lists_channels_promotions_and_the_change_in_bytes_per_token(tmp_path, capsys):
    store = VersionStore(str(tmp_path), "tok")
    publish_as(store, bpt=3.5)  # v0001
    publish_as(store, "experiment", bpt=3.75)  # v0002
    publish_as(store, bpt=3.6)  # v0003
    store.rollback()  # latest back to v0001
    code, out, _ = bpe(capsys, "versions", f"{tmp_path}/tok")
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split() == [
        "version",
        "created",
        "channel",
        "vocabulary",
        "shards",
        "data",
        "bytes/token",
        "change",
        "vs",
        "promoted",
    ]
    assert rows[0].split() == [
        "v0001",
        "2026-11-30T08:50:18+00:00",
        "main",
        "600",
        "2",
        "1.5",
        "MB",
        "3.500",
        "(latest)",
    ]
    assert rows[1].split()[2:] == ["experiment", "600", "2", "1.5", "MB", "3.750", "+0.2500", "vs", "v0001"]
    assert rows[2].split()[2:] == ["main", "600", "2", "1.5", "MB", "3.600", "+0.1000", "vs", "v0001", "(promoted)"]


def test_versions_compare_bytes_per_token_only_at_one_vocabulary_size(tmp_path, capsys):
    """A larger vocabulary compresses better by itself: a version is compared with the previous
    promoted one only at the same size (and on the same rows); otherwise the listing says there is
    nothing comparable, and why, rather than print the difference."""
    store = VersionStore(str(tmp_path), "tok")
    publish_as(store, bpt=4.0, vocab_size=16384)  # v0001
    publish_as(store, bpt=3.4, vocab_size=4096)  # v0002: v0001 has four times its tokens
    publish_as(store, bpt=3.5, vocab_size=4096)  # v0003: against v0002, like with like
    publish_as(store, bpt=3.6, vocab_size=4096, eval_set="set-b")  # v0004: measured on other rows
    code, out, _ = bpe(capsys, "versions", f"{tmp_path}/tok")
    assert code == 0
    rows = [line.split()[3:] for line in out.splitlines()[1:]]
    assert rows == [
        ["16,384", "2", "1.5", "MB", "4.000", "(promoted)"],
        ["4,096", "2", "1.5", "MB", "3.400", "-", "vs", "v0001", "(16,384", "tokens)", "(promoted)"],
        ["4,096", "2", "1.5", "MB", "3.500", "+0.1000", "vs", "v0002", "(promoted,", "rollback", "target)"],
        ["4,096", "2", "1.5", "MB", "3.600", "-", "vs", "v0003", "(other", "evaluation", "rows)", "(latest)"],
    ]


def test_after_a_rollback_the_next_version_is_compared_with_the_one_it_replaces(tmp_path, capsys):
    """`bpe versions` compares a version with the one serving when it was published: after a
    rollback, the version rolled back to, not the one rolled back from."""
    store = VersionStore(str(tmp_path), "tok")
    publish_as(store, bpt=3.5)  # v0001
    publish_as(store, bpt=3.6)  # v0002
    assert store.rollback() == ("v0002", "v0001")
    publish_as(store, bpt=3.4)  # v0003: replaces v0001, which served
    store.promote("v0002")
    publish_as(store, bpt=3.45)  # v0004: replaces v0002, promoted again
    rows = describe_versions(store)
    assert [(r["previous_promoted"], r["change"] and round(r["change"], 6)) for r in rows] == [
        (None, None),
        ("v0001", 0.1),
        ("v0001", -0.1),
        ("v0002", -0.15),
    ]
    code, out, _ = bpe(capsys, "versions", f"{tmp_path}/tok")
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert code == 0 and "-0.1000 vs v0001" in lines["v0003"] and "-0.1500 vs v0002" in lines["v0004"]
    # the version that served, removed since: nothing to compare with, and why
    assert store.unpublish("v0001", lambda promotions: set()) is not None
    code, out, _ = bpe(capsys, "versions", f"{tmp_path}/tok")
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert code == 0 and "- vs v0001 (pruned)" in lines["v0002"] and "- vs v0001 (pruned)" in lines["v0003"]


def test_prune_command_is_a_dry_run_without_yes(tmp_path, capsys):
    store = VersionStore(str(tmp_path), "tok")
    for _ in range(3):
        publish_as(store)
    publish_as(store, "experiment")
    where = f"{tmp_path}/tok"
    code, out, _ = bpe(capsys, "prune", where, "--keep", "1")
    assert code == 0
    assert out == (
        f"{where}: 4 version(s); keeping 3:\n"
        "  v0002  rollback target\n"
        "  v0003  latest, newest main-line version\n"
        "  v0004  among the 1 newest\n"
        "would remove 1 version(s): v0001\n"
        "dry run: nothing removed; run again with --yes to remove them\n"
    )
    assert store.versions() == ["v0001", "v0002", "v0003", "v0004"]
    code, out, _ = bpe(capsys, "prune", where, "--keep", "1", "--yes")
    assert code == 0 and out.endswith("removed 1 version(s): v0001\n")
    assert store.versions() == ["v0002", "v0003", "v0004"]
    code, out, _ = bpe(capsys, "prune", where, "--keep", "1", "--yes")
    assert code == 0 and out.endswith("nothing to remove\n")


@pytest.fixture
def undeletable(tmp_path):
    """Make a file impossible to delete, really: immutable (`chattr +i`), since as root a read-only
    directory stops no deletion; or deletable again (`chattr -i`). Skips where the filesystem or
    the user cannot; everything under tmp_path is deletable again at the end."""

    def chattr(flag: str, path: Path) -> Path:
        done = subprocess.run(["chattr", flag, str(path)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot change a file's immutable flag here: {done.stderr.strip()}")
        return path

    yield chattr
    subprocess.run(["chattr", "-R", "-i", str(tmp_path)], capture_output=True)


def test_prune_says_what_it_could_not_delete_and_the_next_prune_retries_it(tmp_path, capsys, undeletable):
    """A version whose files cannot all be deleted is out of the store all the same; the report
    says what stayed and where instead of claiming it is gone, and later prunes retry it until it is."""
    store = VersionStore(str(tmp_path), "tok")
    for _ in range(3):
        publish_as(store)
    stuck = undeletable("+i", tmp_path / "tok" / "v0001" / "manifest.json")
    where = f"{tmp_path}/tok"
    code, out, _ = bpe(capsys, "prune", where, "--keep", "1", "--yes")
    assert code == 0 and store.versions() == ["v0002", "v0003"]
    [left] = [p for p in (tmp_path / "tok").iterdir() if p.name.startswith(".v0001.pruned-")]
    assert out.endswith(
        "removed 1 version(s): v0001\n"
        f"v0001 was removed, but not all its files: 1 file(s) (Operation not permitted: {left / stuck.name}) "
        f"left in {left}; the next prune retries\n"
    ), out
    code, out, _ = bpe(capsys, "prune", where, "--keep", "1")  # a dry run retries it too
    assert code == 0 and out.endswith(
        f"an earlier prune of v0001 left 1 file(s) (Operation not permitted: {left / stuck.name}) in {left}; "
        "the next prune retries\n"
    ), out
    undeletable("-i", left / stuck.name)
    code, out, _ = bpe(capsys, "prune", where, "--keep", "1", "--yes")
    assert code == 0 and out.startswith(f"deleted what an earlier prune of v0001 left in {left}\n"), out
    assert "retries" not in out and not left.exists()


# -- the count cache sweep ------------------------------------------------------------------------


def cache_entry(cache: Path, key: str, age_days: float, complete: bool = True) -> list[Path]:
    """A count as `CountCache` leaves it, last written `age_days` ago."""
    counts = cache / "counts"
    counts.mkdir(parents=True, exist_ok=True)
    files = [counts / f"{key}.parquet", counts / f"{key}.held-out.parquet"]
    if complete:
        files.append(counts / f"{key}.json")
    when = time.time() - age_days * DAY
    for path in files:
        path.write_bytes(b"x" * 1000)
        os.utime(path, (when, when))
    return files


def key(n: int) -> str:
    return f"count-{n:032x}"


def test_the_cache_sweep_removes_only_entries_no_run_used_for_that_long(tmp_path, capsys):
    cache = tmp_path / ".cache"
    fresh = cache_entry(cache, key(1), 1)
    old_but_in_use = cache_entry(cache, key(2), 90)
    old = cache_entry(cache, key(3), 90)
    half_written = cache_entry(cache, key(4), 90, complete=False)
    others = [cache / "counts" / "notes.txt", cache / "evaluation" / "set.parquet", cache / "runs" / "x" / "w.npz"]
    for path in others:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"not a count")
        os.utime(path, (time.time() - 400 * DAY,) * 2)
    mark_in_use(str(cache), f"{tmp_path}/artifacts/tok", "tok", {"pattern": "x"}, [key(2)])  # a run read it today
    code, out, _ = bpe(capsys, "prune-cache", str(cache), "--older-than", "30")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"{cache}: 4 count cache entries (0.0 MB); 2 not used for 30 days (0.0 MB)"
    assert sorted(line.split()[0] for line in lines[1:3]) == [key(3), key(4)]
    assert lines[2].endswith("(incomplete)") == (key(4) in lines[2])
    assert lines[-1] == "dry run: nothing removed; run again with --yes to remove them"
    assert all(p.exists() for p in fresh + old_but_in_use + old + half_written + others)
    code, out, _ = bpe(capsys, "prune-cache", str(cache), "--older-than", "30", "--yes")
    assert code == 0 and out.splitlines()[-1] == "removed 2 entries (0.0 MB)"
    assert all(p.exists() for p in fresh + old_but_in_use + others)
    assert not any(p.exists() for p in old + half_written)


def test_an_in_use_record_older_than_the_cutoff_protects_nothing_and_goes(tmp_path):
    cache = tmp_path / ".cache"
    entry = cache_entry(cache, key(5), 90)
    record = Path(mark_in_use(str(cache), "s3://b/artifacts/tok", "tok", {}, [key(5)]))
    data = json.loads(record.read_text())
    record.write_text(json.dumps({**data, "time": time.time() - 60 * DAY}))
    sweep = sweep_count_cache(str(cache), 30, apply=True)
    assert [e.key for e in sweep.removed] == [key(5)] and not any(p.exists() for p in entry)
    assert not record.exists()


def test_the_cache_sweep_works_on_object_storage_paths():
    """The same sweep through fsspec (memory:// here; s3:// the same way): what `counts/` lists."""
    import fsspec

    fs = fsspec.filesystem("memory")
    for suffix in (".json", ".parquet", ".held-out.parquet"):
        fs.pipe(f"/bpe-sweep/cache/counts/{key(6)}{suffix}", b"x")
    sweep = sweep_count_cache("memory://bpe-sweep/cache", 30, apply=True, now=time.time() + 31 * DAY)
    assert [e.key for e in sweep.removed] == [key(6)]
    assert fs.find("/bpe-sweep/cache/counts") == []


# -- the configuration's retention key ------------------------------------------------------------


def test_the_retention_key_is_validated(tmp_path):
    conf = tmp_path / "tok.yaml"
    base = {"name": "tok", "data": "x/", "vocab_size": 300}
    conf.write_text(yaml.safe_dump(base))
    assert load_config(conf).retention == Retention(None, None)
    conf.write_text(yaml.safe_dump({**base, "retention": {"keep_versions": 10, "cache_days": 30}}))
    cfg = load_config(conf)
    assert cfg.retention == Retention(10, 30.0) and cfg.as_dict()["retention"] == {
        "keep_versions": 10,
        "cache_days": 30.0,
    }
    assert load_config(conf, environ={"BPE_RETENTION": "{keep_versions: 2}"}).retention == Retention(2, None)
    for bad, message in (
        ({"keep_version": 3}, "retention: unknown key 'keep_version' (known: keep_versions, cache_days)"),
        ({"keep_versions": 0}, "retention.keep_versions: expected an integer >= 1 or null (keep every version), got 0"),
        (
            {"cache_days": "soon"},
            "retention.cache_days: expected a number of days > 0 or null (keep every entry), got 'soon'",
        ),
        (5, "retention: expected a mapping with keep_versions and/or cache_days, got 5"),
    ):
        conf.write_text(yaml.safe_dump({**base, "retention": bad}))
        with pytest.raises(SettingsError) as raised:
            load_config(conf)
        assert str(raised.value) == f"{conf}: {message}"


# -- the flow, against a real Prefect server and worker -------------------------------------------


CHANNEL_NAMES = ("chan", "kept")


@pytest.fixture(scope="module")
def deployed(services) -> dict[str, dict]:
    """One configuration per test, over three Parquet shards of its own, all deployed; `kept` has
    a retention key (one version beyond the protected ones, cache entries unused for 30 days)."""
    claim_deployment_names(__name__, *CHANNEL_NAMES)
    root, paragraphs = services["root"], stdlib_paragraphs()
    conf = root / "conf-channels"
    conf.mkdir()
    retention = {"kept": {"retention": {"keep_versions": 1, "cache_days": 30}}}
    configs = {}
    for name in CHANNEL_NAMES:
        cfg = pipeline_config(root, services["scheduler"], name, **SETTINGS, **retention.get(name, {}))
        shards = [paragraphs[i * 900 : (i + 1) * 900] for i in range(3)]
        configs[name] = {**write_config(conf, cfg, shards), "paragraphs": paragraphs}
    done = deploy(services, conf)
    assert done.returncode == 0, done.stderr[-3000:]
    return configs


def run(services, cfg: dict, **parameters) -> dict:
    """A run of `cfg`'s flow in this process (`tests.pipeline.test_pipeline.run_here`), which completes."""
    return completed(run_here(services, cfg["name"], config=cfg["conf"], **parameters))


def completed(result: dict) -> dict:
    assert result["state"] == "COMPLETED", result["message"] + result["logs"][-3000:]
    return result


def command(*args: str) -> subprocess.CompletedProcess:
    """`bpe ...` as an operator types it."""
    return subprocess.run([BPE, *args], capture_output=True, text=True, timeout=120)


def dry_prune(where: str) -> list[str]:
    """`bpe prune WHERE --keep 1` without --yes, which succeeds and removes nothing: what it lists after its heading."""
    dry = command("prune", where, "--keep", "1")
    lines = dry.stdout.splitlines()
    assert dry.returncode == 0 and lines[-1:] == ["dry run: nothing removed; run again with --yes to remove them"], (
        dry.stdout + dry.stderr
    )
    return lines[1:-1]


@pytest.mark.services
def test_an_override_is_an_experiment_and_promote_and_rollback_move_latest(services, deployed):
    cfg = deployed["chan"]
    store = VersionStore(cfg["artifact_root"], "chan")
    where = f"{cfg['artifact_root']}/chan"

    first = run(services, cfg)
    assert "training: no version yet; main line: latest moves to the new version" in first["logs"]
    assert store.latest() == "v0001" and store.manifest("v0001")["channel"] == "main"

    # A parameter of `prefect deployment run` overrides the configuration (the value parsed as JSON):
    # the one run of the deployment, by the worker; the others run the same flow here.
    experiment = completed(run_deployment(services, "chan", "--param", "vocab_size=700", command=True))
    assert (
        "training: vocab_size 600 -> 700 since v0001; experiment (parameters override vocab_size): latest "
        "stays v0001 unless promote=True" in experiment["logs"]
    )
    assert "published" in experiment["tags"]
    manifest = store.manifest("v0002")
    assert (manifest["channel"], manifest["promoted"], manifest["result"]["vocab_size"]) == ("experiment", False, 700)
    assert manifest["data"]["counted_shards"] == 0  # same data, same pre-tokenization: all cached
    assert store.versions() == ["v0001", "v0002"] and store.latest() == "v0001", "an experiment leaves latest"

    again = run(services, cfg, vocab_size=700)
    assert "no new data since v0002: 3 shard(s)" in again["logs"] and "latest is v0001" in again["logs"]
    main_again = run(services, cfg)
    assert "no new data since v0001" in main_again["logs"], "the experiment did not make the main line retrain"
    assert store.versions() == ["v0001", "v0002"] and store.latest() == "v0001"

    promoted = run(services, cfg, vocab_size=800, promote=True)
    assert "experiment (parameters override vocab_size), promote=True: latest moves" in promoted["logs"]
    assert store.latest() == "v0003" and store.manifest("v0003")["promoted"] is True

    done = command("promote", where, "v0002")
    assert done.returncode == 0 and done.stdout.startswith(f"{where}: latest v0003 -> v0002 (promoted;"), done.stderr
    assert store.latest() == "v0002"
    done = command("rollback", where)
    assert done.returncode == 0 and done.stdout.startswith(f"{where}: latest v0002 -> v0003 (rolled back;")
    done = command("rollback", where)
    assert done.returncode == 0 and done.stdout.startswith(f"{where}: latest v0003 -> v0001 (rolled back;")
    done = command("rollback", where)
    assert done.returncode == 1 and done.stderr == (
        f"bpe: error: {where}: nothing to roll back to: no version was promoted before v0001 (that is still in the "
        "store)\n"
    )
    assert store.latest() == "v0001"
    events = [(e["action"], e["version"], e["latest_after"]) for e in store.history()]
    assert events == [
        ("publish", "v0001", "v0001"),
        ("publish", "v0002", "v0001"),
        ("publish", "v0003", "v0003"),
        ("promote", "v0002", "v0002"),
        ("rollback", "v0003", "v0003"),
        ("rollback", "v0001", "v0001"),
    ]
    run_ids = [store.manifest(v)["prefect"]["flow_run_id"] for v in ("v0001", "v0002", "v0003")]
    assert [e["by"] for e in store.history()[:3]] == [f"flow run {i}" for i in run_ids]

    listed = command("versions", where)
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line for line in listed.stdout.splitlines()[1:]}
    assert rows["v0001"].endswith("(latest)") and " main " in rows["v0001"]
    assert " experiment " in rows["v0002"] and rows["v0002"].endswith("(promoted)")
    # each against what served when it was published: v0002 was promoted only after v0003 was published
    assert "- vs v0001 (600 tokens)" in rows["v0002"] and "- vs v0001 (600 tokens)" in rows["v0003"]

    assert dry_prune(where) == [
        "  v0001  latest, newest main-line version",
        "  v0003  among the 1 newest",
        "would remove 1 version(s): v0002",
    ]
    assert store.versions() == ["v0001", "v0002", "v0003"]
    applied = command("prune", where, "--keep", "1", "--yes")
    assert applied.returncode == 0 and applied.stdout.endswith("removed 1 version(s): v0002\n"), applied.stderr
    assert store.versions() == ["v0001", "v0003"] and store.latest() == "v0001"


@pytest.mark.services
def test_the_flow_applies_the_configurations_retention_after_publishing(services, deployed):
    cfg = deployed["kept"]
    store = VersionStore(cfg["artifact_root"], "kept")
    cache = Path(cfg["artifact_root"]) / ".cache"
    run(services, cfg)  # v0001
    assert (cache / "in-use").is_dir() and len(list((cache / "counts").glob("*.json"))) == 3
    planted = cache_entry(cache, key(7), 45)  # a count no run has used for 45 days
    write_parquet(cfg["data_dir"] / "part-00003.parquet", cfg["paragraphs"][2700:3600])
    second = run(services, cfg)  # v0002: v0001 stays, the rollback target
    assert (
        "retention: no version to remove (keep_versions 1); kept v0001 (rollback target), v0002 (among the 1 "
        "newest, latest, newest main-line version)" in second["logs"]
    )
    assert "retention: removed 1 count cache entry unused for 30 days" in second["logs"]
    assert not any(p.exists() for p in planted)
    assert len(list((cache / "counts").glob("*.json"))) == 4, "the counts in use are all kept"
    run(services, cfg, vocab_size=700)  # v0003, an experiment
    write_parquet(cfg["data_dir"] / "part-00004.parquet", cfg["paragraphs"][3600:4500])
    fourth = run(services, cfg)  # v0004 on the main line: v0001 and the experiment v0003 go
    assert (
        "retention: removed 2 version(s) of kept: v0001, v0003; kept v0002 (rollback target), v0004 (among "
        "the 1 newest, latest, newest main-line version)" in fourth["logs"]
    )
    assert store.versions() == ["v0002", "v0004"] and store.latest() == "v0004"
    assert [e["version"] for e in store.history() if e["action"] == "prune"] == ["v0001", "v0003"]
    assert store.rollback()[1] == "v0002"


# -- on S3 (moto's server on 127.0.0.1) -----------------------------------------------------------


@pytest.fixture
def s3_bucket(s3_env) -> str:
    """A bucket of this test's own on the session's moto S3 server (see tests/conftest.py `s3_server`)."""
    import boto3

    bucket = unique_bucket("bpe-channels")
    boto3.client("s3").create_bucket(Bucket=bucket)
    return bucket


@pytest.mark.services
def test_promote_rollback_and_prune_on_s3(s3_bucket, tmp_path):
    import boto3

    root = f"s3://{s3_bucket}/artifacts"
    store = VersionStore(root, "tok")
    for _ in range(4):
        publish_as(store)
    publish_as(store, "experiment")
    where = f"{root}/tok"
    done = command("promote", where, "v0005")
    assert done.returncode == 0 and done.stdout.startswith(f"{where}: latest v0004 -> v0005 (promoted;"), done.stderr
    assert command("rollback", where).stdout.startswith(f"{where}: latest v0005 -> v0004 (rolled back;")
    assert command("rollback", where).stdout.startswith(f"{where}: latest v0004 -> v0003 (rolled back;")
    assert storage_text(f"{where}/latest") == "v0003\n"
    assert dry_prune(where) == [
        "  v0002  rollback target",
        "  v0003  latest",
        "  v0004  newest main-line version",
        "  v0005  among the 1 newest",
        "would remove 1 version(s): v0001",
    ]
    applied = command("prune", where, "--keep", "1", "--yes")
    assert applied.returncode == 0 and applied.stdout.endswith("removed 1 version(s): v0001\n"), applied.stderr
    objects = [o["Key"] for o in boto3.client("s3").list_objects_v2(Bucket=s3_bucket)["Contents"]]
    assert not [k for k in objects if k.startswith("artifacts/tok/v0001/")], objects
    assert store.versions() == ["v0002", "v0003", "v0004", "v0005"] and store.latest() == "v0003"
    actions = [(e["action"], e["version"]) for e in store.history()]
    assert actions[-4:] == [("promote", "v0005"), ("rollback", "v0004"), ("rollback", "v0003"), ("prune", "v0001")]
    missing = command("rollback", f"{root}/tokk")
    assert (missing.returncode, missing.stderr) == (
        1,
        f"bpe: error: {root}/tokk: no such artifact store (expected <artifact root>/<tokenizer name>)\n",
    )

    cache = f"s3://{s3_bucket}/cache"
    for suffix in (".json", ".parquet", ".held-out.parquet"):
        boto3.client("s3").put_object(Bucket=s3_bucket, Key=f"cache/counts/{key(8)}{suffix}", Body=b"x")
    kept = command("prune-cache", cache, "--older-than", "1", "--yes")
    assert kept.returncode == 0 and kept.stdout.splitlines()[-1] == "nothing to remove", kept.stdout + kept.stderr
    sweep = sweep_count_cache(cache, 1, apply=True, now=time.time() + 2 * DAY)
    assert [e.key for e in sweep.removed] == [key(8)]
    assert not boto3.client("s3").list_objects_v2(Bucket=s3_bucket, Prefix="cache/counts/").get("Contents")


def storage_text(url: str) -> str:
    from bpe import storage

    return storage.read_bytes(url).decode()

"""The count cache: its entries are signed with the deployment's key and hold a digest of each of
their files, and their values are checked on read; an entry that is damaged, planted, or signed
elsewhere is a miss, warned about once, counted again and replaced, never served (it would decide
what is published, or fail every later run)."""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

import bpe
from bpe import Tokenizer, storage, train
from bpe.distributed.count_tasks import ShardCount
from bpe.pipeline.count_cache import CountCache
from bpe.training.counting import CountStats
from tests.conftest import not_a_regular_file, raised_in_limits, stdlib_paragraphs, unique_bucket, write_parquet
from tests.pipeline.conftest import kept_rows

VOCAB = 400


class Records(logging.Handler):
    """The log records a logger (and its children) emit while attached."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def warnings(self) -> list[str]:
        return [r.getMessage() for r in self.records if r.levelno >= logging.WARNING]

    def messages(self) -> list[str]:
        return [r.getMessage() for r in self.records]


@contextmanager
def prefect_logs() -> Iterator[Records]:
    """The records of Prefect's flow and task run loggers (where `get_run_logger` writes)."""
    records, logger = Records(), logging.getLogger("prefect")
    logger.addHandler(records)
    try:
        yield records
    finally:
        logger.removeHandler(records)


def count_files(cache: Path, shard: Path, config: Path) -> Path:
    """The Parquet file of `shard`'s counts in the count cache."""
    from bpe.inputs.discover import discover
    from bpe.pipeline.config import load_config
    from bpe.pipeline.count_cache import CountCache, counting_settings, shard_count_key

    [found] = discover([str(shard)])
    key = shard_count_key({**found.fingerprint(), "kind": found.kind}, counting_settings(load_config(config)))
    return Path(CountCache(str(cache)).paths(key)[0])


SECRET = b"a count cache key for the tests, 32+ characters"


def cached_count(cache: CountCache, key: str, shard: dict) -> ShardCount:
    """A count as the pipeline leaves one: its Parquet files written (hashed as written), then its JSON."""
    counts, held_out = cache.paths(key)
    words = pa.table({"word": pa.array([b"ab", b"cd"], pa.binary()), "count": pa.array([3, 1], pa.int64())})
    rows = pa.table({"text": pa.array(["held out"], pa.string())})
    digests = {
        "counts": storage.write_file_digest(counts, lambda tmp: pq.write_table(words, tmp)),
        "held_out": storage.write_file_digest(held_out, lambda tmp: pq.write_table(rows, tmp)),
    }
    cache.record(key, ShardCount(shard, counts, held_out, CountStats(documents=2), 0.5, digests=digests))
    return cache.lookup(key, shard)


def check_damage_is_a_miss(cache: CountCache, overwrite) -> None:
    """A hit, until one file's bytes change (via `overwrite(path, data)`): then one warning naming the
    shard and the file, and a miss; without digests, or with its files gone, a miss without a warning."""
    shard, key = {"path": "/data/part-0.parquet", "size": 10, "sha256": "0" * 64, "kind": "parquet"}, KEY
    hit = cached_count(cache, key, shard)
    assert hit is not None and hit.cached and hit.stats.documents == 2
    counts, held_out = cache.paths(key)
    for path in (counts, held_out):
        warnings: list[str] = []
        data = storage.read_bytes(path)
        overwrite(path, data[:-8] + b"damaged!")  # same size, other bytes
        assert cache.lookup(key, shard, warn=warnings.append) is None
        assert warnings == [
            f"/data/part-0.parquet: count cache entry {path} not used (its bytes differ from those "
            "written); counting the shard again"
        ]
        overwrite(path, data[: len(data) // 2])  # truncated
        assert cache.lookup(key, shard, warn=warnings.append) is None and len(warnings) == 2
        assert cached_count(cache, key, shard) is not None  # counted again, the entry replaced: a hit

    warnings = []
    overwrite(cache.record_path(key), b"{not json")
    assert cache.lookup(key, shard, warn=warnings.append) is None
    assert warnings == [
        f"/data/part-0.parquet: count cache entry {cache.record_path(key)} not used (unreadable "
        "record: JSONDecodeError); counting the shard again"
    ]
    cached_count(cache, key, shard)
    record = json.loads(storage.read_bytes(cache.record_path(key)))
    del record["digests"]
    overwrite(cache.record_path(key), json.dumps(record).encode())  # its files can no longer be checked
    assert cache.lookup(key, shard, warn=warnings.append) is None and len(warnings) == 2
    cached_count(cache, key, shard)
    storage.remove(counts)  # cleaned away: quietly a miss
    assert cache.lookup(key, shard, warn=warnings.append) is None and len(warnings) == 2


KEY = "count-" + "1" * 32


def test_a_damaged_cache_entry_is_a_miss_with_one_warning(tmp_path):
    check_damage_is_a_miss(CountCache(str(tmp_path / "cache"), SECRET), lambda path, data: Path(path).write_bytes(data))


@pytest.mark.services
def test_a_damaged_cache_entry_in_object_storage_is_a_miss(s3_env):
    """On S3 the digest is that of the object uploaded, and a changed object is a miss."""
    import boto3

    bucket = unique_bucket("bpe-count-cache")
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=bucket)
    cache = CountCache(f"s3://{bucket}/cache", SECRET)
    hit = cached_count(cache, KEY, {"path": "/data/part-0.parquet", "size": 10, "sha256": "0" * 64, "kind": "parquet"})
    stored = s3.get_object(Bucket=bucket, Key=f"cache/counts/{KEY}.parquet")["Body"].read()
    assert hit.digests["counts"] == hashlib.blake2b(stored, digest_size=32).hexdigest()

    def overwrite(url: str, data: bytes) -> None:
        s3.put_object(Bucket=bucket, Key=url.removeprefix(f"s3://{bucket}/"), Body=data)

    check_damage_is_a_miss(cache, overwrite)


def two_shard_config(root: Path, scheduler: str, name: str, **settings) -> tuple[list[Path], dict]:
    """Two Parquet shards of 400 paragraphs under ROOT/data and a configuration over them, for the flow run here."""
    paragraphs = stdlib_paragraphs()
    shards = [write_parquet(root / "data" / f"part-{i}.parquet", paragraphs[i * 400 : (i + 1) * 400]) for i in range(2)]
    cfg = {
        "name": name,
        "data": str(root / "data"),
        "vocab_size": VOCAB,
        "pattern": "cl100k",
        "special_tokens": ["<|endoftext|>"],
        "holdout_fraction": 0.05,
        "artifact_root": str(root / "art"),
        "dask_scheduler": scheduler,
        **settings,
    }
    return shards, cfg


@pytest.mark.services
def test_a_damaged_count_is_counted_again_and_replaced(pipeline_services, prefect_server, tmp_path):
    """Run the flow in this process, truncate one shard's cached counts, run again: the run
    succeeds with a clean run's merges, one warning names the shard and the entry, and the run
    after it takes every count from the cache again."""
    from prefect.settings import PREFECT_API_URL, PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    from bpe.flows.train_bpe import train_bpe

    shards, cfg = two_shard_config(tmp_path, pipeline_services["scheduler"], "damaged")
    config = tmp_path / "damaged.yaml"
    config.write_text(yaml.safe_dump(cfg))
    settings = {PREFECT_API_URL: prefect_server["api"], PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}
    with temporary_settings(settings):
        assert train_bpe(config=str(config))["counted_shards"] == 2
        damaged = count_files(tmp_path / "art" / ".cache", shards[1], config)
        damaged.write_bytes(damaged.read_bytes()[: damaged.stat().st_size // 2])
        with prefect_logs() as logs:
            again = train_bpe(config=str(config), vocab_size=VOCAB + 20)
        with prefect_logs() as later_logs:
            later = train_bpe(config=str(config), vocab_size=VOCAB + 40)

    assert (again["counted_shards"], again["cached_shards"]) == (1, 1)
    [warning] = logs.warnings()
    assert f"{shards[1]}:" in warning and str(damaged) in warning, warning
    clean = train(kept_rows(shards), vocab_size=VOCAB + 20, pattern="cl100k", special_tokens=["<|endoftext|>"])
    assert Tokenizer.load(again["location"]).merges == clean.merges
    assert (later["counted_shards"], later["cached_shards"]) == (0, 2)
    assert later_logs.warnings() == []


# -- what a writer of the cache cannot do ------------------------------------------------------

SHARD = {"path": "/data/part-0.parquet", "size": 10, "sha256": "0" * 64, "kind": "parquet"}
WORDS = pa.table({"word": pa.array([b"ab", b"cd"], pa.large_binary()), "count": pa.array([3, 1], pa.int64())})
ROWS = pa.table({"text": pa.array(["held out"], pa.string())})
STATS = {"documents": 2, "bytes": 16, "null_rows": 0, "pretokens": 4, "special_tokens": {}, "held_out_rows": 1}


def plant(cache: CountCache, key: str, words=WORDS, rows=ROWS, sign: bool = True, **changes) -> dict:
    """Write an entry as someone with write access to the cache would: Parquet files of their
    choosing and a record with their true digests and sizes, then `changes` to the record; signed
    with the deployment's key (as a holder of the key, or a faulty writer, would) only if `sign`."""
    counts, held_out = cache.paths(key)
    record = {"format": 2, "key": key, "shard": SHARD, "stats": STATS, "seconds": 0.5, "digests": {}, "sizes": {}}
    for name, path, table in (("counts", counts, words), ("held_out", held_out, rows)):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path)
        record["digests"][name] = hashlib.blake2b(Path(path).read_bytes(), digest_size=32).hexdigest()
        record["sizes"][name] = Path(path).stat().st_size
    record.update(changes)
    if sign:
        record["mac"] = cache._sign(record)
    Path(cache.record_path(key)).write_text(json.dumps(record))
    return record


def lookup_warned(cache: CountCache, key: str = KEY) -> tuple[ShardCount | None, list[str]]:
    warnings: list[str] = []
    return cache.lookup(key, SHARD, warn=warnings.append), warnings


def test_an_entry_is_a_hit_only_when_signed_with_the_deployments_key(tmp_path):
    """Recomputed digests do not make a planted entry a hit: nor do a copied signature, a record
    signed with another key, or a genuine entry moved to another shard's key."""
    cache = CountCache(str(tmp_path / "cache"), SECRET)
    genuine = plant(cache, KEY)
    hit, warnings = lookup_warned(cache)
    assert hit is not None and hit.stats == CountStats(**STATS) and warnings == []

    words = pa.table({"word": pa.array([b"\xff\xfe"], pa.large_binary()), "count": pa.array([10**9], pa.int64())})
    for record in (
        plant(cache, KEY, words, sign=False),  # no signature
        plant(cache, KEY, words, sign=False, mac=genuine["mac"]),  # the genuine entry's signature
        plant(CountCache(str(tmp_path / "cache"), b"another deployment's key, 32+ chars"), KEY, words),
    ):
        found, warnings = lookup_warned(cache)
        assert found is None, record
        assert warnings == [
            f"/data/part-0.parquet: count cache entry {cache.record_path(KEY)} not used (not signed with this "
            "deployment's count cache key: planted, altered, or signed elsewhere); counting the shard again"
        ]
    other = "count-" + "2" * 32
    plant(cache, KEY)
    for path, moved in zip(
        (*cache.paths(KEY), cache.record_path(KEY)), (*cache.paths(other), cache.record_path(other))
    ):
        Path(moved).write_bytes(Path(path).read_bytes())
    found, warnings = lookup_warned(cache, other)
    assert found is None and len(warnings) == 1 and "(a record of another format or key)" in warnings[0]


def signed_faults(tmp_path: Path):
    """(what, file at fault, planted as): entries signed with the right key whose values are not those of counts."""
    strings = pa.table({"word": pa.array(["ab"], pa.string()), "count": pa.array([2.5], pa.float64())})
    negative = pa.table({"word": pa.array([b"ab", b"cd"], pa.large_binary()), "count": pa.array([5, -5], pa.int64())})
    zero = pa.table({"word": pa.array([b"ab"], pa.large_binary()), "count": pa.array([0], pa.int64())})
    null = pa.table({"word": pa.array([None, b"ab"], pa.large_binary()), "count": pa.array([1, 1], pa.int64())})
    empty = pa.table({"word": pa.array([b""], pa.large_binary()), "count": pa.array([1], pa.int64())})
    extra = WORDS.append_column("more", pa.array([1, 2]))
    return [
        ("string words, float counts", "counts", {"words": strings}),
        ("negative counts", "counts", {"words": negative}),
        ("a zero count", "counts", {"words": zero}),
        ("a null word", "counts", {"words": null}),
        ("an empty word", "counts", {"words": empty}),
        ("another column", "counts", {"words": extra}),
        ("held-out rows of another type", "held_out", {"rows": pa.table({"text": pa.array([1, 2])})}),
        ("damaged stats", "record", {"stats": {**STATS, "documents": -5, "bytes": "x"}}),
        ("stats missing a field", "record", {"stats": {"documents": 2}}),
        ("a boolean count in stats", "record", {"stats": {**STATS, "pretokens": True}}),
        ("counts past int64 in stats", "record", {"stats": {**STATS, "bytes": 2**63}}),
        ("special tokens that are not counts", "record", {"stats": {**STATS, "special_tokens": {"<s>": -1}}}),
        ("seconds not a number", "record", {"seconds": float("nan")}),
        ("a digest that is not one", "record", {"digests": {"counts": "../../etc/passwd", "held_out": "0" * 64}}),
        ("no sizes", "record", {"sizes": None}),
        ("a size that is not the file's", "counts", {"sizes": {"counts": 1, "held_out": 1}}),
    ]


@pytest.mark.parametrize("what", [fault[0] for fault in signed_faults(Path("."))])
def test_a_signed_entry_whose_values_are_not_counts_is_a_miss_with_one_warning(tmp_path, what):
    """A signature says who wrote an entry, not that it holds counts: the schema and values are
    checked as it is read, and the warning names the file at fault."""
    [(_, at_fault, planted)] = [fault for fault in signed_faults(tmp_path) if fault[0] == what]
    cache = CountCache(str(tmp_path / "cache"), SECRET)
    plant(cache, KEY, **planted)
    found, warnings = lookup_warned(cache)
    counts, held_out = cache.paths(KEY)
    path = {"counts": counts, "held_out": held_out, "record": cache.record_path(KEY)}[at_fault]
    assert found is None and len(warnings) == 1, warnings
    assert warnings[0].startswith(f"/data/part-0.parquet: count cache entry {path} not used ("), warnings
    assert warnings[0].endswith("); counting the shard again")


def test_files_that_are_not_regular_files_are_never_read(tmp_path):
    """A record or counts file that is a link to an endless device or a FIFO is a miss, at once."""
    import os

    cache = CountCache(str(tmp_path / "cache"), SECRET)
    plant(cache, KEY)
    counts = Path(cache.paths(KEY)[0])
    counts.unlink()
    os.mkfifo(counts)  # opening it would wait for a writer forever
    found, warnings = lookup_warned(cache)
    assert found is None and warnings == [
        f"/data/part-0.parquet: count cache entry {counts} not used (not a regular file); counting the shard again"
    ]
    record = Path(cache.record_path(KEY))
    record.unlink()
    record.symlink_to("/dev/zero")
    found, warnings = lookup_warned(cache)
    assert found is None and warnings == [
        f"/data/part-0.parquet: count cache entry {record} not used (not a regular file); counting the shard again"
    ]


def test_a_file_replaced_after_its_entry_was_checked_is_not_read_as_counts(tmp_path):
    """The workers that read a hit's files check the bytes they read against the record (a file
    swapped between the lookup and the read would otherwise be trained on)."""
    from bpe.distributed.count_tasks import read_counts, read_held_out
    from bpe.errors import InputError

    cache = CountCache(str(tmp_path / "cache"), SECRET)
    plant(cache, KEY)
    hit, _ = lookup_warned(cache)
    assert read_counts(hit.counts, hit.expected("counts")).to_dict() == {b"ab": 3, b"cd": 1}
    assert read_held_out(hit.held_out, hit.expected("held_out")) == ["held out"]
    words = pa.table({"word": pa.array([b"\xff\xfe"], pa.large_binary()), "count": pa.array([10**9], pa.int64())})
    pq.write_table(words, hit.counts)
    pq.write_table(pa.table({"text": pa.array(["planted"])}), hit.held_out)
    for read, path, name in ((read_counts, hit.counts, "counts"), (read_held_out, hit.held_out, "held_out")):
        with pytest.raises(InputError, match=f"^{re.escape(path)}: changed since it was written or checked; run"):
            read(path, hit.expected(name))


def test_the_count_cache_key_comes_from_the_deployment(tmp_path):
    """BPE_CACHE_KEY, else the file BPE_CACHE_KEY_FILE names, else one made on first use in
    PREFECT_HOME, readable by its owner only, the same for every process that asks at once."""
    import os
    import subprocess
    import sys

    from bpe.errors import SettingsError
    from bpe.pipeline.security import count_cache_key

    assert count_cache_key({"BPE_CACHE_KEY": "k" * 40}) == b"k" * 40
    with pytest.raises(SettingsError, match=r"^BPE_CACHE_KEY: the count cache key has 5 characters; expected at"):
        count_cache_key({"BPE_CACHE_KEY": "short"})
    (tmp_path / "key").write_text("f" * 64 + "\n")
    assert count_cache_key({"BPE_CACHE_KEY_FILE": str(tmp_path / "key")}) == b"f" * 64
    with pytest.raises(SettingsError, match=r"^BPE_CACHE_KEY_FILE: .*/absent: missing$"):
        count_cache_key({"BPE_CACHE_KEY_FILE": str(tmp_path / "absent")})

    home = tmp_path / "prefect-home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BPE_CACHE_KEY")}
    env["PREFECT_HOME"] = str(home)
    code = "from bpe.pipeline.security import count_cache_key; print(count_cache_key().decode())"
    started = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True) for _ in range(4)
    ]
    keys = {process.communicate(timeout=120)[0].strip() for process in started}
    assert [p.returncode for p in started] == [0] * 4
    [key] = keys  # one key, whichever process made it
    assert len(key) == 64 and (home / "bpe-cache-key").read_text().strip() == key
    assert (home / "bpe-cache-key").stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in home.iterdir()) == ["bpe-cache-key"]  # no temporary file left


@pytest.mark.parametrize("replacement", ["/dev/zero", "fifo", "directory", "/nowhere/key"])
@pytest.mark.parametrize("variable", ["BPE_CACHE_KEY_FILE", "PREFECT_HOME"])
def test_a_key_file_that_is_not_a_regular_file_is_refused_in_one_line_without_reading_it(
    tmp_path, variable, replacement
):
    """/dev/zero would fill memory and a FIFO wait for a writer forever (in a process of their own,
    under a time limit and an address-space limit, so that a regression fails the test); a
    directory or a link to nothing was an OS error's words, or a traceback."""
    import os

    path = tmp_path / ("bpe-cache-key" if variable == "PREFECT_HOME" else "key")
    not_a_regular_file(path, replacement)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BPE_CACHE_KEY")}
    env[variable] = str(path if variable == "BPE_CACHE_KEY_FILE" else tmp_path)
    done = raised_in_limits("count_cache_key()", imports="bpe.pipeline.security, prefect.settings", env=env)
    named = "BPE_CACHE_KEY_FILE: " if variable == "BPE_CACHE_KEY_FILE" else ""
    kind = {"/dev/zero": "a character device", "fifo": "a FIFO", "directory": "a directory"}.get(replacement)
    if kind:
        reason = f"not a regular file ({kind}), so not a count cache key file"
    else:
        reason = "a link to /nowhere/key, which does not exist"
    assert done.stdout == f"SettingsError {named}{path}: {reason}\n", done.stdout + done.stderr[-2000:]


def test_a_key_file_others_can_read_is_used_with_a_warning(tmp_path):
    """As ssh says of a private key: the key works, and the run's log says who else can read it."""
    from bpe.errors import SettingsError
    from bpe.pipeline.security import count_cache_key

    path = tmp_path / "key"
    path.write_text("f" * 64 + "\n")
    said: list[str] = []
    path.chmod(0o600)
    assert count_cache_key({"BPE_CACHE_KEY_FILE": str(path)}, warn=said.append) == b"f" * 64 and said == []
    path.chmod(0o644)
    assert count_cache_key({"BPE_CACHE_KEY_FILE": str(path)}, warn=said.append) == b"f" * 64
    assert said == [
        f"BPE_CACHE_KEY_FILE: {path}: the count cache key is open to other users (mode 0644), and whoever reads it "
        f"can sign count cache entries: chmod 600 {path}"
    ]
    with open(path, "r+b") as f:
        f.truncate(1 << 30)  # sparse: costs no disk
    with pytest.raises(SettingsError, match=r"^BPE_CACHE_KEY_FILE: .*/key: holds 1,073,741,824 bytes, more than 4 KiB"):
        count_cache_key({"BPE_CACHE_KEY_FILE": str(path)})


# -- through the flow --------------------------------------------------------------------------


def replace_counts(table: pa.Table):
    """A planting: the shard's counts replaced by `table`, the record's digest (and size) recomputed."""

    def planting(record: dict, counts: Path) -> None:
        pq.write_table(table, counts)
        record["digests"]["counts"] = hashlib.blake2b(counts.read_bytes(), digest_size=32).hexdigest()
        if "sizes" in record:
            record["sizes"]["counts"] = counts.stat().st_size

    return planting


def damage_stats(record: dict, counts: Path) -> None:
    record["stats"] = {"documents": -5, "bytes": "x"}


PLANTINGS = {
    # what someone who can write the cache, but holds no key, would leave in place of an entry
    "recomputed digests": replace_counts(
        pa.table({"word": pa.array([b"\xff\xfe" * 3], pa.large_binary()), "count": pa.array([10**9], pa.int64())})
    ),
    "string words, float counts": replace_counts(
        pa.table({"word": pa.array(["the", " of"], pa.string()), "count": pa.array([1e6, 2.5], pa.float64())})
    ),
    "damaged stats": damage_stats,
    "negative counts": replace_counts(
        pa.table(
            {"word": pa.array([b" the", b" of"], pa.large_binary()), "count": pa.array([-5, -(2**40)], pa.int64())}
        )
    ),
}


@pytest.fixture(scope="module")
def counted_once(pipeline_services, prefect_server, tmp_path_factory):
    """Two shards counted once by the flow (run in this process against the session's services),
    under a count cache key of the module's own; yields what the tests need to run it again."""
    from prefect.settings import PREFECT_API_URL, PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    from bpe.flows.train_bpe import train_bpe

    root = tmp_path_factory.mktemp("planted")
    shards, cfg = two_shard_config(root, pipeline_services["scheduler"], "planted", cache_dir=str(root / "cache"))
    settings = {PREFECT_API_URL: prefect_server["api"], PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}
    with pytest.MonkeyPatch.context() as patch, temporary_settings(settings):
        patch.setenv("BPE_CACHE_KEY", "the planted tests' count cache key, 32+ characters")
        (root / "planted.yaml").write_text(yaml.safe_dump(cfg))
        assert train_bpe(config=str(root / "planted.yaml"))["counted_shards"] == 2
        yield {"root": root, "cfg": cfg, "shards": shards, "kept": kept_rows(shards), "run": train_bpe}


@pytest.mark.services
@pytest.mark.parametrize("planting", list(PLANTINGS))
def test_a_planted_count_is_a_miss_and_the_run_publishes_a_clean_runs_merges(counted_once, tmp_path, planting):
    """An entry planted by someone who can write the cache but holds no key (recomputed digests,
    counts of another schema, damaged stats, negative counts) is never trained on and never blocks
    a run: one warning names the shard and the entry, the shard is counted again, and the version
    has the merges of the library's `train` on the rows the pipeline keeps."""
    import shutil

    cfg = {**counted_once["cfg"], "artifact_root": str(tmp_path / "art"), "cache_dir": str(tmp_path / "cache")}
    shutil.copytree(counted_once["cfg"]["cache_dir"], cfg["cache_dir"])
    config = tmp_path / "planted.yaml"
    config.write_text(yaml.safe_dump(cfg))
    shard = counted_once["shards"][1]
    counts = count_files(Path(cfg["cache_dir"]), shard, config)
    record_path = counts.with_suffix(".json")
    record = json.loads(record_path.read_text())
    PLANTINGS[planting](record, counts)
    record_path.write_text(json.dumps(record))

    with prefect_logs() as logs:
        result = counted_once["run"](config=str(config))
    assert (result["counted_shards"], result["cached_shards"]) == (1, 1)
    [warning] = logs.warnings()
    assert warning.startswith(f"{shard}: count cache entry {record_path} not used ("), warning
    clean = train(counted_once["kept"], vocab_size=VOCAB, pattern="cl100k", special_tokens=["<|endoftext|>"])
    assert Tokenizer.load(result["location"]).merges == clean.merges and result["latest"] == "v0001"
    hit = CountCache(cfg["cache_dir"], b"the planted tests' count cache key, 32+ characters")
    assert hit.lookup(record_path.stem, {"path": str(shard)}) is not None, "the entry was replaced"


def test_the_counting_code_version_reads_every_module_that_decides_counts():
    """Cached counts are reused while this code is unchanged: each module it names must be there."""
    from bpe.training.counting import COUNTING_MODULES, counting_code_version

    package = Path(bpe.__file__).parent
    assert [name for name in COUNTING_MODULES if not (package / name).is_file()] == []
    assert len(counting_code_version()) == 16

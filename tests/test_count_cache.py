"""The count cache keeps a digest of each entry's files: a damaged entry is a miss, warned about
once, counted again and replaced, never served (it would fail every later run)."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from bpe import Tokenizer, storage, train
from bpe.counting import CountStats, holdout_mask
from bpe.distributed.counting import ShardCount
from bpe.pipeline.count_cache import CountCache
from tests.conftest import stdlib_paragraphs, unique_bucket, write_parquet

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
            f"/data/part-0.parquet: damaged count cache entry {path} (its bytes differ from those "
            "written); counting the shard again"
        ]
        overwrite(path, data[: len(data) // 2])  # truncated
        assert cache.lookup(key, shard, warn=warnings.append) is None and len(warnings) == 2
        assert cached_count(cache, key, shard) is not None  # counted again, the entry replaced: a hit

    warnings = []
    overwrite(cache.record_path(key), b"{not json")
    assert cache.lookup(key, shard, warn=warnings.append) is None
    assert warnings == [
        f"/data/part-0.parquet: damaged count cache entry {cache.record_path(key)} (unreadable "
        "record: JSONDecodeError); counting the shard again"
    ]
    cached_count(cache, key, shard)
    record = json.loads(storage.read_bytes(cache.record_path(key)))
    del record["digests"]
    overwrite(cache.record_path(key), json.dumps(record).encode())  # written before digests were recorded
    assert cache.lookup(key, shard, warn=warnings.append) is None
    cached_count(cache, key, shard)
    storage.remove(counts)  # cleaned away
    assert cache.lookup(key, shard, warn=warnings.append) is None and len(warnings) == 1


KEY = "count-" + "1" * 32


def test_a_damaged_cache_entry_is_a_miss_with_one_warning(tmp_path):
    check_damage_is_a_miss(CountCache(str(tmp_path / "cache")), lambda path, data: Path(path).write_bytes(data))


@pytest.mark.services
def test_a_damaged_cache_entry_in_object_storage_is_a_miss(s3_env):
    """On S3 the digest is that of the object uploaded, and a changed object is a miss."""
    import boto3

    bucket = unique_bucket("bpe-count-cache")
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=bucket)
    cache = CountCache(f"s3://{bucket}/cache")
    hit = cached_count(cache, KEY, {"path": "/data/part-0.parquet", "size": 10, "sha256": "0" * 64, "kind": "parquet"})
    stored = s3.get_object(Bucket=bucket, Key=f"cache/counts/{KEY}.parquet")["Body"].read()
    assert hit.digests["counts"] == hashlib.blake2b(stored, digest_size=32).hexdigest()

    def overwrite(url: str, data: bytes) -> None:
        s3.put_object(Bucket=bucket, Key=url.removeprefix(f"s3://{bucket}/"), Body=data)

    check_damage_is_a_miss(cache, overwrite)


@pytest.mark.services
def test_a_damaged_count_is_counted_again_and_replaced(pipeline_services, prefect_server, tmp_path):
    """Run the flow in this process, truncate one shard's cached counts, run again: the run
    succeeds with a clean run's merges, one warning names the shard and the entry, and the run
    after it takes every count from the cache again."""
    from prefect.settings import PREFECT_API_URL, PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    from bpe.flows.train_bpe import train_bpe

    paragraphs = stdlib_paragraphs()
    shards = [
        write_parquet(tmp_path / "data" / f"part-{i}.parquet", paragraphs[i * 400 : (i + 1) * 400]) for i in range(2)
    ]
    cfg = {
        "name": "damaged",
        "data": str(tmp_path / "data"),
        "vocab_size": VOCAB,
        "pattern": "cl100k",
        "special_tokens": ["<|endoftext|>"],
        "holdout_fraction": 0.05,
        "artifact_root": str(tmp_path / "art"),
        "dask_scheduler": pipeline_services["scheduler"],
    }
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
    rows = pa.array([t for shard in shards for t in pq.read_table(shard).column("text").to_pylist()], pa.large_string())
    kept = rows.filter(pa.array(~holdout_mask(rows, 0.05))).to_pylist()
    clean = train(kept, vocab_size=VOCAB + 20, pattern="cl100k", special_tokens=["<|endoftext|>"])
    assert Tokenizer.load(again["location"]).merges == clean.merges
    assert (later["counted_shards"], later["cached_shards"]) == (0, 2)
    assert later_logs.warnings() == []

"""Tasks for the data: find the shards, count each shard (cached by content), combine the counts."""

from __future__ import annotations

import hashlib
import json
import os
import time

from prefect import get_run_logger, task
from prefect.cache_policies import NONE, CachePolicy

from bpe.count import counting_code_version
from bpe.dask_count import bucket_files, count_shard_to_files
from bpe.dask_engine import client_for
from bpe.errors import BpeError
from bpe.pretokenize import Pretokenizer
from bpe.shards import Shard, discover


def no_retry_for_bad_input(task, task_run, state) -> bool:
    """Retry transient failures (I/O, lost workers), never bad data: it fails the same way again."""
    try:
        state.result()
    except BpeError:
        return False
    except Exception:
        return True
    return False


@task(
    name="discover-shards",
    cache_policy=NONE,
    retries=2,
    retry_delay_seconds=2,
    retry_condition_fn=no_retry_for_bad_input,
)
def discover_shards(data: list[str]) -> list[dict]:
    """Every input file with its size and content hash (SHA-256)."""
    shards = discover(data)
    found = [{**shard.fingerprint(), "kind": shard.kind} for shard in shards]
    get_run_logger().info(f"found {len(found)} shard(s), {sum(s['size'] for s in found):,} bytes")
    return found


def shard_count_key(shard: dict, counting: dict) -> str:
    """What a shard's counts depend on: its content, the pre-tokenization settings, the code."""
    text = json.dumps([shard["sha256"], shard["size"], counting, counting_code_version()], sort_keys=True)
    return "count-" + hashlib.sha256(text.encode()).hexdigest()[:32]


class ShardCountCache(CachePolicy):
    """Cache a shard's count by content fingerprint + counting settings + code version, so an
    unchanged shard is never counted twice: across runs, processes, or a fresh Prefect database."""

    def compute_key(self, task_ctx, inputs, flow_parameters, **kwargs) -> str:
        return shard_count_key(inputs["shard"], inputs["counting"])


@task(
    name="count-shard",
    task_run_name="count {shard[path]}",
    cache_policy=ShardCountCache(),
    persist_result=True,
    retries=2,
    retry_delay_seconds=2,
    retry_condition_fn=no_retry_for_bad_input,
)
def count_shard(shard: dict, counting: dict, cache_dir: str, scheduler: str) -> dict:
    """Count one shard's words on the Dask cluster; a worker writes them (and the shard's held-out
    rows) to Parquet in the cache directory. Returns the files and what was counted."""
    started = time.perf_counter()
    key = shard_count_key(shard, counting)
    counts_path = os.path.join(cache_dir, "counts", f"{key}.parquet")
    held_out_path = os.path.join(cache_dir, "counts", f"{key}.held-out.parquet")
    pretokenizer = Pretokenizer(counting["pattern"], counting["special_tokens"])
    stats = count_shard_to_files(
        client_for(scheduler),
        Shard(shard["path"], shard["kind"], shard["size"]),
        pretokenizer,
        counting["text_column"],
        counting["holdout_fraction"],
        counts_path,
        held_out_path,
    )
    seconds = time.perf_counter() - started
    get_run_logger().info(
        f"counted {shard['path']}: {stats['documents']:,} rows ({stats['held_out_rows']:,} held out), "
        f"{stats['bytes'] / 1e6:.1f} MB in {seconds:.1f} s"
    )
    return {"shard": shard, "counts": counts_path, "held_out": held_out_path, "stats": stats, "seconds": seconds}


@task(name="combine-counts", cache_policy=NONE, retries=1, retry_condition_fn=no_retry_for_bad_input)
def combine_counts(counted: list[dict], n_shards: int, scratch: str, scheduler: str) -> list[str]:
    """Sum the shards' counts into `n_shards` word shards by a stable hash of each word, on the
    workers; returns the Parquet files that hold them (the persisted word table)."""
    paths = bucket_files(client_for(scheduler), [c["counts"] for c in counted], n_shards, scratch)
    get_run_logger().info(f"combined {len(counted)} shard count(s) into {n_shards} word shard(s)")
    return paths

"""Tasks for the data: find the shards, count each shard (cached by content), combine the counts."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NONE, CachePolicy
from prefect.futures import as_completed

from bpe.distributed.client import client_for
from bpe.distributed.counting import ShardCount, bucket_files, count_shard_to_files
from bpe.engine.count import counting_code_version
from bpe.errors import BpeError
from bpe.pipeline.config import TokenizerConfig
from bpe.pretokenize import Pretokenizer
from bpe.shards import discover


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


def counting_settings(cfg: TokenizerConfig) -> dict:
    """What a shard's counts depend on besides its content."""
    return {
        "pattern": cfg.settings().pretokenizer.regex,
        "special_tokens": list(cfg.special_tokens),
        "text_column": cfg.text_column,
        "holdout_fraction": cfg.holdout_fraction,
    }


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
def count_shard(shard: dict, counting: dict, cache_dir: str, scheduler: str) -> ShardCount:
    """Count one shard's words on the Dask cluster; a worker writes them (and the shard's held-out
    rows) to Parquet in the cache directory."""
    key = shard_count_key(shard, counting)
    counted = count_shard_to_files(
        client_for(scheduler),
        shard,
        Pretokenizer(counting["pattern"], counting["special_tokens"]),
        counting["text_column"],
        counting["holdout_fraction"],
        counts_path=os.path.join(cache_dir, "counts", f"{key}.parquet"),
        held_out_path=os.path.join(cache_dir, "counts", f"{key}.held-out.parquet"),
    )
    stats = counted.stats
    get_run_logger().info(
        f"counted {shard['path']}: {stats.documents:,} rows ({stats.held_out_rows:,} held out), "
        f"{stats.bytes / 1e6:.1f} MB in {counted.seconds:.1f} s"
    )
    return counted


def count_all(shards: list[dict], cfg: TokenizerConfig, scheduler: str) -> tuple[list[ShardCount], int]:
    """Count every shard (unchanged ones come from the cache); returns the counts in shard order
    and how many were cached. A count whose files were cleaned away is done again."""
    logger = get_run_logger()
    counting, cache_dir = counting_settings(cfg), cfg.counts_cache
    counter = count_shard.with_options(result_storage=Path(cache_dir).absolute() / "results")
    futures = [counter.submit(shard, counting, cache_dir, scheduler) for shard in shards]
    for done, future in enumerate(as_completed(futures), start=1):
        future.result()  # raises at once, naming the shard, if a count failed
        logger.info(f"count: {done} of {len(futures)} shard(s) ({100 * done // len(futures)}%)")
    results, cached = [], 0
    for shard, future in zip(shards, futures):
        result = future.result()
        if not (os.path.exists(result.counts) and os.path.exists(result.held_out)):
            logger.warning(f"cached counts of {shard['path']} are gone; counting it again")
            result = counter.with_options(refresh_cache=True)(shard, counting, cache_dir, scheduler)
        else:
            cached += future.state.name == "Cached"
        results.append(result)
    logger.info(f"counted {len(shards) - cached} shard(s), {cached} unchanged shard(s) from the cache")
    return results, cached


@task(name="combine-counts", cache_policy=NONE, retries=1, retry_condition_fn=no_retry_for_bad_input)
def combine_counts(counted: list[ShardCount], n_shards: int, scratch: str, scheduler: str) -> list[str]:
    """Sum the shards' counts into `n_shards` word shards by a stable hash of each word, on the
    workers; returns the Parquet files that hold them (the persisted word table)."""
    paths = bucket_files(client_for(scheduler), [c.counts for c in counted], n_shards, scratch)
    get_run_logger().info(f"combined {len(counted)} shard count(s) into {n_shards} word shard(s)")
    return paths

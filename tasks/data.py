"""Tasks for the data: find the shards, count each shard (cached by content), combine the counts."""

from __future__ import annotations

from collections.abc import Callable

from prefect import get_run_logger, task
from prefect.cache_policies import NONE
from prefect.futures import as_completed

from bpe.distributed.client import client_for
from bpe.distributed.count_tasks import ShardCount, bucket_files, count_shard_to_files, counts_file_to_files
from bpe.errors import BpeError
from bpe.inputs.discover import discover
from bpe.pipeline.config import TokenizerConfig
from bpe.pipeline.count_cache import CountCache, counting_settings, shard_count_key
from bpe.pipeline.store import lasting
from bpe.pretokenize import Pretokenizer
from bpe.training.counts_files import find_counts
from bpe.training.settings import Settings


def retry_if_transient(task, task_run, state) -> bool:
    """Retry transient failures (a dropped connection, a lost worker), never those that fail the
    same way again: bad data, or a lasting fault of the filesystem (a full disk, a read-only or
    forbidden path: `bpe.pipeline.store.lasting`). The cause counts wherever it is: raised as
    itself (Dask re-raises a worker's exception as its own class), or wrapped, as the cause or
    context of another error or in an exception group."""
    try:
        state.result()
    except Exception as exc:
        return not _holds(exc, lambda error: isinstance(error, BpeError) or lasting(error))
    return False


def _holds(exc: BaseException, found: Callable[[BaseException], bool]) -> bool:
    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        error = stack.pop()
        if error is None or id(error) in seen:
            continue
        seen.add(id(error))
        if found(error):
            return True
        stack.extend([error.__cause__, error.__context__, *getattr(error, "exceptions", ())])
    return False


@task(
    name="discover-shards",
    cache_policy=NONE,
    retries=2,
    retry_delay_seconds=2,
    retry_condition_fn=retry_if_transient,
)
def discover_shards(data: list[str]) -> list[dict]:
    """Every input file with its size and content hash (SHA-256)."""
    shards = discover(data)
    found = [{**shard.fingerprint(), "kind": shard.kind} for shard in shards]
    get_run_logger().info(f"found {len(found)} shard(s), {sum(s['size'] for s in found):,} bytes")
    return found


WORD_COUNTS = "word counts"  # a shard's kind when it is a file of word counts (`counts:`), not text


@task(
    name="discover-counts",
    cache_policy=NONE,
    retries=2,
    retry_delay_seconds=2,
    retry_condition_fn=retry_if_transient,
)
def discover_counts(counts: list[str], settings: Settings) -> list[dict]:
    """Every Parquet file of word counts `counts` names (`counts:`), with its size and content hash,
    once their record, if we wrote them, shows them split as `settings` split text."""
    source = find_counts(counts)
    source.refuse_other_split(settings, lambda s: f"set {s.pattern} to {source.pattern}")
    found = [{**shard.fingerprint(), "kind": WORD_COUNTS} for shard in source.shards]
    get_run_logger().info(f"found {len(found)} file(s) of word counts, {sum(s['size'] for s in found):,} bytes")
    return found


@task(
    name="count-shard",
    task_run_name="count {shard[path]}",
    cache_policy=NONE,  # the count cache is ours, kept as data (bpe.pipeline.count_cache), never pickles
    retries=2,
    retry_delay_seconds=2,
    retry_condition_fn=retry_if_transient,
)
def count_shard(shard: dict, counting: dict, cache_dir: str, scheduler: str) -> ShardCount:
    """One shard's counts: from the cache when the shard and the counting settings are unchanged,
    otherwise counted on the Dask cluster, where a worker writes them (and the shard's held-out
    rows) to Parquet in the cache. A damaged cache entry is warned about and counted again."""
    cache = CountCache(cache_dir)
    if shard["kind"] == WORD_COUNTS:  # already counted: its content alone decides its words
        counting = {"word_counts": True}
    key = shard_count_key(shard, counting)
    found = cache.lookup(key, shard, warn=get_run_logger().warning)
    if found is not None:
        get_run_logger().info(f"{shard['path']}: unchanged, counts from the cache")
        return found
    counts_path, held_out_path = cache.paths(key)
    if shard["kind"] == WORD_COUNTS:
        counted = counts_file_to_files(client_for(scheduler), shard, counts_path, held_out_path)
        cache.record(key, counted)
        stats = counted.stats
        get_run_logger().info(f"read {shard['path']}: {stats.pretokens:,} pre-tokens in {counted.seconds:.1f} s")
        return counted
    counted = count_shard_to_files(
        client_for(scheduler),
        shard,
        Pretokenizer(counting["pattern"], counting["special_tokens"]),
        counting["text_column"],
        counting["holdout_fraction"],
        counts_path=counts_path,
        held_out_path=held_out_path,
    )
    cache.record(key, counted)
    stats = counted.stats
    get_run_logger().info(
        f"counted {shard['path']}: {stats.documents:,} rows ({stats.held_out_rows:,} held out), "
        f"{stats.bytes / 1e6:.1f} MB in {counted.seconds:.1f} s"
    )
    return counted


def count_all(
    shards: list[dict], cfg: TokenizerConfig, settings: Settings, scheduler: str
) -> tuple[list[ShardCount], int]:
    """Count every shard as `settings` split text (unchanged ones come from the cache); returns
    the counts in shard order and how many were cached. A count whose files were cleaned away is
    done again."""
    logger = get_run_logger()
    counting, cache_dir = counting_settings(cfg, settings), cfg.counts_cache
    futures = [count_shard.submit(shard, counting, cache_dir, scheduler) for shard in shards]
    for done, future in enumerate(as_completed(futures), start=1):
        future.result()  # raises at once, naming the shard, if a count failed
        logger.info(f"count: {done} of {len(futures)} shard(s) ({100 * done // len(futures)}%)")
    results = [future.result() for future in futures]
    cached = sum(result.cached for result in results)
    logger.info(f"counted {len(shards) - cached} shard(s), {cached} unchanged shard(s) from the cache")
    return results, cached


@task(name="combine-counts", cache_policy=NONE, retries=1, retry_condition_fn=retry_if_transient)
def combine_counts(
    counted: list[ShardCount], n_buckets: int, scratch: str, scheduler: str, multipliers: list[int] | None = None
) -> list[str]:
    """Sum the shards' counts into `n_buckets` word buckets by a stable hash of each word, on the
    workers, each shard's counts multiplied by its own of `multipliers` first (a mixture's weight
    of its language); returns the Parquet files that hold them (the persisted word table)."""
    expected = [c.expected("counts") for c in counted]  # each file read only if it holds the bytes checked
    counts = [c.counts for c in counted]
    paths = bucket_files(client_for(scheduler), counts, n_buckets, scratch, expected, multipliers)
    get_run_logger().info(f"combined {len(counted)} shard count(s) into {n_buckets} word bucket(s)")
    return paths

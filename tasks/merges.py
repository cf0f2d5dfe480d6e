"""Task: learn the merges on the Dask cluster with the distributed, diff-based merge loop."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NONE

from bpe.distributed.client import client_for
from bpe.distributed.driver import ShardedMerge, merge_on_workers
from bpe.engine.replay import BaseMerges
from bpe.progress import LogProgress
from bpe.settings import Settings


@task(name="train-merges", cache_policy=NONE)
def train_merges(
    word_shards: list[str], settings: Settings, scratch: str, scheduler: str, base: BaseMerges | None = None
) -> ShardedMerge:
    """Run the merge loop over the word shards (one holder per shard on the workers), after
    replaying `base`'s merges on them."""
    logger = get_run_logger()
    sharded = merge_on_workers(
        client_for(scheduler),
        word_shards,
        settings,
        scratch,
        progress=LogProgress(logger.info, every=5.0),
        log=logger.info,
        base=base,
    )
    merged = sharded.merges
    if sharded.compile_seconds >= 0.5:
        logger.info(f"compiled the pair queue's kernels in {sharded.compile_seconds:.1f} s (not in the loop's time)")
    logger.info(
        f"{len(merged.merges):,} merges in {merged.rounds:,} rounds, {merged.seconds:.1f} s (loop "
        f"{sharded.loop_seconds:.1f} s, {len(merged.merges) / max(sharded.loop_seconds, 1e-9):,.0f} merges/s); "
        f"stopped: {merged.stop_reason}"
    )
    return sharded

"""Task: learn the merges on the Dask cluster with the distributed, diff-based merge loop."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NONE

from bpe.dask_engine import client_for, merge_on_workers
from bpe.progress import LogProgress
from bpe.train import Settings


@task(name="train-merges", cache_policy=NONE)
def train_merges(word_shards: list[str], settings: dict, scratch: str, scheduler: str) -> dict:
    """Run the merge loop over the word shards (one holder per shard on the workers)."""
    logger = get_run_logger()
    merged, record, build_seconds = merge_on_workers(
        client_for(scheduler),
        word_shards,
        Settings(**settings),
        scratch,
        progress=LogProgress(logger.info, every=5.0),
        log=logger.info,
    )
    logger.info(
        f"{len(merged.merges):,} merges in {merged.rounds:,} rounds, {merged.seconds:.1f} s "
        f"({len(merged.merges) / max(merged.seconds, 1e-9):,.0f} merges/s); stopped: {merged.stop_reason}"
    )
    return {
        "merges": merged.merges.tolist(),
        "counts": merged.counts.tolist(),
        "rounds": merged.rounds,
        "stop_reason": merged.stop_reason,
        "tokens_after": merged.tokens_after,
        "seconds": merged.seconds,
        "build_seconds": build_seconds,
        "record": record,
    }

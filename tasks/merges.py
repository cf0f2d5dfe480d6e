"""Task: learn the merges on the Dask cluster with the distributed, diff-based merge loop."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NONE

from bpe.distributed.client import client_for
from bpe.distributed.count_tasks import ShardCount
from bpe.distributed.driver import DistributedMerge, merge_on_workers
from bpe.engine.replay import BaseMerges
from bpe.pipeline.multilingual import parity_merges
from bpe.progress import LogProgress
from bpe.training.plan import LanguagePlan
from bpe.training.settings import Settings


@task(name="train-merges", cache_policy=NONE)
def train_merges(
    word_buckets: list[str], settings: Settings, scratch: str, scheduler: str, base: BaseMerges | None = None
) -> DistributedMerge:
    """Run the merge loop over the word buckets (one holder per bucket on the workers), after
    replaying `base`'s merges on them."""
    logger = get_run_logger()
    on_workers = merge_on_workers(
        client_for(scheduler),
        word_buckets,
        settings,
        scratch,
        progress=LogProgress(logger.info, every=5.0),
        log=logger.info,
        base=base,
    )
    merged = on_workers.merges
    if on_workers.compile_seconds >= 0.5:
        logger.info(f"compiled the pair queue's kernels in {on_workers.compile_seconds:.1f} s (not in the loop's time)")
    logger.info(
        f"{len(merged.merges):,} merges in {merged.rounds:,} rounds, {merged.seconds:.1f} s (loop "
        f"{on_workers.loop_seconds:.1f} s, {len(merged.merges) / max(on_workers.loop_seconds, 1e-9):,.0f} merges/s); "
        f"stopped: {merged.stop_reason}"
    )
    return on_workers


@task(name="train-parity-merges", cache_policy=NONE)
def train_parity_merges(
    plan: LanguagePlan,
    counted: list[ShardCount],
    multipliers: tuple[int, ...],
    settings: Settings,
    base: BaseMerges | None = None,
) -> DistributedMerge:
    """Learn parity-aware merges in this process over each language's counts (read from the count
    cache), one merge at a time against the dev set."""
    logger = get_run_logger()
    learnt = parity_merges(plan, counted, multipliers, settings, base, LogProgress(logger.info, every=5.0))
    merged = learnt.merges
    logger.info(
        f"{len(merged.merges):,} parity-aware merges over {len(plan.codes)} languages in {learnt.loop_seconds:.1f} s; "
        f"stopped: {merged.stop_reason}"
    )
    return learnt

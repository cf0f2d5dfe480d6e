"""The `train-bpe` flow: shards -> counts (cached per shard) -> merges on Dask -> a new version.

Parameters are the training settings; each left out comes from the configuration file (and its
BPE_* environment overrides). A run whose data and settings equal the latest version's does not
train: it logs "no new data since vNNNN" and completes.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path

from prefect import flow, get_run_logger
from prefect.context import get_run_context
from prefect.futures import as_completed

from bpe.config import TokenizerConfig, load_config
from bpe.count import CountStats
from bpe.dask_engine import dask_client, ready_workers, share_client
from bpe.merge import MergeResult
from bpe.report import one_line
from bpe.store import VersionStore
from bpe.train import Settings, build_manifest, data_fingerprint
from tasks.artifacts import evaluate_version, export_version, publish_version
from tasks.data import combine_counts, count_shard, discover_shards
from tasks.merges import train_merges


@flow(name="train-bpe")
def train_bpe(
    config: str = "conf/demo.yaml",
    name: str | None = None,
    data: list[str] | None = None,
    vocab_size: int | None = None,
    pattern: str | None = None,
    special_tokens: list[str] | None = None,
    text_column: str | None = None,
    min_frequency: int | None = None,
    tie_break: str | None = None,
    holdout_fraction: float | None = None,
    artifact_root: str | None = None,
    dask_scheduler: str | None = None,
    dask_workers: int | None = None,
) -> dict:
    """Train the tokenizer that `config` describes and publish it as the next version."""
    overrides = {k: v for k, v in locals().items() if k != "config"}
    cfg = load_config(config, overrides)
    logger = get_run_logger()
    started = time.perf_counter()
    shards = discover_shards(cfg.data)
    fingerprint = data_fingerprint(shards)
    store = VersionStore(cfg.artifact_root, cfg.name)
    unchanged = unchanged_since(store, fingerprint, cfg)
    if unchanged:
        logger.info(f"no new data since {unchanged}: {len(shards)} shard(s), fingerprint {fingerprint[:16]}")
        return {"name": cfg.name, "version": unchanged, "trained": False, "location": store.path(unchanged)}

    settings = Settings(cfg.vocab_size, cfg.pattern, tuple(cfg.special_tokens), cfg.min_frequency, cfg.tie_break,
                        cfg.text_column)  # fmt: skip
    pretokenizer = settings.check()
    counting = {
        "pattern": pretokenizer.regex,
        "special_tokens": list(cfg.special_tokens),
        "text_column": cfg.text_column,
        "holdout_fraction": cfg.holdout_fraction,
    }
    scratch = os.path.join(cfg.counts_cache, "runs", uuid.uuid4().hex[:12])
    timings = {}
    try:
        t0 = time.perf_counter()
        with dask_client(cfg.dask_scheduler, cfg.dask_workers, log=logger.info) as (client, cluster):
            address = share_client(client)
            n_workers = ready_workers(client)
            timings["cluster"] = time.perf_counter() - t0
            t1 = time.perf_counter()
            counted, cached = count_all(shards, counting, cfg.counts_cache, address)
            timings["count"] = time.perf_counter() - t1
            t2 = time.perf_counter()
            word_shards = combine_counts(counted, n_workers, scratch, address)
            timings["combine"] = time.perf_counter() - t2
            merged = train_merges(word_shards, settings.__dict__, scratch, address)
            timings["build"], timings["merge"] = merged["build_seconds"], merged["seconds"]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    staged, described = export_version(merged["merges"], cfg.pattern, cfg.special_tokens, cfg.artifact_root, cfg.name)
    try:
        evaluation = evaluate_version(staged, merged["merges"], cfg.pattern, cfg.special_tokens, counted,
                                      cfg.artifact_root, cfg.name, cfg.eval_sizes)  # fmt: skip
        stats = CountStats()
        for result in counted:
            stats.add(CountStats(**result["stats"]))
        result = MergeResult(merged["merges"], merged["counts"], merged["rounds"], merged["stop_reason"],
                             merged["seconds"], merged["tokens_after"])  # fmt: skip
        record = dict(merged["record"])
        manifest = build_manifest(settings, pretokenizer, stats, record.pop("unique_words"), result,
                                  [c["shard"] for c in counted], timings,
                                  {"scheduler": cluster["scheduler"], "cluster_started_here": cluster["started_here"],
                                   **record})  # fmt: skip
        manifest["seconds"]["total"] = round(time.perf_counter() - started, 3)
        manifest["name"], manifest["version"] = cfg.name, staged.version
        manifest["config"] = cfg.as_dict()
        manifest["data"]["counted_shards"] = len(counted) - cached
        manifest["data"]["cached_shards"] = cached
        manifest["settings"]["holdout_fraction"] = cfg.holdout_fraction
        manifest["evaluation"] = evaluation
        manifest["prefect"] = run_ids()
        manifest["tokenizer"] = described
        location = publish_version(staged, manifest, cfg.artifact_root, cfg.name)
    except BaseException:
        store.abort(staged)  # no partial version, and `latest` stays where it was
        raise
    logger.info(one_line(manifest, location))
    return {
        "name": cfg.name,
        "version": staged.version,
        "trained": True,
        "location": location,
        "bytes_per_token": evaluation["bytes_per_token"],
        "counted_shards": len(counted) - cached,
        "cached_shards": cached,
    }


def count_all(shards: list[dict], counting: dict, cache_dir: str, scheduler: str) -> tuple[list[dict], int]:
    """Count every shard (unchanged ones come from the cache); returns the results in shard order
    and how many were cached. A count whose files were cleaned away is done again."""
    logger = get_run_logger()
    counter = count_shard.with_options(result_storage=Path(cache_dir).absolute() / "results")
    futures = [counter.submit(shard, counting, cache_dir, scheduler) for shard in shards]
    for done, future in enumerate(as_completed(futures), start=1):
        future.result()  # raises at once, naming the shard, if a count failed
        logger.info(f"count: {done} of {len(futures)} shard(s) ({100 * done // len(futures)}%)")
    results, cached = [], 0
    for shard, future in zip(shards, futures):
        result = future.result()
        if not (os.path.exists(result["counts"]) and os.path.exists(result["held_out"])):
            logger.warning(f"cached counts of {shard['path']} are gone; counting it again")
            result = counter.with_options(refresh_cache=True)(shard, counting, cache_dir, scheduler)
        else:
            cached += future.state.name == "Cached"
        results.append(result)
    logger.info(f"counted {len(shards) - cached} shard(s), {cached} unchanged shard(s) from the cache")
    return results, cached


def unchanged_since(store: VersionStore, fingerprint: str, cfg: TokenizerConfig) -> str | None:
    """The latest version, if it was trained on exactly this data with these settings."""
    latest = store.latest()
    if not latest:
        return None
    manifest = store.manifest(latest)
    same_data = manifest.get("data", {}).get("fingerprint") == fingerprint
    same_settings = (manifest.get("config") or {}).get("vocab_size") is not None and all(
        manifest["config"].get(k) == v for k, v in cfg.training_settings().items()
    )
    return latest if same_data and same_settings else None


def run_ids() -> dict:
    try:
        run = get_run_context().flow_run
        return {"flow_run_id": str(run.id), "flow_run_name": run.name, "deployment_id": str(run.deployment_id or "")}
    except Exception:
        return {}


if __name__ == "__main__":
    import sys

    print(train_bpe(*sys.argv[1:2]))

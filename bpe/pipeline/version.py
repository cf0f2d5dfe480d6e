"""The manifest of a published version: the tokenizer's own manifest (`bpe.train.build_manifest`)
plus what the pipeline knows: the configuration, which shards were counted or came from the
cache, the held-out evaluation, the tokenizer's description and the Prefect run."""

from __future__ import annotations

from bpe.distributed.counting import ShardCount
from bpe.engine.count import CountStats
from bpe.pipeline.config import TokenizerConfig
from bpe.pipeline.store import VersionStore
from bpe.results import TrainingRun
from bpe.train import build_manifest


def summed_stats(counted: list[ShardCount]) -> CountStats:
    """What all shards' counts saw together."""
    total = CountStats()
    for shard in counted:
        total.add(shard.stats)
    return total


def version_manifest(
    cfg: TokenizerConfig,
    version: str,
    run: TrainingRun,
    counted: list[ShardCount],
    cached: int,
    evaluation: dict,
    tokenizer: dict,
    prefect: dict,
    total_seconds: float,
) -> dict:
    """Everything `bpe versions`, the reports and the next run need to know about a version."""
    manifest = build_manifest(cfg.settings(), run)
    manifest["seconds"]["total"] = round(total_seconds, 3)
    manifest["settings"]["holdout_fraction"] = cfg.holdout_fraction
    manifest["data"].update(counted_shards=len(counted) - cached, cached_shards=cached)
    return {
        "name": cfg.name,
        "version": version,
        **manifest,
        "config": cfg.as_dict(),
        "evaluation": evaluation,
        "prefect": prefect,
        "tokenizer": tokenizer,
    }


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

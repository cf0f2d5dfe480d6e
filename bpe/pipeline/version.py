"""The manifest of a published version: the tokenizer's own manifest (`bpe.train.build_manifest`)
plus what the pipeline knows: the configuration, which shards were counted or came from the
cache, the held-out evaluation, the tokenizer's description and the Prefect run."""

from __future__ import annotations

from bpe.distributed.counting import ShardCount
from bpe.engine.count import CountStats
from bpe.pipeline.config import TRAINING_KEYS, TokenizerConfig
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


def identical_version(store: VersionStore, manifest: dict) -> str | None:
    """A published version trained on the same data with the same settings as `manifest`, if any:
    publishing `manifest` too would only add a copy (two runs that overlapped, say)."""
    fingerprint = manifest.get("data", {}).get("fingerprint")
    settings = {k: (manifest.get("config") or {}).get(k) for k in TRAINING_KEYS}
    for version in reversed(store.versions()):
        try:
            other = store.manifest(version)
        except (FileNotFoundError, ValueError):
            continue
        same_settings = {k: (other.get("config") or {}).get(k) for k in TRAINING_KEYS} == settings
        if other.get("data", {}).get("fingerprint") == fingerprint and same_settings:
            return version
    return None


def reason_to_train(store: VersionStore, shards: list[dict], cfg: TokenizerConfig) -> str:
    """Why a run trains, against the latest version: the shards added, changed or removed, and
    the settings that differ, e.g. "1 new shard (part-00003.parquet); vocab_size 600 -> 700"."""
    latest = store.latest()
    if not latest:
        return "no version yet"
    manifest = store.manifest(latest)
    before = {s.get("path"): s.get("sha256") for s in manifest.get("data", {}).get("shards") or []}
    now = {s["path"]: s["sha256"] for s in shards}
    reasons = []
    for what, paths in (
        ("new", [p for p in now if p not in before]),
        ("changed", [p for p in now if p in before and before[p] != now[p]]),
        ("removed", [p for p in before if p not in now]),
    ):
        if paths:
            names = ", ".join(p.rsplit("/", 1)[-1] for p in sorted(paths)[:3]) + (" ..." if len(paths) > 3 else "")
            reasons.append(f"{len(paths)} {what} shard(s) ({names})")
    old = manifest.get("config") or {}
    for key, value in cfg.training_settings().items():
        if old.get(key) != value:
            reasons.append(f"{key} {old.get(key)!r} -> {value!r}")
    return "; ".join(reasons) or f"the data or settings differ from {latest}'s"

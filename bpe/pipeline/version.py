"""The manifest of a published version: the tokenizer's own manifest (`bpe.training.trainer.build_manifest`)
plus what the pipeline knows: the configuration, which shards were counted or came from the
cache, the held-out evaluation, the tokenizer's description and the Prefect run."""

from __future__ import annotations

from bpe.distributed.count_tasks import ShardCount
from bpe.errors import InputError
from bpe.manifest import Manifest, TokenizerSection
from bpe.pipeline.config import TRAINING_KEYS, TokenizerConfig
from bpe.pipeline.store import MAIN, VersionStore
from bpe.training.counting import CountStats
from bpe.training.extend import Base
from bpe.training.plan import LanguagePlan
from bpe.training.results import TrainingRun, why_stopped
from bpe.training.settings import Settings
from bpe.training.trainer import build_manifest


def summed_stats(counted: list[ShardCount]) -> CountStats:
    """What all shards' counts saw together."""
    return CountStats.summed(shard.stats for shard in counted)


def version_manifest(
    cfg: TokenizerConfig,
    version: str,
    run: TrainingRun,
    counted: list[ShardCount],
    cached: int,
    evaluation: dict,
    tokenizer: dict,
    prefect: dict,
    started: float,
    base: Base | None = None,
    languages: LanguagePlan | None = None,
) -> Manifest:
    """Everything `bpe versions`, the reports and the next run need to know about a version (with
    the `base` it was trained from: where it came from and its digest). `started`: when the flow
    run began (`time.perf_counter()`), its total time is from then. `languages`: a multilingual
    run's plan, its stats filled (the manifest's `languages` section)."""
    manifest = build_manifest(cfg.settings(base), run, started, base, languages)
    manifest.name = cfg.name
    manifest.version = version
    manifest.settings.holdout_fraction = cfg.holdout_fraction
    manifest.data.counted_shards = len(counted) - cached
    manifest.data.cached_shards = cached
    manifest.config = cfg.as_dict()
    manifest.evaluation = evaluation
    manifest.prefect = prefect
    manifest.tokenizer = TokenizerSection.from_json(tokenizer)
    return manifest


def unchanged_since(
    store: VersionStore, fingerprint: str, cfg: TokenizerConfig, base: Base | None = None
) -> str | None:
    """The newest version, of either channel, trained on exactly this data with these settings
    (and the same `base` tokenizer, by its digest: `base:` names a path whose content may change):
    a run that would train it again completes with "no new data since vNNNN" instead (a main-line
    run against the main line, an experiment against the same experiment). It compares with every
    version, not only `latest`, so that after a rollback the main line does not retrain (and take
    `latest` back) until its data or settings change."""
    settings = cfg.training_settings()
    digest = base.digest if base is not None else None
    for version in reversed(store.versions()):
        try:
            manifest = store.manifest(version)
        except (FileNotFoundError, ValueError):
            continue
        config = manifest.config or {}
        same_data = data_fingerprint_of(manifest) == fingerprint and base_digest_of(manifest) == digest
        if same_data and config.get("vocab_size") is not None and all(config.get(k) == v for k, v in settings.items()):
            return version
    return None


def overridden_settings(configured: TokenizerConfig, run: TokenizerConfig) -> dict[str, tuple]:
    """The training settings a run's parameters change from its configuration's, as
    {key: (configured, run)}: none, and the run is on the main line; any, and it is an experiment."""
    before, after = configured.training_settings(), run.training_settings()
    return {key: (before[key], after[key]) for key in before if before[key] != after[key]}


def channel_note(overridden: dict[str, tuple], promote: bool, latest: str | None) -> str:
    """What a run that trains will do with `latest`, for its log line."""
    if not overridden:
        return "main line: latest moves to the new version"
    what = f"experiment (parameters override {', '.join(overridden)})"
    if promote:
        return f"{what}, promote=True: latest moves to the new version"
    return f"{what}: latest stays {latest or 'unset'} unless promote=True"


def settle_latest(store: VersionStore, version: str, promote: bool, by: str) -> tuple[str | None, str]:
    """After a run that published nothing new (`version` already holds its data and settings):
    promote `version` if asked (`promote=True`). Returns `latest` and what to log about it."""
    latest = store.latest()
    if promote and latest != version:
        latest = store.promote(version, by=f"{by} (promote=True)")[1]
        return latest, f"promoted {version} (promote=True): latest is {latest}"
    return latest, f"latest is {latest}" + ("" if latest == version else " (`bpe promote` to change it)")


def newest_main_line(store: VersionStore) -> tuple[str, Manifest] | None:
    """The newest main-line version and its manifest: what the main line last trained on."""
    for version in reversed(store.versions()):
        try:
            manifest = store.manifest(version)
        except (FileNotFoundError, ValueError):
            continue
        if (manifest.channel or MAIN) == MAIN:
            return version, manifest
    return None


def identical_version(store: VersionStore, manifest: Manifest) -> str | None:
    """A published version trained on the same data with the same settings as `manifest`, if any:
    publishing `manifest` too would only add a copy (two runs that overlapped, say)."""
    fingerprint = data_fingerprint_of(manifest)
    settings = {k: (manifest.config or {}).get(k) for k in TRAINING_KEYS}
    for version in reversed(store.versions()):
        try:
            other = store.manifest(version)
        except (FileNotFoundError, ValueError):
            continue
        same_settings = {k: (other.config or {}).get(k) for k in TRAINING_KEYS} == settings
        same_base = base_digest_of(other) == base_digest_of(manifest)
        if data_fingerprint_of(other) == fingerprint and same_settings and same_base:
            return version
    return None


def data_fingerprint_of(manifest: Manifest) -> str | None:
    """The hash of all the data a version was trained on, as its manifest records it (None if it does not)."""
    return manifest.data.fingerprint if manifest.data is not None else None


def base_digest_of(manifest: Manifest) -> str | None:
    """The digest of the base tokenizer a version extended (None: trained from bytes)."""
    return manifest.base.sha256 if manifest.base is not None else None


def reason_to_train(store: VersionStore, shards: list[dict], cfg: TokenizerConfig, base: Base | None = None) -> str:
    """Why a run trains, against the newest main-line version (what the main line last trained
    on, whether or not a rollback or promote moved `latest` elsewhere since): the shards added,
    changed or removed, the settings that differ and a base tokenizer whose content changed, e.g.
    "1 new shard(s) (part-00003.parquet); vocab_size 600 -> 700 since v0002"."""
    newest = newest_main_line(store)
    if newest is None:
        return "no main-line version yet" if store.versions() else "no version yet"
    version, manifest = newest
    trained_on = (manifest.data.shards if manifest.data is not None else None) or []
    before = {s.get("path"): s.get("sha256") for s in trained_on}
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
    old = manifest.config or {}
    for key, value in cfg.training_settings().items():
        if old.get(key) != value:
            reasons.append(f"{key} {old.get(key)!r} -> {value!r}")
    before_base, now_base = base_digest_of(manifest), base.digest if base is not None else None
    if before_base != now_base and base is not None and old.get("base") == cfg.base:
        reasons.append(f"base {base.source} changed (sha256 {(before_base or 'none')[:12]} -> {now_base[:12]})")
    return ("; ".join(reasons) or f"the data or settings differ from {version}'s") + f" since {version}"


def check_merges_learned(name: str, settings: Settings, run: TrainingRun, latest: str | None) -> None:
    """A run that asked for merges and counted words but learned none would publish a tokenizer of
    bare bytes (or its base unchanged) as the next version: it fails instead (InputError, one line),
    before anything is staged, and `latest` stays where it is."""
    if settings.n_merges() <= 0 or len(run.merges.merges) or not run.unique_words:
        return
    reason = run.merges.stop_reason
    raise InputError(
        f"{name}: training learned no merges from {run.unique_words:,} distinct words "
        f"({why_stopped(reason, settings)}); nothing is published and latest stays {latest or 'unset'}"
    )

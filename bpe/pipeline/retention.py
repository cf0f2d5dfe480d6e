"""Retention: which versions and count cache entries go, and removing them (dry run by default).

Versions (`bpe prune ROOT/NAME --keep N`, or `retention: {keep_versions: N}` after each publish):
the N newest versions stay, and so do, whatever their age, `latest`, the version `bpe rollback`
would move `latest` to, and the newest main-line version (what the next scheduled run compares
its data with: without it, a rolled-back main line would retrain and take `latest` back).

Count cache (`bpe prune-cache CACHE --older-than DAYS`, or `retention: {cache_days: DAYS}`): an
entry (`counts/<key>.json`, `<key>.parquet`, `<key>.held-out.parquet`; see `count_cache`) goes when
no run has used it for DAYS days. A count's files are written when it is counted and never touched
again when it is read back, so each run also records the keys of its data's shards in
`<cache>/in-use/<tokenizer>-<digest>.json` (one small file per tokenizer and counting settings,
rewritten whole by every run, including "no new data" runs); an entry was last used at the latest
of its files' modification times and of the newest record that names it. Nothing in `counts/`
changes format, and files not named like a count are never touched.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from bpe import storage
from bpe.errors import InputError, SettingsError
from bpe.pipeline.count_cache import counting_settings, shard_count_key
from bpe.pipeline.store import MAIN, Promotions, Removed, VersionStore
from bpe.training.settings import Settings

COUNT_FILE = re.compile(r"^(count-[0-9a-f]{32})(\.json|\.parquet|\.held-out\.parquet)$")
IN_USE = "in-use"
DAY = 86400.0


# -- versions ------------------------------------------------------------------------------------


def protected_versions(promotions: Promotions, channels: dict[str, str]) -> dict[str, str]:
    """The versions a prune never removes, with why: `latest`, the rollback target, the newest
    main-line version (a version whose channel is unknown counts as main: it is newer than the plan)."""
    why: dict[str, str] = {}
    if promotions.latest:
        why[promotions.latest] = "latest"
    target = promotions.rollback_target
    if target:
        why[target] = "rollback target"
    main = [v for v in promotions.versions if channels.get(v, MAIN) == MAIN]
    if main:
        why[main[-1]] = ", ".join(filter(None, [why.get(main[-1]), "newest main-line version"]))
    return why


@dataclass
class PrunePlan:
    """What `bpe prune` keeps (version -> why) and removes, oldest first; after applying,
    `removed` holds what was removed and `spared` what the store's state protected by then.
    `left`: the removed versions some of whose files could not be deleted (what stayed, where);
    `swept`: what earlier prunes had left, retried first (each with what still stays, if any)."""

    store: str
    keep_newest: int
    keep: dict[str, str]
    remove: list[str]
    removed: list[str] = field(default_factory=list)
    spared: list[str] = field(default_factory=list)
    left: list[Removed] = field(default_factory=list)
    swept: list[Removed] = field(default_factory=list)

    def leftovers(self) -> list[str]:
        """One line per directory a prune could not delete whole (this one's, or an earlier one's)."""
        lines = [f"{r.version} was removed, but not all its files: {r.left} left in {r.location}" for r in self.left]
        lines += [f"an earlier prune of {r.version} left {r.left} in {r.location}" for r in self.swept if r.left]
        return [f"{line}; the next prune retries" for line in lines]


def plan_prune(store: VersionStore, keep: int) -> PrunePlan:
    """Which versions `prune --keep keep` removes: all but the `keep` newest and the protected ones."""
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise SettingsError(f"--keep: expected an integer >= 1 (the newest version always stays), got {keep!r}")
    promotions = store.promotions()
    channels = store.channels(promotions.versions)
    kept: dict[str, str] = {v: f"among the {keep} newest" for v in promotions.versions[-keep:]}
    for version, why in protected_versions(promotions, channels).items():
        kept[version] = f"{kept[version]}, {why}" if version in kept else why
    ordered = {v: kept[v] for v in promotions.versions if v in kept}
    remove = [v for v in promotions.versions if v not in kept]
    return PrunePlan(store.location_of_store(), keep, ordered, remove)


def prune_versions(store: VersionStore, keep: int, apply: bool = False, by: str | None = None) -> PrunePlan:
    """Plan the prune and, if `apply`, remove the versions it names, each checked again under the
    store's lock (a promote or rollback meanwhile may have made one of them protected: it stays)."""
    swept = store.sweep_pruned()
    plan = plan_prune(store, keep)
    plan.swept = swept
    if not apply:
        return plan
    channels = store.channels(plan.remove)  # a channel never changes; newer versions count as main
    for version in plan.remove:
        removed = store.unpublish(version, lambda promotions: protected_versions(promotions, channels), by=by)
        if removed is None:
            plan.spared.append(version)
            continue
        plan.removed.append(version)
        if removed.left:
            plan.left.append(removed)
    return plan


# -- the count cache -----------------------------------------------------------------------------


@dataclass
class CacheEntry:
    """One shard's counts in the cache: its files, their bytes, and when a run last used it."""

    key: str
    files: list[str]
    bytes: int
    last_used: float
    complete: bool  # its JSON is there (without it, a half-written or half-removed count)


@dataclass
class CacheSweep:
    """What `bpe prune-cache` found: every entry, those unused since `cutoff`, and what went."""

    cache: str
    older_than_days: float
    cutoff: float
    entries: list[CacheEntry]
    stale: list[CacheEntry]
    removed: list[CacheEntry] = field(default_factory=list)
    stale_records: list[str] = field(default_factory=list)


def mark_in_use(cache_dir: str, store_url: str, name: str, counting: dict, keys: list[str]) -> str:
    """Record that the tokenizer at `store_url` uses these count keys now (its data's shards with
    its counting settings): one file per tokenizer and settings, written whole. Returns its path."""
    digest = hashlib.sha256(json.dumps([store_url, counting], sort_keys=True).encode()).hexdigest()[:12]
    path = storage.join(cache_dir, IN_USE, f"{name}-{digest}.json")
    record = {"store": store_url, "name": name, "time": time.time(), "keys": sorted(set(keys))}
    storage.write_bytes(path, json.dumps(record).encode())
    return path


def _entries(url: str) -> list[tuple[str, str, int, float]]:
    """(name, path, size, modification time) of the files directly under `url`; none if it is absent."""
    fs, inner = storage.filesystem(url)
    try:
        listed = fs.ls(inner, detail=True)
    except FileNotFoundError:
        return []
    found = []
    for entry in listed:
        if entry.get("type") == "directory":
            continue
        path = entry["name"]
        found.append((path.rstrip("/").rsplit("/", 1)[-1], path, int(entry.get("size") or 0), _mtime(fs, entry)))
    return found


def _mtime(fs, entry: dict) -> float:
    """A listed file's modification time as a Unix time, whatever the filesystem calls it."""
    for key in ("mtime", "LastModified", "last_modified", "updated", "created"):
        value = entry.get(key)
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, datetime):
            return value.timestamp()
        if isinstance(value, str):
            try:
                return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                pass
    return fs.modified(entry["name"]).timestamp()


def _full(cache_dir: str, path: str) -> str:
    """A listed path as `storage` names it (a URL keeps its protocol)."""
    if storage.is_remote(cache_dir):
        return f"{cache_dir.split('://', 1)[0]}://{path.split('://', 1)[-1]}"
    return path


def in_use_records(cache_dir: str) -> list[tuple[str, float, set[str]]]:
    """(path, time, keys) of every in-use record; an unreadable one counts as unused (no keys)."""
    records = []
    for name, path, _, mtime in _entries(storage.join(cache_dir, IN_USE)):
        if not name.endswith(".json"):
            continue
        full = _full(cache_dir, path)
        try:
            record = json.loads(storage.read_bytes(full))
            records.append((full, float(record["time"]), {str(k) for k in record["keys"]}))
        except (OSError, ValueError, TypeError, KeyError):
            records.append((full, mtime, set()))
    return records


def cache_entries(cache_dir: str) -> list[CacheEntry]:
    """Every count in the cache, with when a run last used it."""
    grouped: dict[str, CacheEntry] = {}
    for name, path, size, mtime in _entries(storage.join(cache_dir, "counts")):
        match = COUNT_FILE.match(name)
        if not match:
            continue
        entry = grouped.setdefault(match.group(1), CacheEntry(match.group(1), [], 0, 0.0, False))
        entry.files.append(_full(cache_dir, path))
        entry.bytes += size
        entry.last_used = max(entry.last_used, mtime)
        entry.complete |= match.group(2) == ".json"
    for _, used, keys in in_use_records(cache_dir):
        for key in keys & grouped.keys():
            grouped[key].last_used = max(grouped[key].last_used, used)
    return sorted(grouped.values(), key=lambda e: (e.last_used, e.key))


def sweep_count_cache(
    cache_dir: str,
    older_than_days: float,
    apply: bool = False,
    now: float | None = None,
) -> CacheSweep:
    """The count cache entries no run used for `older_than_days` days, removed if `apply`: each
    entry's JSON first (from then on it is a miss, and a run counts the shard again), then its
    Parquet files; an entry whose files changed since it was listed (counted again meanwhile)
    stays. In-use records older than the cutoff go too."""
    if isinstance(older_than_days, bool) or not isinstance(older_than_days, (int, float)) or not older_than_days > 0:
        raise SettingsError(f"--older-than: expected a number of days > 0, got {older_than_days!r}")
    if not storage.exists(storage.join(cache_dir, "counts")):
        what = "exists but holds no counts/" if storage.exists(cache_dir) else "no such count cache"
        raise InputError(f"{cache_dir}: {what} (expected a configuration's cache_dir, e.g. artifacts/.cache)")
    cutoff = (time.time() if now is None else now) - older_than_days * DAY
    entries = cache_entries(cache_dir)
    sweep = CacheSweep(cache_dir, older_than_days, cutoff, entries, [e for e in entries if e.last_used < cutoff])
    sweep.stale_records = [path for path, used, _ in in_use_records(cache_dir) if used < cutoff]
    if not apply:
        return sweep
    in_use_now = in_use_records(cache_dir)  # read again: a run may have started since the listing
    for entry in sweep.stale:
        if any(entry.key in keys and used >= cutoff for _, used, keys in in_use_now):
            continue
        if _written_since(entry, cutoff):
            continue
        for path in sorted(entry.files, key=lambda p: not p.endswith(".json")):  # the JSON first
            storage.remove(path)
        sweep.removed.append(entry)
    for path in sweep.stale_records:
        storage.remove(path)
    return sweep


def _written_since(entry: CacheEntry, cutoff: float) -> bool:
    """Whether any of the entry's files was written after the cutoff (counted again since the listing)."""
    for path in entry.files:
        fs, inner = storage.filesystem(path)
        try:
            if _mtime(fs, {"name": inner, **fs.info(inner)}) >= cutoff:
                return True
        except FileNotFoundError:
            continue
    return False


# -- after a publish ----------------------------------------------------------------------------


def apply_retention(
    cfg, log: Callable[[str], None], warn: Callable[[str], None] = print, by: str | None = None
) -> dict:
    """What the flow does after publishing when the configuration has `retention:`: prune the
    versions beyond `keep_versions` and sweep the count cache of entries unused for `cache_days`,
    logging what went. Returns the removed versions and cache keys. The version is published by
    then: a clean-up that fails is a warning, never a failed run."""
    done: dict = {"versions": [], "cache_entries": []}
    retention = cfg.retention
    try:
        if retention.keep_versions:
            store = VersionStore(cfg.artifact_root, cfg.name)
            plan = prune_versions(store, retention.keep_versions, apply=True, by=by)
            done["versions"] = plan.removed
            kept = ", ".join(f"{v} ({why})" for v, why in plan.keep.items())
            if plan.removed:
                log(
                    f"retention: removed {len(plan.removed)} version(s) of {cfg.name}: {', '.join(plan.removed)}; "
                    f"kept {kept}"
                )
            else:
                log(f"retention: no version to remove (keep_versions {retention.keep_versions}); kept {kept}")
            for line in plan.leftovers():
                warn(f"retention: {line}")
        if retention.cache_days:
            sweep = sweep_count_cache(cfg.counts_cache, retention.cache_days, apply=True)
            done["cache_entries"] = [e.key for e in sweep.removed]
            freed = sum(e.bytes for e in sweep.removed)
            log(
                f"retention: removed {len(sweep.removed)} count cache entr{'y' if len(sweep.removed) == 1 else 'ies'} "
                f"unused for {retention.cache_days:g} days ({freed / 1e6:,.1f} MB); "
                f"{len(sweep.entries) - len(sweep.removed)} kept in {cfg.counts_cache}"
            )
    except Exception as exc:
        warn(f"retention: not applied ({type(exc).__name__}: {exc})")
    return done


def record_counts_in_use(
    cfg, shards: list[dict], settings: Settings | None = None, warn: Callable[[str], None] = print
) -> None:
    """Record the count cache keys of a run's shards as in use (counted as `settings` split text:
    each stage's, for a superword run), so that the cache's age-based sweep (`retention.cache_days`,
    `bpe prune-cache`) keeps them: reading a count back leaves no trace on its files. A failure is
    a warning: the record only protects the cache from a sweep."""
    try:
        settings = settings or cfg.settings()
        stages = [settings.subword_stage(), settings.superword_stage(0)] if settings.superwords else [settings]
        store = VersionStore(cfg.artifact_root, cfg.name)
        for stage in stages:
            counting = counting_settings(cfg, stage)
            keys = [shard_count_key(s, counting) for s in shards]
            mark_in_use(cfg.counts_cache, store.url, cfg.name, counting, keys)
    except Exception as exc:
        warn(f"could not record the count cache entries in use ({type(exc).__name__}: {exc})")

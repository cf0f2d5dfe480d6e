"""Evaluation: bytes per token on held-out text, at the trained size and every smaller size, on
a fixed evaluation set per tokenizer so that versions compare.

BPE merges form a prefix sequence, so the first k merges of a training are exactly what training
to 256 + k tokens would have given: one training yields the whole compression curve.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bpe import storage
from bpe.manifest import Manifest
from bpe.pipeline.store import VersionStore
from bpe.tokenizer import Tokenizer
from bpe.training.counting import holdout_mask


def default_sizes(vocab_size: int) -> list[int]:
    """512, 1024, 2048, ... below the trained size, and the trained size itself."""
    sizes = []
    size = 512
    while size < vocab_size:
        sizes.append(size)
        size *= 2
    return sizes + [vocab_size]


def truncated(tokenizer: Tokenizer, vocab_size: int) -> Tokenizer:
    """The tokenizer with only its first merges, `vocab_size` tokens in all (special tokens kept)."""
    n_merges = max(0, min(len(tokenizer.merges), vocab_size - 256 - len(tokenizer.special_tokens)))
    return Tokenizer(tokenizer.merges[:n_merges], tokenizer.pattern, list(tokenizer.special_tokens))


def bytes_per_token(tokenizer: Tokenizer, texts: Sequence[str]) -> float | None:
    """UTF-8 bytes of `texts` per token the tokenizer makes of them (special tokens read as text),
    rounded to 4 places; None for no tokens."""
    total_bytes = sum(len(t.encode("utf-8")) for t in texts)
    total_tokens = sum(len(tokenizer.encode_ordinary(t)) for t in texts)
    return round(total_bytes / total_tokens, 4) if total_tokens else None


def compression_curve(tokenizer: Tokenizer, texts: Sequence[str], sizes: Sequence[int]) -> list[dict]:
    """[{"vocab_size", "bytes_per_token"}] for each size the tokenizer reaches."""
    rows = []
    for size in sorted(set(sizes)):
        if size > tokenizer.vocab_size:
            continue
        rows.append({"vocab_size": size, "bytes_per_token": bytes_per_token(truncated(tokenizer, size), texts)})
    return rows


def at_size(curve: list[dict] | None, vocab_size: int) -> float | None:
    """A curve's bytes per token at `vocab_size`, or None where it has no point there: a version is
    compared with another only at the same size (at 4,096 tokens against 16,384 it would always
    look worse)."""
    return next((row["bytes_per_token"] for row in curve or [] if row["vocab_size"] == vocab_size), None)


def covers(manifest: Manifest, sizes: Sequence[int]) -> bool:
    """Whether a version's recorded curve has a point at each of `sizes` that it reaches."""
    measured = {row["vocab_size"] for row in manifest.evaluation["curve"]}
    return all(size in measured for size in sizes if size <= manifest.result.vocab_size)


def compared_with_previous(evaluation: dict, vocab_size: int) -> str:
    """The log's note on the previous promoted version: its figure at the same size, or why none.

    >>> compared_with_previous({"previous_version": "v0003", "previous_bytes_per_token": 3.9}, 4096)
    ' (previous v0003 at 4,096 tokens: 3.9)'
    >>> compared_with_previous({"previous_version": "v0003", "previous_bytes_per_token": None}, 65536)
    ' (previous v0003: no figure at 65,536 tokens to compare with)'
    """
    previous = evaluation.get("previous_version")
    if not previous:
        return ""
    before = evaluation.get("previous_bytes_per_token")
    if before is None:
        return f" (previous {previous}: no figure at {vocab_size:,} tokens to compare with)"
    return f" (previous {previous} at {vocab_size:,} tokens: {before})"


def plot_curve(
    path: Path,
    curve: list[dict],
    title: str,
    previous: list[dict] | None = None,
    label: str = "",
    previous_label: str = "previous version",
    trend: list[dict] | None = None,
    transition: int | None = None,
) -> Path:
    """A PNG of bytes per token against vocabulary size (log scale), with the previous version's
    curve when there is one, so a size can be picked by looking. With a `trend` of two versions or
    more (rows with "version" and "curve", oldest first, this version last), a second panel shows
    bytes per token across versions at each of this version's sizes: on one evaluation set the
    lines are comparable, and a regression shows as a line going down. A superword tokenizer's
    `transition` is marked where its superwords start."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with_trend = bool(trend) and len(trend) >= 2
    fig, axes = plt.subplots(
        1, 2 if with_trend else 1, figsize=(11.5 if with_trend else 7, 4.2), dpi=100, squeeze=False
    )
    ax = axes[0][0]
    if previous:
        ax.plot(
            [r["vocab_size"] for r in previous],
            [r["bytes_per_token"] for r in previous],
            "o--",
            color="#999999",
            label=previous_label,
        )
    ax.plot(
        [r["vocab_size"] for r in curve],
        [r["bytes_per_token"] for r in curve],
        "o-",
        color="#1f77b4",
        label=label or "this version",
    )
    for r in curve:
        ax.annotate(
            f"{r['bytes_per_token']:.2f}",
            (r["vocab_size"], r["bytes_per_token"]),
            textcoords="offset points",
            xytext=(0, 6),
            ha="center",
            fontsize=7,
        )
    if transition is not None:
        ax.axvline(transition, color="#d62728", linestyle=":", linewidth=1, label=f"superwords from {transition:,}")
    ax.set_xscale("log", base=2)
    ticks = sorted({r["vocab_size"] for r in curve + (previous or [])})
    ax.set_xticks(ticks, [f"{t:,}" for t in ticks], fontsize=7)
    ax.minorticks_off()
    ax.set_xlabel("vocabulary size (tokens)")
    ax.set_ylabel("bytes per token on held-out text (higher is better)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    if with_trend:
        plot_trend(axes[0][1], trend, [r["vocab_size"] for r in curve])
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_trend(ax, trend: list[dict], sizes: list[int]) -> None:
    """Bytes per token across versions (x: versions, oldest first), one line per vocabulary size,
    a version without that size in its curve left out of that line."""
    versions = [row["version"] for row in trend]
    x = list(range(len(versions)))
    for size in sorted(set(sizes)):
        points = [
            (i, point["bytes_per_token"])
            for i, row in enumerate(trend)
            for point in row.get("curve") or []
            if point["vocab_size"] == size and point["bytes_per_token"] is not None
        ]
        if points:
            ax.plot([i for i, _ in points], [v for _, v in points], "o-", label=f"{size:,} tokens")
            i, value = points[-1]
            ax.annotate(f"{value:.3f}", (i, value), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7)
    ax.set_xticks(x, versions, fontsize=7, rotation=45 if len(versions) > 6 else 0)
    ax.set_xlim(-0.5, len(versions) - 0.5)
    ax.set_xlabel("version (same evaluation rows)")
    ax.set_ylabel("bytes per token (higher is better)")
    ax.set_title("trend across versions", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)


# -- the fixed evaluation set ---------------------------------------------------------------------
#
# Each version used to be measured on the held-out rows of its own data, so two versions' figures
# were on different text and could not be compared. The first version published with held-out
# rows now freezes them as the tokenizer's evaluation set, `<artifact_root>/<name>/eval-set/`, and
# every later version is measured on that same text. The rows were held out by a hash of their
# own text (`bpe.training.counting.holdout_mask`), so wherever the same text turns up again (a later
# shard, a duplicate), it is held out again and never trained on.

EVAL_SET_DIR = "eval-set"
EVAL_SET_JSON = "eval-set.json"  # written last: the set exists when this file does
EVAL_SET_FORMAT = 1
TREND_LIMIT = 12  # previous versions shown in a trend (the newest ones)


class EvalSetDamaged(Exception):
    """An evaluation set is there (its JSON is) but cannot be read back as it was written."""


@dataclass
class EvalSet:
    """The frozen evaluation rows of one tokenizer, and where they came from."""

    texts: list[str]
    fingerprint: str
    holdout_fraction: float  # the fraction that held these rows out when they were frozen
    frozen_by: str  # the version whose held-out rows they were
    created: str
    location: str

    @property
    def rows(self) -> int:
        return len(self.texts)

    @property
    def bytes(self) -> int:
        return text_bytes(self.texts)


def text_bytes(texts: Sequence[str]) -> int:
    """UTF-8 bytes of `texts`, all together."""
    return sum(len(t.encode("utf-8")) for t in texts)


def text_fingerprint(texts: Sequence[str]) -> str:
    """SHA-256 of the rows in order, each length-prefixed (so row boundaries count): two sets of
    rows have the same fingerprint only if they are the same rows."""
    digest = hashlib.sha256()
    for text in texts:
        data = text.encode("utf-8")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def eval_set_location(store: VersionStore) -> str:
    """Where a tokenizer's evaluation set lives: beside its versions, `<root>/<name>/eval-set`
    (not a version name, so listings of versions never see it)."""
    return storage.join(store.url, EVAL_SET_DIR)


def read_eval_set(location: str) -> EvalSet | None:
    """The evaluation set at `location`; None when there is none (its JSON is absent). Raises
    EvalSetDamaged when the JSON is there but the set cannot be read back whole and unchanged."""
    record_path = storage.join(location, EVAL_SET_JSON)
    if not storage.exists(record_path):
        return None
    try:
        record = json.loads(storage.read_bytes(record_path))
        rows_file = record["parquet"]
        if "/" in rows_file or rows_file.startswith("."):
            raise ValueError(f"unexpected file name {rows_file!r}")
        with storage.open_read(storage.join(location, rows_file)) as f:
            texts = pq.read_table(f).column("text").to_pylist()
        expected = record["fingerprint"]
        fraction, frozen_by, created = float(record["holdout_fraction"]), str(record["frozen_by"]), record["created"]
    except (OSError, ValueError, TypeError, KeyError, AttributeError, pa.ArrowException) as exc:
        raise EvalSetDamaged(f"{location}: cannot read the evaluation set ({type(exc).__name__}: {exc})") from None
    if any(t is None for t in texts) or text_fingerprint(texts) != expected:
        raise EvalSetDamaged(f"{location}: the evaluation rows do not match their fingerprint {expected[:16]}")
    return EvalSet(texts, expected, fraction, frozen_by, created, location)


def freeze_eval_set(location: str, texts: Sequence[str], holdout_fraction: float, version: str) -> EvalSet:
    """Freeze `texts` as the evaluation set at `location`, unless one is there already: a set is
    never rewritten, and what is returned is what is stored (another run's set if it got there
    first). The rows go to a Parquet file named by their fingerprint, then the JSON that names it,
    each written complete-or-absent (`bpe.storage`), so a reader sees a whole set or none."""
    existing = read_eval_set(location)
    if existing is not None:
        return existing
    texts = list(texts)
    fingerprint = text_fingerprint(texts)
    rows_file = f"rows-{fingerprint[:16]}.parquet"
    table = pa.table({"text": pa.array(texts, pa.large_string())})
    storage.write_file(storage.join(location, rows_file), lambda tmp: pq.write_table(table, tmp))
    record = {
        "format": EVAL_SET_FORMAT,
        "fingerprint": fingerprint,
        "rows": len(texts),
        "bytes": text_bytes(texts),
        "holdout_fraction": holdout_fraction,
        "frozen_by": version,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "parquet": rows_file,
    }
    storage.write_bytes(storage.join(location, EVAL_SET_JSON), json.dumps(record, indent=1).encode())
    stored = read_eval_set(location)
    assert stored is not None  # just written
    return stored


def held_out_now(texts: Sequence[str], holdout_fraction: float) -> list[bool]:
    """Which of `texts` the counting holds out at `holdout_fraction` (the same hash it uses): a row
    that is not could be trained on, wherever it occurs in the data."""
    if not texts:
        return []
    return holdout_mask(pa.array(list(texts), pa.large_string()), holdout_fraction).tolist()


@dataclass
class EvalRows:
    """The rows a version is evaluated on, described for its manifest."""

    texts: list[str]
    description: dict | None  # the manifest's `evaluation.eval_set`; None when there is no set
    notes: list[str]  # for the record: a set frozen now
    warnings: list[str]  # what a reader of the report must know: no set, a subset, a damaged set


def eval_rows(location: str, run_texts: Sequence[str], holdout_fraction: float, version: str) -> EvalRows:
    """The rows to evaluate `version` on: the tokenizer's evaluation set, frozen now from this run's
    held-out rows if there is none yet (or it was lost). Only rows still held out at this run's
    `holdout_fraction` are used: with a smaller fraction than the set was frozen at, the others
    may have been trained on, so they are left out and the figures are on a subset (with a
    fingerprint of its own, so they are compared only with versions measured on that subset).
    A damaged set is not rewritten (it would silently restart the trend): the version is then
    measured on its own held-out rows only, and the notes say how to start a new set.
    The set is frozen here, before the version is published: `frozen_by` names the version number
    the freezing run reserved, which stays unpublished if that run then fails or finds its version
    identical to a published one (the rows are held-out rows all the same)."""
    notes: list[str] = []
    warnings: list[str] = []
    try:
        frozen = read_eval_set(location)
    except EvalSetDamaged as exc:
        warnings.append(
            f"{exc}; not evaluated on it (it is never rewritten: remove {location} to freeze a new "
            f"set from the next version's held-out rows)"
        )
        return EvalRows([], None, notes, warnings)
    if frozen is None:
        if not run_texts:
            warnings.append(
                "no held-out rows to freeze as the evaluation set (holdout_fraction 0, or only text files, "
                "which are never held out?)"
            )
            return EvalRows([], None, notes, warnings)
        frozen = freeze_eval_set(location, run_texts, holdout_fraction, version)
        if frozen.frozen_by == version:
            notes.append(f"evaluation set frozen now from {version}'s held-out rows")
    kept = held_out_now(frozen.texts, holdout_fraction)
    texts = [t for t, keep in zip(frozen.texts, kept) if keep]
    description = {
        "fingerprint": frozen.fingerprint,
        "rows": frozen.rows,
        "bytes": frozen.bytes,
        "location": frozen.location,
        "frozen_by": frozen.frozen_by,
        "holdout_fraction": frozen.holdout_fraction,
    }
    if len(texts) < frozen.rows:
        description.update(
            fingerprint=text_fingerprint(texts), rows=len(texts), bytes=text_bytes(texts), subset_of=frozen.fingerprint
        )
        warnings.append(
            f"holdout_fraction {holdout_fraction} holds out only {len(texts):,} of the evaluation set's "
            f"{frozen.rows:,} rows (frozen at {frozen.holdout_fraction}): evaluated on those, a subset "
            f"compared only with versions evaluated on the same subset"
        )
    return EvalRows(texts, description, notes, warnings)


def previous_promoted(store: VersionStore) -> str | None:
    """The version this one is compared with: the one `latest` names. Only the main line and
    promotions move `latest` (and a rollback moves it back), so it is the current promoted version;
    None before the first version, or when the store cannot say."""
    try:
        return store.latest()
    except (OSError, ValueError):
        return None


def published_manifests(store: VersionStore) -> list[tuple[str, Manifest]]:
    """(version, manifest) of every readable published version, oldest first."""
    found = []
    for version in store.versions():
        try:
            found.append((version, store.manifest(version)))
        except (OSError, ValueError):  # unreadable or half-pruned: not part of any trend
            continue
    return found


def on_set(manifest: Manifest, fingerprint: str | None) -> bool:
    """Whether a version's manifest has figures on the evaluation rows with this fingerprint."""
    evaluation = manifest.evaluation or {}
    eval_set = evaluation.get("eval_set") or {}
    return bool(fingerprint) and eval_set.get("fingerprint") == fingerprint and bool(evaluation.get("curve"))


def trend_rows(
    manifests: Sequence[tuple[str, Manifest]], fingerprint: str | None, limit: int = TREND_LIMIT
) -> list[dict]:
    """The previous versions measured on the same evaluation rows, oldest first (the newest
    `limit`): their bytes per token at their own size and their curves, as their manifests say.
    A version's `channel` is shown when its manifest has one (experiments do not move `latest`)."""
    rows = []
    for version, manifest in manifests:
        if not on_set(manifest, fingerprint):
            continue
        evaluation = manifest.evaluation
        rows.append(
            {
                "version": version,
                "created": manifest.created or "",
                "vocab_size": manifest.result.vocab_size if manifest.result is not None else None,
                "bytes_per_token": evaluation.get("bytes_per_token"),
                "channel": manifest.channel,
                "curve": evaluation.get("curve") or [],
            }
        )
    return rows[-limit:] if limit else rows


def evaluate_version_on_set(
    tokenizer: Tokenizer,
    run_texts: Sequence[str],
    store: VersionStore,
    version: str,
    holdout_fraction: float,
    sizes: Sequence[int] = (),
    plot_path: Path | None = None,
    log: Callable[[str], object] = lambda _: None,
    warn: Callable[[str], object] = lambda _: None,
    transition: int | None = None,
) -> dict:
    """The manifest's `evaluation` of `version`: bytes per token on the tokenizer's evaluation set
    (frozen by the first version) at each size up to the trained one; the previous promoted
    version's curve on the same rows (from its manifest when it was measured on them, else by
    encoding them with it); the trend of earlier versions on the same rows; and, apart and not
    comparable across versions, the figure on this run's own held-out rows (`run_held_out`).
    With `plot_path`, the curve and the trend are drawn there."""
    rows = eval_rows(eval_set_location(store), run_texts, holdout_fraction, version)
    for note in rows.notes:
        log(note)
    for warning in rows.warnings:
        warn(warning)
    texts = rows.texts
    sizes = sorted(set(sizes or default_sizes(tokenizer.vocab_size)) | {tokenizer.vocab_size})
    if transition is not None:
        sizes = sorted(set(sizes) | {transition + len(tokenizer.special_tokens)})
    curve = compression_curve(tokenizer, texts, sizes) if texts else []
    fingerprint = (rows.description or {}).get("fingerprint")
    manifests = published_manifests(store)
    previous_version = previous_promoted(store)
    previous_curve, previous_source = None, None
    if previous_version and texts:
        known = dict(manifests).get(previous_version)
        if known is not None and on_set(known, fingerprint) and covers(known, sizes):
            previous_curve, previous_source = known.evaluation["curve"], "manifest"
        else:  # measured before this set existed, on other rows or at other sizes: encode the set with it
            previous = Tokenizer.load(store.location(previous_version))
            previous_curve = compression_curve(previous, texts, sorted(set(sizes) | {previous.vocab_size}))
            previous_source = "recomputed"
    own = list(run_texts)
    own_fingerprint = text_fingerprint(own) if own else None
    same_rows = own_fingerprint == fingerprint and bool(curve)  # the version that froze the set: no second pass
    own_bytes_per_token = curve[-1]["bytes_per_token"] if same_rows else bytes_per_token(tokenizer, own)
    result = {
        "eval_set": rows.description,
        "rows": len(texts),
        "bytes": text_bytes(texts),
        "bytes_per_token": curve[-1]["bytes_per_token"] if curve else None,
        "curve": curve,
        "previous_version": previous_version,
        "previous_bytes_per_token": at_size(previous_curve, tokenizer.vocab_size),
        "previous_curve": previous_curve,
        "previous_source": previous_source,
        "trend": trend_rows(manifests, fingerprint),
        "run_held_out": {
            "rows": len(own),
            "bytes": text_bytes(own),
            "fingerprint": own_fingerprint,
            "bytes_per_token": own_bytes_per_token,
        },
        "notes": rows.notes + rows.warnings,
    }
    if transition is not None:
        result["transition"] = transition
    if plot_path is not None and curve:
        trend = [
            *result["trend"],
            {
                "version": version,
                "curve": curve,
                "bytes_per_token": result["bytes_per_token"],
                "vocab_size": tokenizer.vocab_size,
            },
        ]
        plot_curve(
            plot_path,
            curve,
            f"{store.name} {version}: bytes per token on the evaluation set",
            previous_curve,
            label=version,
            previous_label=f"previous: {previous_version}",
            trend=trend,
            transition=transition,
        )
        result["plot"] = plot_path.name
    return result

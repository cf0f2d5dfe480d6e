"""Every version measured language by language on the configuration's parallel dev set
(`evaluation: {dev: DIR, pivot: eng, gini_margin: 0.01}`): the figures of `bpe.evaluate` in the
manifest's `evaluation.languages`, beside the promoted version's on the same dev set (from its
manifest, or by encoding the set with it), the Gini coefficient across versions, and whether it
rose above the promoted version's by more than `gini_margin`, which the flow then alerts on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from bpe.errors import SettingsError
from bpe.evaluation.dev_set import DevSet, read_dev_set
from bpe.evaluation.evaluate import check_pivot, evaluate
from bpe.evaluation.metrics import RENYI_ALPHA
from bpe.evaluation.report import Evaluation, TokenizerEvaluation, bars
from bpe.manifest import Manifest
from bpe.pipeline.config import TokenizerConfig
from bpe.pipeline.evaluate import TREND_LIMIT, previous_promoted, published_manifests
from bpe.pipeline.store import VersionStore
from bpe.tokenizer import Tokenizer

LANGUAGES_PLOT = "languages.png"


def configured_dev_set(cfg: TokenizerConfig) -> DevSet | None:
    """The configuration's dev set, read and checked when the run starts (before any counting):
    None without `evaluation.dev`. A pivot the set lacks is one line naming the file and key (or the variable)."""
    if not cfg.evaluation.dev:
        return None
    dev = read_dev_set(cfg.evaluation.dev)
    pivot = cfg.evaluation.pivot
    if pivot is not None and pivot not in dev.codes:
        raise SettingsError(
            f"{cfg.at('evaluation.pivot')}: {pivot!r} is not a language of the dev set {cfg.evaluation.dev} "
            f"(it has {', '.join(dev.codes)})"
        )
    return dev


def recorded(manifest: Manifest | None) -> dict | None:
    """A version's per-language evaluation, as its manifest records it (None: it has none)."""
    if manifest is None:
        return None
    return (manifest.evaluation or {}).get("languages") or None


def trend_rows(manifests: Sequence[tuple[str, Manifest]], fingerprint: str, limit: int = TREND_LIMIT) -> list[dict]:
    """The published versions measured on the dev set with this fingerprint, oldest first (the
    newest `limit`): their Gini coefficient, bytes per token over all languages, and the language
    their sentences cost the most tokens in."""
    rows = []
    for version, manifest in manifests:
        found = recorded(manifest)
        if not found or (found.get("dev") or {}).get("fingerprint") != fingerprint:
            continue
        figures = found["figures"]
        rows.append(
            {
                "version": version,
                "created": manifest.created or "",
                "channel": manifest.channel,
                "gini": figures.get("gini"),
                "bytes_per_token": figures.get("bytes_per_token"),
                "most_tokens": figures.get("most_tokens"),
            }
        )
    return rows[-limit:] if limit else rows


def gini_rose(this: float | None, before: float | None, margin: float) -> float | None:
    """How far the Gini coefficient rose, when by more than `margin`; None otherwise.

    >>> gini_rose(0.15, 0.12, 0.01), gini_rose(0.125, 0.12, 0.01), gini_rose(0.15, None, 0.01)
    (0.03, None, None)
    """
    if this is None or before is None or this - before <= margin:
        return None
    return round(this - before, 12)


def evaluate_languages(
    tokenizer: Tokenizer,
    dev: DevSet,
    store: VersionStore,
    version: str,
    pivot: str | None = None,
    gini_margin: float = 0.01,
    plot_path: Path | None = None,
    log: Callable[[str], object] = lambda _: None,
    warn: Callable[[str], object] = lambda _: None,
) -> dict:
    """The manifest's `evaluation.languages` of `version`: its figures on each language of `dev`,
    the promoted version's on the same set (recorded, or measured now), the Gini trend of the
    versions measured on it, and `gini_rose` when the Gini coefficient rose above the promoted
    version's by more than `gini_margin`. With `plot_path`, the bars of both versions per language
    and the Gini trend are drawn there."""
    chosen = check_pivot(pivot, dev.codes)
    fingerprint = dev.fingerprint()
    manifests = published_manifests(store)
    previous_version = previous_promoted(store)
    previous, source = None, None
    if previous_version is not None:
        known = recorded(dict(manifests).get(previous_version))
        if known and known["dev"].get("fingerprint") == fingerprint and known.get("pivot") == chosen:
            previous, source = TokenizerEvaluation.from_json(known["figures"]), "manifest"
        else:  # measured before this dev set was configured (or on another): encode the set with it
            try:
                before = Tokenizer.load(store.location(previous_version))
            except Exception as exc:  # noqa: BLE001 - a comparison is a convenience; the figures stand alone
                warn(f"{previous_version} could not be read to compare with ({type(exc).__name__}: {exc})")
            else:
                previous = evaluate({previous_version: before}, dev, chosen).tokenizers[0]
                source = "recomputed"
    this = evaluate({version: tokenizer}, dev, chosen)
    figures = this.tokenizers[0]
    rose = gini_rose(figures.gini, previous.gini if previous else None, gini_margin)
    result = {
        "dev": {**this.dev, "spaced": this.spaced},
        "pivot": chosen,
        "renyi_alpha": RENYI_ALPHA,
        "figures": figures.to_json(),
        "gini": figures.gini,
        "previous_version": previous_version if previous is not None else None,
        "previous_source": source,
        "previous": previous.to_json() if previous is not None else None,
        "previous_gini": previous.gini if previous is not None else None,
        "gini_margin": gini_margin,
        "gini_rose": rose,
        "trend": trend_rows(manifests, fingerprint),
    }
    log(one_line(result))
    if plot_path is not None:
        shown = Evaluation(this.dev, chosen, [figures, *([previous] if previous else [])], RENYI_ALPHA, this.spaced)
        trend = [*result["trend"], {"version": version, "gini": figures.gini}]
        plot_languages(plot_path, shown, trend, f"{store.name} {version}")
        result["plot"] = plot_path.name
    return result


def one_line(languages: dict) -> str:
    """The run's log line: Gini, bytes per token over the languages, the costliest language, and
    the promoted version's Gini."""
    figures = languages["figures"]
    gini = f"{figures['gini']:.4f}" if figures["gini"] is not None else "none (one language)"
    before = ""
    if languages.get("previous_gini") is not None:
        before = f" (promoted {languages['previous_version']}: {languages['previous_gini']:.4f})"
    dev = languages["dev"]
    return (
        f"on the dev set {dev['location']} ({len(dev['languages'])} languages, {dev['sentences']:,} sentences each): "
        f"Gini {gini}{before}, {figures['bytes_per_token']:.3f} bytes per token, "
        f"most tokens in {figures['most_tokens']}"
    )


def alert_message(name: str, version: str, languages: dict) -> str | None:
    """The alert's text when this version's Gini coefficient rose by more than the margin; None otherwise."""
    rose = languages.get("gini_rose")
    if rose is None:
        return None
    return (
        f"{name} {version}: Gini coefficient on the dev set {languages['dev']['location']} is "
        f"{languages['gini']:.4f}, {rose:.4f} above the promoted {languages['previous_version']}'s "
        f"{languages['previous_gini']:.4f} (more than evaluation.gini_margin {languages['gini_margin']:g}); "
        f"most tokens in {languages['figures']['most_tokens']}"
    )


def plot_languages(path: Path, shown: Evaluation, trend: list[dict], title: str) -> Path:
    """A PNG: tokens per sentence by language for this version and the promoted one, and beside it,
    with two versions or more on this dev set, their Gini coefficients across versions."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = [(row["version"], row["gini"]) for row in trend if row.get("gini") is not None]
    with_trend = len(points) >= 2
    width = max(7.0, 0.5 * len(shown.codes) + 2)
    fig, axes = plt.subplots(
        1, 2 if with_trend else 1, figsize=(width + (4.5 if with_trend else 0), 4.2), squeeze=False,
        gridspec_kw={"width_ratios": [width, 4.5]} if with_trend else None,
    )  # fmt: skip
    bars(axes[0][0], shown, "tokens_per_sentence", "tokens per sentence (lower is better)")
    axes[0][0].legend(fontsize=8)
    axes[0][0].set_title(f"{title}: tokens per sentence on the dev set", fontsize=10)
    if with_trend:
        ax = axes[0][1]
        ax.plot(range(len(points)), [g for _, g in points], "o-", color="#d62728")
        ax.set_xticks(range(len(points)), [v for v, _ in points], fontsize=7, rotation=45 if len(points) > 6 else 0)
        ax.set_ylabel("Gini of tokens per language (lower is fairer)", fontsize=8)
        ax.set_title("Gini across versions", fontsize=10)
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path

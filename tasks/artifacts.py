"""Tasks for the artifacts: stage a new version, evaluate it, publish it (store + Prefect artifacts)."""

from __future__ import annotations

import numpy as np
from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NONE

from bpe import storage
from bpe.distributed.count_tasks import ShardCount, read_held_out
from bpe.evaluation.dev_set import DevSet
from bpe.formats.manifest_json import write as write_manifest
from bpe.manifest import Manifest
from bpe.pipeline.evaluate import compared_with_previous, evaluate_version_on_set
from bpe.pipeline.language_evaluation import LANGUAGES_PLOT, evaluate_languages
from bpe.pipeline.report import languages_table, metrics_table, summary_markdown
from bpe.pipeline.store import Staged, VersionStore
from bpe.pipeline.version import identical_version
from bpe.tasks.data import retry_if_transient
from bpe.training.extend import Base, trained_tokenizer
from bpe.training.long_tokens import long_tokens
from bpe.training.settings import Settings

HELD_OUT_SAMPLE_BYTES = 4 << 20


@task(name="export-version", cache_policy=NONE, retries=2, retry_delay_seconds=2, retry_condition_fn=retry_if_transient)
def export_version(
    merges: np.ndarray, settings: Settings, root: str, name: str, base: Base | None = None
) -> tuple[Staged, dict]:
    """Reserve the next version number and write the tokenizer files (`merges` after `base`'s)
    into its staging directory; returns it and the tokenizer's description for the manifest. A
    full disk (or another lasting fault) is one line naming the version, not retried; nothing of
    the version stays."""
    store = VersionStore(root, name)
    staged = store.stage()
    try:
        tokenizer = trained_tokenizer(merges, settings, base)
        made = long_tokens(tokenizer.vocab[256 + settings.base_merges :])
        if made is not None:
            get_run_logger().warning(made.message("max_token_length"))
        with store.writing(staged.version, "while writing its files"):
            tokenizer.write_files(staged.directory)
    except BaseException:
        store.abort(staged)
        raise
    get_run_logger().info(f"staged {name} {staged.version} in {staged.directory}")
    return staged, tokenizer.describe()


def held_out_texts(counted: list[ShardCount], limit: int = HELD_OUT_SAMPLE_BYTES) -> list[str]:
    """The held-out rows the count tasks set aside, shard by shard in path order, up to `limit` bytes."""
    texts, size = [], 0
    for result in sorted(counted, key=lambda c: c.shard["path"]):
        for text in read_held_out(result.held_out, result.expected("held_out")):
            if size >= limit:
                return texts
            texts.append(text)
            size += len(text.encode("utf-8"))
    return texts


@task(name="evaluate-version", cache_policy=NONE)
def evaluate_version(
    staged: Staged,
    merges: np.ndarray,
    settings: Settings,
    counted: list[ShardCount],
    root: str,
    name: str,
    sizes: list[int],
    *,
    holdout_fraction: float,
    base: Base | None = None,
    dev: DevSet | None = None,
    pivot: str | None = None,
    gini_margin: float = 0.01,
) -> dict:
    """Bytes per token on the tokenizer's fixed evaluation set (frozen from the first version's
    held-out rows, see `bpe.pipeline.evaluate`) at every vocabulary size up to the trained one, for
    this version and the previous promoted one, with the trend of earlier versions on the same rows;
    also, under `run_held_out`, on this run's own held-out rows. The curve and the trend are drawn
    to compression.png in the version. `holdout_fraction` is the one the counts were made with: only
    evaluation rows it holds out (never trained on) are used. With a parallel `dev` set, the figures
    per language too, under `languages` (`bpe.pipeline.language_evaluation`), drawn to languages.png."""
    logger = get_run_logger()
    tokenizer = trained_tokenizer(merges, settings, base)
    store = VersionStore(root, name)
    with store.writing(staged.version, "while evaluating it"):  # its plot, the evaluation set
        result = evaluate_version_on_set(
            tokenizer,
            held_out_texts(counted),
            store,
            staged.version,
            holdout_fraction,
            sizes,
            staged.directory / "compression.png",
            log=logger.info,
            warn=logger.warning,
            transition=settings.transition if settings.superwords else None,
        )
    eval_set = result["eval_set"] or {}
    if result["bytes_per_token"] is not None:
        logger.info(
            f"compression on the evaluation set {eval_set['fingerprint'][:16]} (frozen by {eval_set['frozen_by']}): "
            f"{result['bytes_per_token']} bytes per token on {result['rows']:,} rows"
            + compared_with_previous(result, tokenizer.vocab_size)
        )
    own = result["run_held_out"]
    if own["bytes_per_token"] is not None and own["fingerprint"] != eval_set.get("fingerprint"):
        logger.info(f"on this run's own {own['rows']:,} held-out rows: {own['bytes_per_token']} bytes per token")
    if dev is not None:
        with store.writing(staged.version, "while evaluating it by language"):  # its plot
            result["languages"] = evaluate_languages(
                tokenizer,
                dev,
                store,
                staged.version,
                pivot,
                gini_margin,
                staged.directory / LANGUAGES_PLOT,
                log=logger.info,
                warn=logger.warning,
            )
    return result


def plot_png(staged: Staged, location: str, manifest: Manifest, section: str | None = None) -> bytes | None:
    """The version's compression plot (or, with `section` "languages", its plot by language) as PNG
    bytes (from its staging directory, or from its place once moved there), or None when it has
    none or it cannot be read: the report then links it."""
    evaluation = manifest.evaluation or {}
    plot = ((evaluation.get(section) or {}) if section else evaluation).get("plot")
    if not plot:
        return None
    try:
        staged_plot = staged.directory / plot
        return staged_plot.read_bytes() if staged_plot.exists() else storage.read_bytes(storage.join(location, plot))
    except Exception:  # noqa: BLE001 - the embedded plot is a convenience; the link stays
        return None


@task(
    name="publish-version", cache_policy=NONE, retries=2, retry_delay_seconds=2, retry_condition_fn=retry_if_transient
)
def publish_version(staged: Staged, manifest: Manifest, root: str, name: str) -> dict:
    """Write the manifest, move the version into place, then move `latest`; publish the summary
    and the metrics as Prefect artifacts under this tokenizer's stable keys. A version identical
    to one already published (same data, same settings) is not published again. Returns the
    version, its location and whether it was published."""
    logger = get_run_logger()
    store = VersionStore(root, name)
    location = store.location(staged.version)
    # Rendered first: a report that cannot be made fails the run before its version is in place.
    markdown = summary_markdown(
        manifest, location, plot_png(staged, location, manifest), plot_png(staged, location, manifest, "languages")
    )
    table = metrics_table(manifest)
    by_language = languages_table(manifest)
    if staged.directory.exists():  # not yet moved into place (a retry after the move skips this)
        twin = identical_version(store, manifest)
        if twin:
            store.abort(staged)
            logger.info(f"identical to {twin} (same data, same settings): {staged.version} not published")
            return {"version": twin, "location": store.location(twin), "published": False}
        with store.writing(staged.version, "while writing its manifest"):
            write_manifest(staged.directory, manifest)
        store.commit(staged)
    key = "bpe-" + "".join(ch if ch.isalnum() else "-" for ch in name.lower())
    create_markdown_artifact(key=key, markdown=markdown, description=f"{name} {staged.version}")
    create_table_artifact(key=f"{key}-metrics", table=table, description=f"{name} {staged.version}")
    if by_language:
        create_table_artifact(key=f"{key}-languages", table=by_language, description=f"{name} {staged.version}")
    logger.info(f"published {name} {staged.version} at {location}")
    return {"version": staged.version, "location": location, "published": True}

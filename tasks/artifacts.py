"""Tasks for the artifacts: stage a new version, evaluate it, publish it (store + Prefect artifacts)."""

from __future__ import annotations

import numpy as np
from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NONE

from bpe.distributed.counting import ShardCount, read_held_out
from bpe.pipeline.evaluate import compression_curve, default_sizes, plot_curve
from bpe.pipeline.report import metrics_table, summary_markdown
from bpe.pipeline.store import Staged, VersionStore
from bpe.pipeline.version import identical_version
from bpe.settings import Settings
from bpe.tokenizer import Tokenizer, write_manifest

HELD_OUT_SAMPLE_BYTES = 4 << 20


@task(name="export-version", cache_policy=NONE, retries=2, retry_delay_seconds=2)
def export_version(merges: np.ndarray, settings: Settings, root: str, name: str) -> tuple[Staged, dict]:
    """Reserve the next version number and write the tokenizer files into its staging directory;
    returns it and the tokenizer's description for the manifest."""
    staged = VersionStore(root, name).stage()
    try:
        tokenizer = Tokenizer(merges, settings.pattern, list(settings.special_tokens))
        tokenizer.write_files(staged.directory)
    except BaseException:
        VersionStore(root, name).abort(staged)
        raise
    get_run_logger().info(f"staged {name} {staged.version} in {staged.directory}")
    return staged, tokenizer.describe()


def held_out_texts(counted: list[ShardCount], limit: int = HELD_OUT_SAMPLE_BYTES) -> list[str]:
    """The held-out rows the count tasks set aside, shard by shard in path order, up to `limit` bytes."""
    texts, size = [], 0
    for result in sorted(counted, key=lambda c: c.shard["path"]):
        for text in read_held_out(result.held_out):
            if size >= limit:
                return texts
            texts.append(text)
            size += len(text.encode("utf-8"))
    return texts


@task(name="evaluate-version", cache_policy=NONE)
def evaluate_version(staged: Staged, merges: np.ndarray, settings: Settings, counted: list[ShardCount], root: str,
                     name: str, sizes: list[int]) -> dict:  # fmt: skip
    """Bytes per token on held-out rows at every vocabulary size up to the trained one, for this
    version and the previous one; the curve is also drawn to compression.png in the version."""
    logger = get_run_logger()
    texts = held_out_texts(counted)
    tokenizer = Tokenizer(merges, settings.pattern, list(settings.special_tokens))
    sizes = sorted(set(sizes or default_sizes(tokenizer.vocab_size)) | {tokenizer.vocab_size})
    curve = compression_curve(tokenizer, texts, sizes)
    store = VersionStore(root, name)
    previous_version = store.latest()
    previous_curve = None
    if previous_version:
        previous = Tokenizer.load(store.location(previous_version))  # from a URL: via a temporary directory
        previous_curve = compression_curve(previous, texts, sorted(set(sizes) | {previous.vocab_size}))
    result = {
        "rows": len(texts),
        "bytes": sum(len(t.encode()) for t in texts),
        "bytes_per_token": curve[-1]["bytes_per_token"] if curve else None,
        "curve": curve,
        "previous_version": previous_version,
        "previous_bytes_per_token": previous_curve[-1]["bytes_per_token"] if previous_curve else None,
        "previous_curve": previous_curve,
    }
    if texts and curve:
        plot_curve(staged.directory / "compression.png", curve, f"{name} {staged.version}: held-out compression",
                   previous_curve, label=staged.version, previous_label=f"previous: {previous_version}")  # fmt: skip
        result["plot"] = "compression.png"
    logger.info(
        f"held-out compression: {result['bytes_per_token']} bytes per token on {len(texts):,} rows"
        + (f" (previous {previous_version}: {result['previous_bytes_per_token']})" if previous_version else "")
    )
    return result


@task(name="publish-version", cache_policy=NONE, retries=2, retry_delay_seconds=2)
def publish_version(staged: Staged, manifest: dict, root: str, name: str) -> dict:
    """Write the manifest, move the version into place, then move `latest`; publish the summary
    and the metrics as Prefect artifacts under this tokenizer's stable keys. A version identical
    to one already published (same data, same settings) is not published again. Returns the
    version, its location and whether it was published."""
    logger = get_run_logger()
    store = VersionStore(root, name)
    location = store.location(staged.version)
    # Rendered first: a report that cannot be made fails the run before its version is in place.
    markdown, table = summary_markdown(manifest, location), metrics_table(manifest)
    if staged.directory.exists():  # not yet moved into place (a retry after the move skips this)
        twin = identical_version(store, manifest)
        if twin:
            store.abort(staged)
            logger.info(f"identical to {twin} (same data, same settings): {staged.version} not published")
            return {"version": twin, "location": store.location(twin), "published": False}
        write_manifest(staged.directory, manifest)
        store.commit(staged)
    key = "bpe-" + "".join(ch if ch.isalnum() else "-" for ch in name.lower())
    create_markdown_artifact(key=key, markdown=markdown, description=f"{name} {staged.version}")
    create_table_artifact(key=f"{key}-metrics", table=table, description=f"{name} {staged.version}")
    logger.info(f"published {name} {staged.version} at {location}")
    return {"version": staged.version, "location": location, "published": True}

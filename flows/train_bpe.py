"""The `train-bpe` flow: shards -> counts (cached per shard) -> merges on Dask -> a new version.

Its parameters are the configuration file, `promote`, and each setting a run may give, as a
parameter of its own (`-p vocab_size=4096`), typed and bounded as the schema says
(`bpe.pipeline.parameters`). Each setting left out comes from the configuration file (and its
BPE_* environment overrides). A run with the configuration's own training settings publishes to the
main line and moves `latest`; a run whose parameters change a training setting publishes an
experiment, which moves `latest` only with promote=True. A run whose data and settings equal a
published version's (of either channel) does not train: it logs "no new data since vNNNN" and
completes. Orchestration only: the work is in `bpe`.
"""

from __future__ import annotations

import time
import uuid

from prefect import flow, get_run_logger
from prefect.context import get_run_context

from bpe import storage
from bpe.distributed.client import dask_client, prepare_kernels, ready_workers, share_client
from bpe.engine.replay import BaseMerges
from bpe.errors import SettingsError
from bpe.pipeline.alerts import send_gini_alert
from bpe.pipeline.config import TRAINING_KEYS, load_config
from bpe.pipeline.demo import write_demo_corpus
from bpe.pipeline.language_evaluation import alert_message, configured_dev_set
from bpe.pipeline.multilingual import count_languages, language_plan, shard_multipliers
from bpe.pipeline.parameters import overrides, with_settings
from bpe.pipeline.report import one_line
from bpe.pipeline.retention import apply_retention, record_counts_in_use
from bpe.pipeline.security import count_cache_key
from bpe.pipeline.store import EXPERIMENT, MAIN, VersionStore
from bpe.pipeline.version import (
    channel_note,
    check_merges_learned,
    overridden_settings,
    reason_to_train,
    settle_latest,
    summed_stats,
    unchanged_since,
    version_manifest,
)
from bpe.tasks.artifacts import evaluate_version, export_version, publish_version
from bpe.tasks.data import combine_counts, count_all, discover_counts, discover_shards
from bpe.tasks.merges import train_merges, train_parity_merges
from bpe.training.extend import load_base
from bpe.training.plan import dev_fingerprints
from bpe.training.results import TrainingRun
from bpe.training.settings import Settings
from bpe.training.superwords import train_in_stages
from bpe.training.trainer import data_fingerprint
from bpe.training.warm import groups_of_run


@flow(name="train-bpe")
@with_settings
def train_bpe(config: str = "conf/demo.yaml", promote: bool = False, **settings) -> dict:
    """Train the tokenizer that `config` describes and publish it as the next version: on the main
    line, or, when the parameters change a training setting, as an experiment that moves `latest`
    only if `promote`.

    Args:
        config: the tokenizer's configuration file (conf/NAME.yaml), relative to the source directory
        promote: move `latest` to the new version even when the run is an experiment
    """
    given = overrides(settings)
    cfg = load_config(config, given)
    configured = load_config(config, {k: v for k, v in given.items() if k not in TRAINING_KEYS})
    overridden = overridden_settings(configured, cfg)
    channel = EXPERIMENT if overridden else MAIN
    promoted = channel == MAIN or bool(promote)
    # read with the configuration's pattern where the base's files record none (a .tiktoken file);
    # a bad base fails the run before any counting
    base = load_base(cfg.base, cfg.pattern) if cfg.base else None
    training = cfg.settings(base)
    dev = configured_dev_set(cfg)  # the dev set by language, if any: unreadable, it fails the run here
    logger = get_run_logger()
    count_cache_key(warn=logger.warning)  # the key that signs the count cache's entries: a bad one fails the run here
    started = time.perf_counter()
    if cfg.demo_corpus:
        write_demo_corpus(cfg.data[0])  # kept if already there
    plan = language_plan(cfg, training)  # text by language (`languages:`), its mixture and parity; or None
    if cfg.counts:  # word counts instead of text: each file is read (and cached) as a shard's counts
        try:
            shards = discover_counts(cfg.counts, training)
        except SettingsError as exc:
            raise cfg.located(exc) from None
    elif plan is None:
        shards = discover_shards(cfg.data)
    else:  # each shard knows its language; its counts are cached by its content alone
        inputs = cfg.language_inputs()
        shards = [{**shard, "language": code} for code in plan.codes for shard in discover_shards(inputs[code])]
    fingerprint = data_fingerprint(shards + dev_fingerprints(plan))  # a changed dev set is new data too
    store = VersionStore(cfg.artifact_root, cfg.name)
    record_counts_in_use(cfg, shards, training, logger.warning)
    unchanged = unchanged_since(store, fingerprint, cfg, base)
    if unchanged:
        latest, then = settle_latest(store, unchanged, promote, by=f"flow run {run_ids().get('flow_run_id', '?')}")
        logger.info(f"no new data since {unchanged}: {len(shards)} shard(s), fingerprint {fingerprint[:16]}; {then}")
        label_run("no-new-data")
        return {
            "name": cfg.name,
            "version": unchanged,
            "trained": False,
            "location": store.location(unchanged),
            "channel": channel,
            "latest": latest,
        }
    logger.info(
        f"training: {reason_to_train(store, shards, cfg, base)}; {channel_note(overridden, promote, store.latest())}"
    )

    scratch = storage.join(cfg.counts_cache, "runs", uuid.uuid4().hex[:12])
    stage_counts: list[tuple[list, int]] = []  # (counted, cached) of each stage
    try:
        parity = plan is not None and plan.parity is not None
        groups = groups_of_run(training, "dask", base=base is not None, parity_merges=parity)
        worker_groups, compiled = prepare_kernels(groups, cfg.dask_scheduler is None, logger.info)
        t0 = time.perf_counter()
        with dask_client(cfg.dask_scheduler, cfg.dask_workers, log=logger.info) as (client, cluster):
            address = share_client(client)
            ready = ready_workers(client, worker_groups, log=logger.info)
            compiled += ready.compile_seconds
            setup = {"compile": compiled, "cluster": time.perf_counter() - t0 - ready.compile_seconds}

            def run_stage(stage: Settings, replayed: BaseMerges | None) -> TrainingRun:
                """Count the shards as `stage` splits them, then learn its merges on the workers."""
                if stage.stage != "whole":
                    logger.info(f"{stage.stage} stage: {stage.n_merges():,} merges, split by {stage.pretokenizer.name}")
                t1 = time.perf_counter()
                counted, cached = count_all(shards, cfg, stage, address)
                seconds = {"count": time.perf_counter() - t1}
                t2 = time.perf_counter()
                multipliers = count_languages(plan, counted) if plan is not None else None
                if plan is not None and plan.parity is not None:  # one merge at a time against the dev set
                    seconds["combine"] = 0.0
                    on_workers = train_parity_merges(plan, counted, multipliers, stage, replayed)
                else:  # the languages' counts, each weighted by its multiplier, summed into word buckets
                    weights = shard_multipliers(plan, counted, multipliers) if plan is not None else None
                    where = storage.join(scratch, stage.stage)
                    word_buckets = combine_counts(counted, ready.workers, where, address, weights)
                    seconds["combine"] = time.perf_counter() - t2
                    on_workers = train_merges(word_buckets, stage, scratch, address, replayed)
                seconds["build"], seconds["merge"] = on_workers.build_seconds, on_workers.merges.seconds
                seconds["merge_loop"], seconds["compile"] = on_workers.loop_seconds, on_workers.compile_seconds
                stage_counts.append((counted, cached))
                return TrainingRun(
                    stats=summed_stats(counted),
                    unique_words=on_workers.unique_words,
                    merges=on_workers.merges,
                    fingerprints=[c.shard for c in counted],
                    seconds=seconds,
                    engine={
                        "scheduler": cluster["scheduler"],
                        "cluster_started_here": cluster["started_here"],
                        **on_workers.engine,
                    },
                    languages=plan.stats if plan is not None else None,
                )

            run = train_in_stages(training, run_stage, base.merges if base else None)
            run.seconds["compile"] += setup["compile"]
            run.seconds = {"compile": run.seconds["compile"], "cluster": setup["cluster"], **run.seconds}
    finally:
        storage.remove_tree(scratch)
    counted, cached = stage_counts[-1]  # the tokenizer splits text as the last stage did
    check_merges_learned(cfg.name, training, run, store.latest())  # no tokenizer of bare bytes as `latest`

    staged, described = export_version(run.merges.merges, training, cfg.artifact_root, cfg.name, base)
    try:
        evaluation = evaluate_version(
            staged,
            run.merges.merges,
            training,
            counted,
            cfg.artifact_root,
            cfg.name,
            cfg.eval_sizes,
            holdout_fraction=cfg.holdout_fraction,
            base=base,
            dev=dev,
            pivot=cfg.evaluation.pivot,
            gini_margin=cfg.evaluation.gini_margin,
        )
        manifest = version_manifest(
            cfg,
            staged.version,
            run,
            counted,
            cached,
            evaluation,
            described,
            run_ids(),
            started,
            base,
            plan,
        )
        manifest.channel, manifest.promoted = channel, promoted  # `latest` moves to it only if promoted
        published = publish_version(staged, manifest, cfg.artifact_root, cfg.name)
    except BaseException:
        store.abort(staged)  # no partial version, and `latest` stays where it was
        raise
    by = f"flow run {run_ids().get('flow_run_id', '?')}"
    if published["published"]:
        logger.info(one_line(manifest, published["location"]))
        latest = store.latest()
    else:  # identical to a published version: that one is promoted, if asked
        latest, _ = settle_latest(store, published["version"], promote, by=by)
    logger.info(
        f"{published['version']} is {'on the main line' if channel == MAIN else 'an experiment'}; latest is {latest}"
    )
    if published["published"]:
        alert_gini(cfg.name, published["version"], evaluation, latest)
        apply_retention(cfg, logger.info, logger.warning, by=f"{by} (retention)")
    label_run("published" if published["published"] else "identical")
    return {
        "name": cfg.name,
        "version": published["version"],
        "trained": True,
        "published": published["published"],
        "channel": channel,
        "latest": latest,
        "location": published["location"],
        "bytes_per_token": evaluation["bytes_per_token"],
        "counted_shards": len(counted) - cached,
        "cached_shards": cached,
    }


def alert_gini(name: str, version: str, evaluation: dict, latest: str | None) -> None:
    """Warn, and alert the deployment's webhook, when the version's Gini coefficient on the dev set
    rose above the promoted version's by more than evaluation.gini_margin. The version stays
    published: whether it serves is the team's call (bpe promote, bpe rollback)."""
    message = alert_message(name, version, evaluation.get("languages") or {})
    if message is None:
        return
    get_run_logger().warning(message)
    ids = run_ids()
    send_gini_alert(
        name,
        version,
        message,
        flow_run_id=ids.get("flow_run_id", ""),
        flow_run_name=ids.get("flow_run_name", ""),
        latest=latest or "",
    )


def label_run(label: str) -> None:
    """Tag this flow run with what it did (`published`, `no-new-data`, `identical`), so that the
    runs list tells a run that trained from one that found nothing new, both "Completed"."""
    try:
        from prefect import get_client

        run = get_run_context().flow_run
        with get_client(sync_client=True) as client:
            client.update_flow_run(run.id, tags=sorted({*run.tags, label}))
    except Exception:  # a label is a convenience, never a reason to fail the run
        pass


def run_ids() -> dict:
    try:
        run = get_run_context().flow_run
        return {"flow_run_id": str(run.id), "flow_run_name": run.name, "deployment_id": str(run.deployment_id or "")}
    except Exception:
        return {}


if __name__ == "__main__":
    import sys

    print(train_bpe(*sys.argv[1:2]))

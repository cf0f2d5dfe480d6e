"""Register the `train-bpe` deployments on a Prefect server: one per configuration in `conf/`, on a
process work pool, each with the cron schedule its configuration gives.

    bpe deploy                        # or: python -m flows.deploy
    prefect worker start --pool bpe   # runs the flow runs (as the docker-compose prefect-worker does)
    prefect deployment run 'train-bpe/demo' --param vocab_size=8192

Each deployment gets, when its configuration has `alerts: {webhook: URL}` (or BPE_ALERT_WEBHOOK is
set), a Prefect automation that POSTs a message to that webhook when one of its runs fails or
crashes (`bpe.pipeline.alerts`); deploying again updates it in place.

Deployments are declared here in Python rather than in a static prefect.yaml because their
schedules and parameters come from conf/*.yaml, the single place a tokenizer is described; they
target a process work pool rather than `flow.serve` so that the same topology runs everywhere: a
server, any number of workers, and a Dask cluster the flow runs point at.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
POOL = "bpe"


def ensure_pool(name: str = POOL) -> None:
    """Create the process work pool unless it exists."""
    from prefect import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists

    with get_client(sync_client=True) as client:
        try:
            client.create_work_pool(WorkPoolCreate(name=name, type="process"))
        except ObjectAlreadyExists:
            pass


def require_server() -> None:
    """Refuse to deploy without PREFECT_API_URL: Prefect would register the deployments on a
    temporary server of this process, which vanishes when it exits."""
    from prefect.settings import PREFECT_API_URL

    from bpe.errors import SettingsError

    if not PREFECT_API_URL.value():
        raise SettingsError(
            "bpe deploy: PREFECT_API_URL is not set; point it at a Prefect server "
            "(e.g. http://127.0.0.1:4200/api, as `bpe cluster up` prints)"
        )


def deploy_all(
    conf_dir: Path | None = None, pool: str = POOL, source: Path = REPO, say: Callable[[str], None] = print
) -> list[str]:
    """Register a deployment per configuration file (default: `conf/` beside `flows/`), with its
    failure alert; returns one line per deployment: `train-bpe/<name> (schedule '<cron>', active)`,
    or `(schedule '<cron>', paused: <data> not found)`, then `; alerts to <scheme://host/...>` when
    it has alerts. Lines that concern every deployment (no alerts configured anywhere) go to `say`.

    The source tree is where this file's folder sits, so the same code serves a checkout (`flows/`,
    `conf/`) and an installed package (`bpe/flows`, `bpe/conf`). A configuration whose data is not
    there yet is registered paused, rather than failing every scheduled run: the deployment, not its
    schedule (which `prefect deployment schedule resume` would find already active); deploying again
    once the data is in place registers it active. Every configuration (and BPE_ALERT_WEBHOOK) is
    validated before anything is registered, as a run validates it before reading any data: a
    configuration every run would refuse is not deployed."""
    from prefect import get_client
    from prefect.client.schemas.actions import DeploymentUpdate
    from prefect.utilities.callables import parameter_schema

    from bpe.flows.train_bpe import train_bpe
    from bpe.pipeline.alerts import ENV, ensure_alert, remove_alert, webhook_for
    from bpe.pipeline.config import load_config, redact_url
    from bpe.pipeline.multilingual import language_plan
    from bpe.pipeline.parameters import run_form

    paths = sorted(Path(conf_dir or source / "conf").glob("*.yaml"))
    configs = [(path, load_config(path)) for path in paths]
    for _, cfg in configs:
        language_plan(cfg, None)  # what a run refuses before reading its data, refused here (load_config: the rest)
    webhooks = {cfg.name: webhook_for(cfg) for _, cfg in configs}
    say(f"registering flows/train_bpe.py:train_bpe from {source} on work pool {pool}")
    ensure_pool(pool)
    if configs and not any(webhooks.values()):
        say(f"alerts: none configured (set `alerts: {{webhook: URL}}` in a configuration, or {ENV})")
    flow = train_bpe.from_source(source=str(source), entrypoint="flows/train_bpe.py:train_bpe")
    flow_schema = parameter_schema(flow).model_dump(exclude_unset=True)
    lines = []
    with get_client(sync_client=True) as client:
        for path, cfg in configs:
            missing = [] if cfg.demo_corpus else missing_data(cfg.input_paths(), source)  # a demo run writes its data
            # to_deployment + apply rather than flow.deploy(): the same registration without the
            # console output flow.deploy() prints for every deployment (a "use .serve" notice for
            # process work pools, a success banner and a table); this command reports instead.
            deployment = flow.to_deployment(
                name=cfg.name,
                cron=cfg.schedule,
                paused=bool(missing),
                concurrency_limit=1,  # one run per tokenizer at a time: an overlapping run waits its turn
                job_variables={"env": result_storage_env(cfg)},
                parameters={"config": _relative_to(path, source)},
                description=f"Train the {cfg.name} tokenizer from {path.name}; retrains on its schedule when data "
                "changed.",
                tags=["bpe", cfg.name],
            )
            deployment_id = deployment.apply(work_pool_name=pool)
            # the run form (Prefect's UI): each setting once, its configuration's value shown, not sent
            form = run_form(flow_schema, cfg, _relative_to(path, source))
            client.update_deployment(deployment_id, DeploymentUpdate(parameter_openapi_schema=form))
            full_name = f"train-bpe/{cfg.name}"
            schedule = f"schedule {cfg.schedule!r}" if cfg.schedule else "no schedule"
            state = f"paused: {', '.join(missing)} not found" if missing else "active"
            line = f"{full_name} ({schedule}, {state}"
            if webhooks[cfg.name]:
                ensure_alert(client, deployment_id, full_name, cfg.name, webhooks[cfg.name])
                line += f"; alerts to {redact_url(webhooks[cfg.name])}"
            else:
                remove_alert(client, full_name, cfg.name)  # its configuration no longer asks for alerts
            lines.append(line + ")")
    return lines


def result_storage_env(cfg) -> dict[str, str]:
    """Where Prefect persists what it keeps of this tokenizer's flow runs (a failed run's exception):
    beside its count cache when that is object storage (a RemoteFileSystem block), so that no run
    leaves state on a worker's local disk. Nothing to set when the cache is a local path."""
    import re

    from prefect.filesystems import RemoteFileSystem

    from bpe import storage

    if not storage.is_remote(cfg.counts_cache):
        return {}
    block = "bpe-results-" + re.sub(r"[^a-z0-9-]", "-", cfg.name.lower())
    RemoteFileSystem(basepath=storage.join(cfg.counts_cache, "prefect-results")).save(block, overwrite=True)
    return {"PREFECT_RESULTS_DEFAULT_STORAGE_BLOCK": f"remote-file-system/{block}"}


def missing_data(data: list[str], source: Path) -> list[str]:
    """The data paths of a configuration that hold nothing yet (relative ones are relative to the
    source directory, the flow runs' working directory); URLs are asked of their store."""
    import glob

    from bpe import storage

    missing = []
    for spec in data:
        if storage.is_remote(spec):
            found = storage.exists(spec)
        else:
            path = Path(storage.local_path(spec))
            path = path if path.is_absolute() else Path(source) / path
            found = bool(glob.glob(str(path))) if glob.has_magic(str(path)) else path.exists()
        if not found:
            missing.append(spec)
    return missing


def _relative_to(path: Path, source: Path) -> str:
    """The config's path as the flow run sees it: relative to the source directory when inside it."""
    path, source = Path(path).resolve(), Path(source).resolve()
    return str(path.relative_to(source)) if path.is_relative_to(source) else str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conf", type=Path, default=REPO / "conf", help="directory of tokenizer configurations")
    parser.add_argument("--pool", default=POOL, help="process work pool (created if missing)")
    args = parser.parse_args(argv)
    from bpe.errors import BpeError

    try:
        require_server()
        for name in deploy_all(args.conf, args.pool):
            print(f"deployed {name} on work pool {args.pool}")
    except BpeError as exc:  # a bad configuration or webhook: one line, as `bpe deploy` says it
        print(f"deploy: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The pipeline's fixtures: the session's Prefect server, and the Prefect process worker that runs
the train-bpe deployments on the session's Dask cluster (`dask_services`, which the Dask engine's
tests share), one set for all the pytest-xdist workers (`tests.conftest.shared_by_workers`); the
deployment names each module claims; configurations over shards of their own, deployed with
`bpe deploy`; the rows a run trains on; a filesystem that runs out of space."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from tests.conftest import shared_by_workers, write_parquet

REPO = Path(__file__).resolve().parents[2]
BPE = str(Path(sys.executable).parent / "bpe")  # the `bpe` command of this environment


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of 1 MB mounted for the test (skips where mounting is not allowed), and a way to
    fill it to all but `pages` pages of 4 KB: a real full disk, without filling the machine's."""
    point = tmp_path / "small-disk"
    point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(point)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")

    def fill(pages: int = 0) -> Path:
        filler = point / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:  # full
            os.ftruncate(fd, max(os.fstat(fd).st_size - pages * 4096, 0))
        finally:
            os.close(fd)
        return filler

    try:
        yield point, fill
    finally:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory) -> Iterator[dict]:
    """One real Prefect server (`prefect server start`, SQLite in a PREFECT_HOME of its own, on a
    free port of 127.0.0.1) for every module that runs flows against a server (one for all the
    pytest-xdist workers); stopped at the end of the session, after the workers that use it. Sets
    no environment variable: clients get the API URL from what this yields. Modules keep apart by
    their own work pools, deployment names, artifact roots and client PREFECT_HOMEs."""
    pytest.importorskip("prefect")

    def start(root: Path) -> dict:
        from bpe.pipeline.services import free_port, start_prefect_server

        with pytest.MonkeyPatch.context() as patch:
            # A run that finds its deployment's concurrency slot taken retries after this many
            # seconds (Prefect's default is 30): the same queueing, without half a minute of idling.
            patch.setenv("PREFECT_SERVER_DEPLOYMENTS_CONCURRENCY_SLOT_WAIT_SECONDS", "2")
            server = start_prefect_server(root / "home", free_port(), log=root / "server.log", ui=False)
        return {
            "url": server.url,
            "api": f"{server.url}/api",
            "log": str(server.log),
            "stop": [[server.pid, server.stop_signal]],
        }

    with shared_by_workers(tmp_path_factory, "prefect-server", start) as record:
        yield {**record, "log": Path(record["log"])}


PIPELINE_POOL = "bpe-test"


@pytest.fixture(scope="session")
def pipeline_services(request, tmp_path_factory) -> Iterator[dict]:
    """The session's Dask cluster (`dask_services`) and a Prefect process worker on the pool
    `bpe-test`, all on 127.0.0.1 against the session's Prefect server (one set for all the
    pytest-xdist workers): shared by the modules that deploy the train-bpe flow with local artifact
    roots (`tests.pipeline.test_pipeline`'s `services` gives each module a directory of its own). The Prefect
    server, asked for once the Dask processes are started, starts while they do (it takes longer).
    Stopped at the end of the session: the Prefect worker, the server, then the Dask cluster."""
    dask = request.getfixturevalue("dask_services")
    api = request.getfixturevalue("prefect_server")["api"]
    scheduler = dask["ready"]()

    def start(root: Path) -> dict:
        from bpe.pipeline.services import prefect_env, start_prefect_worker

        logs = root / "logs"
        logs.mkdir()
        home = root / "prefect-home"  # the clients' and flow runs' PREFECT_HOME (the server has its own)
        env = {**prefect_env(api, home), "PREFECT_WORKER_QUERY_SECONDS": "1"}
        worker = start_prefect_worker(api, home, PIPELINE_POOL, log=logs / "worker.log", env=env)
        return {"env": env, "scheduler": scheduler, "logs": str(logs), "stop": [[worker.pid, worker.stop_signal]]}

    with shared_by_workers(tmp_path_factory, "pipeline-services", start) as record:
        yield {**record, "logs": Path(record["logs"])}


_deployment_names: dict[str, str] = {}


def claim_deployment_names(owner: str, *names: str) -> None:
    """Record that `owner` (a test module) deploys train-bpe/<name> on the session's Prefect
    server; a name another module already uses fails the test, so runs, artifacts (keyed
    `bpe-<name>`) and automations never mix between modules."""
    for name in names:
        assert _deployment_names.setdefault(name, owner) == owner, (
            f"train-bpe/{name} is deployed by {_deployment_names[name]} too: choose another name"
        )


def pipeline_config(root: Path, scheduler: str, name: str, **settings) -> dict:
    """Tokenizer `name`'s configuration on the Dask cluster `scheduler`, its data and versions under ROOT/<name>."""
    return {
        "name": name,
        "data": str(root / name / "shards"),
        "artifact_root": str(root / name / "artifacts"),
        "dask_scheduler": scheduler,
        **settings,
    }


def write_config(conf: Path, cfg: dict, shards: Iterable[list[str]] = ()) -> dict:
    """Write CONF/<name>.yaml and a Parquet shard per list of rows, for `bpe deploy`; returns cfg with their paths."""
    import yaml

    data = Path(cfg["data"])
    for i, rows in enumerate(shards):
        write_parquet(data / f"part-{i:05d}.parquet", rows)
    path = conf / f"{cfg['name']}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return {**cfg, "data_dir": data, "conf": path}


def deploy(services: dict, conf: Path, pool: str = PIPELINE_POOL, **env: str) -> subprocess.CompletedProcess:
    """`bpe deploy --conf CONF --pool POOL` as an operator types it, with no alerts webhook but `env`'s."""
    from bpe.pipeline.alerts import ENV

    environ = {k: v for k, v in os.environ.items() if k != ENV}
    return subprocess.run(
        [BPE, "deploy", "--conf", str(conf), "--pool", pool],
        env={**environ, **services["env"], **env},
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=180,
    )


def trained_rows(rows: list[str], holdout_fraction: float = 0.05) -> list[str]:
    """The rows the pipeline trains on: those its held-out hash does not set aside."""
    import pyarrow as pa

    from bpe.training.counting import holdout_mask

    texts = pa.array(rows, pa.large_string())
    return texts.filter(pa.array(~holdout_mask(texts, holdout_fraction))).to_pylist()


def kept_rows(shards: list[Path], holdout_fraction: float = 0.05) -> list[str]:
    """The rows of the Parquet `shards` that the pipeline trains on (`trained_rows`)."""
    import pyarrow.parquet as pq

    rows = [text for shard in shards for text in pq.read_table(shard).column("text").to_pylist()]
    return trained_rows(rows, holdout_fraction)

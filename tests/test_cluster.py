"""`bpe cluster up|status|down`: the compose topology as local processes, used end to end."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from bpe.pipeline.cluster import _alive
from bpe.pipeline.services import free_port, run_deployment, wait_for_flow_run
from bpe.pipeline.store import VersionStore
from tests.conftest import CORPUS, stdlib_paragraphs, write_parquet

pytestmark = pytest.mark.services  # starts real services: the slow tier

BPE = str(Path(sys.executable).parent / "bpe")


def bpe(*args: str, cwd: Path, env: dict | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [BPE, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )


def corpus_part(data: Path) -> str:
    """Part of a real corpus: the smallest shared shard's first 8,000 rows, or the demo prose."""
    if (CORPUS / "part-00005.parquet").exists():
        rows = pq.read_table(CORPUS / "part-00005.parquet").column("text").to_pylist()[:8000]
        source = "shared corpus"
    else:
        rows, source = stdlib_paragraphs()[:4000], "standard library docstrings"
    write_parquet(data / "part-00000.parquet", rows[: len(rows) // 2])
    write_parquet(data / "part-00001.parquet", rows[len(rows) // 2 :])
    return source


def test_cluster_up_runs_a_deployment_and_down_leaves_nothing(tmp_path):
    corpus_part(tmp_path / "data")
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "part.yaml").write_text(
        yaml.safe_dump(
            {
                "name": "part",
                "data": str(tmp_path / "data"),
                "vocab_size": 2000,
                "pattern": "cl100k",
                "artifact_root": str(tmp_path / "artifacts"),
                "holdout_fraction": 0.02,
                "schedule": "0 5 * * *",
            }
        )
    )
    ports = [free_port() for _ in range(3)]
    state = tmp_path / "state"
    started = time.monotonic()
    options = ["--prefect-port", str(ports[0]), "--dask-port", str(ports[1]), "--dashboard-port", str(ports[2])]
    up = bpe("cluster", "up", "--workers", "2", *options, "--conf", str(conf), "--state-dir", str(state), cwd=tmp_path)
    try:
        assert up.returncode == 0, up.stderr[-3000:]
        assert f"Prefect UI      http://127.0.0.1:{ports[0]}" in up.stdout
        assert f"Dask scheduler  tls://127.0.0.1:{ports[1]}" in up.stdout
        stop = re.search(r"stop: (bpe cluster down.*)$", up.stdout, re.MULTILINE).group(1)
        assert shlex.split(stop) == ["bpe", "cluster", "down", "--state-dir", str(state)]  # what stops this one
        recorded = json.loads((state / "cluster.json").read_text())
        names = [p["name"] for p in recorded["processes"]]
        assert names == ["prefect-server", "dask-scheduler", "dask-worker", "dask-worker", "prefect-worker (bpe)"]
        status = bpe("cluster", "status", "--state-dir", str(state), cwd=tmp_path)
        assert status.returncode == 0 and status.stdout.count("running") == 5
        with urllib.request.urlopen(f"http://127.0.0.1:{ports[2]}/status", timeout=10) as reply:
            page = reply.read().decode()
        assert "Dask needs" not in page and "bokeh" in page.lower()  # the dashboard, not "install bokeh"

        assert_locked_down(recorded, ports, state)
        env = {
            "PREFECT_API_URL": f"http://127.0.0.1:{ports[0]}/api",
            "PREFECT_HOME": str(state / "prefect"),
            "PREFECT_API_AUTH_STRING": (state / "prefect-auth").read_text().strip(),
        }
        run = wait_for_flow_run(
            env["PREFECT_API_URL"], run_deployment(env, "train-bpe/part"), auth=env["PREFECT_API_AUTH_STRING"]
        )
        state_name = run.state.type.value
        elapsed = time.monotonic() - started
        assert state_name == "COMPLETED", (state / "logs" / "prefect-worker.log").read_text()[-4000:]
        store = VersionStore(str(tmp_path / "artifacts"), "part")
        assert store.latest() == "v0001"
        manifest = store.manifest("v0001")
        assert manifest["engine"]["engine"] == "dask"
        assert manifest["engine"]["scheduler"] == f"tls://127.0.0.1:{ports[1]}" and manifest["engine"]["workers"] == 2
        assert not manifest["engine"]["cluster_started_here"]
        print(f"bpe cluster up to a completed deployment run: {elapsed:.1f} s")
    finally:
        down = bpe("cluster", "down", "--state-dir", str(state), cwd=tmp_path)
    assert down.returncode == 0, down.stdout + down.stderr
    pids = [p["pid"] for p in recorded["processes"]]
    assert not [pid for pid in pids if _alive(pid)]
    assert not (state / "cluster.json").exists()
    left = subprocess.run(["pgrep", "-f", f"127.0.0.1:{ports[1]}|--port {ports[0]}"], capture_output=True, text=True)
    assert left.stdout.strip() == "", f"processes left behind: {left.stdout}"


def assert_locked_down(recorded: dict, ports: list[int], state: Path) -> None:
    """What another local user meets: nothing listening beyond 127.0.0.1, a Prefect API that wants
    the auth string, a Dask scheduler that wants the cluster's certificate, secrets for the owner only."""
    import urllib.error
    import urllib.request

    import distributed
    import psutil

    processes = [psutil.Process(p["pid"]) for p in recorded["processes"]]
    processes += [child for p in list(processes) for child in p.children(recursive=True)]
    pids = {p.pid for p in processes}
    listening = [c for c in psutil.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN and c.pid in pids]
    assert listening and all(c.laddr.ip == "127.0.0.1" for c in listening), listening

    request = urllib.request.Request(
        f"http://127.0.0.1:{ports[0]}/api/flows/filter",
        data=b"{}",
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 401

    with pytest.raises((OSError, TimeoutError)):
        distributed.Client(f"tcp://127.0.0.1:{ports[1]}", timeout="3s")
    for secret in (state / "prefect-auth", state / "tls" / "cluster-key.pem"):
        assert secret.stat().st_mode & 0o077 == 0, f"{secret} is readable by others"


def test_ports_in_use_give_a_clear_error(tmp_path):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        done = bpe("cluster", "up", "--prefect-port", str(port), "--state-dir", str(tmp_path / "s"), cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"bpe: error: port {port} on 127.0.0.1 is in use (Prefect server); choose another with --prefect-port"
    )
    assert not (tmp_path / "s" / "cluster.json").exists()


def test_status_and_down_without_a_cluster_say_so(tmp_path):
    done = bpe("cluster", "status", "--state-dir", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 1 and "no cluster was started from here" in done.stderr


@pytest.fixture(autouse=True)
def _no_stray_prefect_settings(monkeypatch):
    for key in list(os.environ):
        if key.startswith("PREFECT_"):
            monkeypatch.delenv(key)

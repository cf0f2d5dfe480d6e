"""`bpe cluster up|env|status|down`: the compose topology as local processes, used end to end."""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from bpe import Tokenizer
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


def clean_env() -> dict:
    """This environment without Prefect's settings (a test server's) nor Dask's TLS ones: a shell
    that has not been pointed at any cluster yet."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "DASK_DISTRIBUTED__COMM__"))}


def run(*args: str, cwd: Path, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """`bpe cluster up` on free ports with two configurations: one over a small corpus, one whose
    data is not there yet. Stopped at the end if a test did not stop it."""
    root = tmp_path_factory.mktemp("cluster")
    corpus_part(root / "data")
    conf = root / "conf"
    conf.mkdir()
    common = {"vocab_size": 2000, "pattern": "cl100k", "holdout_fraction": 0.02, "schedule": "0 5 * * *"}
    for name, data in (("part", root / "data"), ("waiting", root / "not-yet")):
        config = {"name": name, "data": str(data), "artifact_root": str(root / "artifacts"), **common}
        (conf / f"{name}.yaml").write_text(yaml.safe_dump(config))
    ports = [free_port() for _ in range(3)]
    state = root / "state"
    options = ["--prefect-port", str(ports[0]), "--dask-port", str(ports[1]), "--dashboard-port", str(ports[2])]
    started = time.monotonic()
    args = ["cluster", "up", "--workers", "2", *options, "--conf", str(conf), "--state-dir", str(state)]
    up = run(BPE, *args, cwd=root, env=clean_env())
    # What is under the state directory as `up` leaves it (flow runs add files later).
    modes = {path: path.stat().st_mode for path in [state, *state.rglob("*")]} if state.exists() else {}
    try:
        assert up.returncode == 0, up.stdout + up.stderr[-3000:]
        yield {"root": root, "state": state, "ports": ports, "up": up, "modes": modes, "started": started}
    finally:
        if (state / "cluster.json").exists():
            run(BPE, "cluster", "down", "--state-dir", str(state), cwd=root, env=clean_env())


def test_cluster_up_runs_a_deployment(cluster):
    root, state, ports, up = cluster["root"], cluster["state"], cluster["ports"], cluster["up"]
    assert f"Prefect UI      http://127.0.0.1:{ports[0]}" in up.stdout
    assert f"Dask scheduler  tls://127.0.0.1:{ports[1]}" in up.stdout
    stop = re.search(r"stop: (bpe cluster down.*)$", up.stdout, re.MULTILINE).group(1)
    assert shlex.split(stop) == ["bpe", "cluster", "down", "--state-dir", str(state)]  # what stops this one
    recorded = json.loads((state / "cluster.json").read_text())
    names = [p["name"] for p in recorded["processes"]]
    assert names == ["prefect-server", "dask-scheduler", "dask-worker", "dask-worker", "prefect-worker (bpe)"]
    status = bpe("cluster", "status", "--state-dir", str(state), cwd=root)
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
    run_ = wait_for_flow_run(
        env["PREFECT_API_URL"], run_deployment(env, "train-bpe/part"), auth=env["PREFECT_API_AUTH_STRING"]
    )
    elapsed = time.monotonic() - cluster["started"]
    assert run_.state.type.value == "COMPLETED", (state / "logs" / "prefect-worker.log").read_text()[-4000:]
    store = VersionStore(str(root / "artifacts"), "part")
    assert store.latest() == "v0001"
    manifest = store.manifest("v0001")
    assert manifest["engine"]["engine"] == "dask"
    assert manifest["engine"]["scheduler"] == f"tls://127.0.0.1:{ports[1]}" and manifest["engine"]["workers"] == 2
    assert not manifest["engine"]["cluster_started_here"]
    print(f"bpe cluster up to a completed deployment run: {elapsed:.1f} s")


def test_cluster_up_says_what_registering_the_deployments_said(cluster):
    """`bpe deploy`'s own lines, the paused deployment with the reason, are in `up`'s output."""
    lines = cluster["up"].stdout.splitlines()
    assert "deployed train-bpe/part (schedule '0 5 * * *', active) on work pool bpe" in lines
    paused = f"deployed train-bpe/waiting (schedule '0 5 * * *', paused: {cluster['root']}/not-yet not found)"
    assert f"{paused} on work pool bpe" in lines


def test_the_state_directory_is_readable_by_its_owner_only(cluster):
    """The README's trust model: the state directory (keys, auth string, the Prefect database with
    every run's parameters, logs) is its owner's; nothing under it as `up` leaves it is open to others."""
    state, modes = cluster["state"], cluster["modes"]
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert state / "prefect" / "prefect.db" in modes and state / "logs" / "prefect-server.log" in modes
    open_to_others = {str(p.relative_to(state.parent)): oct(stat.S_IMODE(m)) for p, m in modes.items() if m & 0o077}
    assert not open_to_others


def test_a_shell_given_cluster_env_trains_on_the_cluster_with_the_local_engines_merges(cluster):
    """The lines `up` prints as the next step, run as written: `eval "$(bpe cluster env ...)"`,
    then `bpe train --engine dask --scheduler tls://...` gives the local engine's merges."""
    root, state, up = cluster["root"], cluster["state"], cluster["up"]
    eval_line = next(line.split("#")[0].strip() for line in up.stdout.splitlines() if "bpe cluster env" in line)
    assert eval_line == f'eval "$(bpe cluster env --state-dir {shlex.quote(str(state))})"'
    scheduler = re.search(r"--scheduler (tls://\S+)", up.stdout).group(1)
    data = str(root / "data")
    shell = clean_env() | {"PATH": f"{Path(BPE).parent}{os.pathsep}{os.environ['PATH']}"}
    out = shlex.quote(str(root / "on-cluster"))
    train = f"bpe train {shlex.quote(data)} --vocab-size 600 --quiet --engine dask --scheduler {scheduler} --out {out}"
    done = run("bash", "-c", f"{eval_line} && {train}", cwd=root, env=shell)
    assert done.returncode == 0, done.stderr[-3000:]
    local = run(BPE, "train", data, "--vocab-size", "600", "--quiet", "--out", str(root / "local"), cwd=root, env=shell)
    assert local.returncode == 0, local.stderr[-3000:]
    on_cluster, here = Tokenizer.load(root / "on-cluster"), Tokenizer.load(root / "local")
    assert len(here.merges) == 600 - 256 and on_cluster.merges == here.merges
    manifest = json.loads((root / "on-cluster" / "manifest.json").read_text())
    assert manifest["engine"]["scheduler"] == scheduler and not manifest["engine"]["cluster_started_here"]

    echo = 'echo "$PREFECT_API_URL $PREFECT_API_AUTH_STRING"'
    exported = run("bash", "-c", f"{eval_line} && {echo}", cwd=root, env=shell)
    auth = (state / "prefect-auth").read_text().strip()
    assert exported.stdout.split() == [f"http://127.0.0.1:{cluster['ports'][0]}/api", auth]


def test_a_tls_scheduler_without_its_settings_is_one_line(cluster):
    root, ports = cluster["root"], cluster["ports"]
    scheduler = f"tls://127.0.0.1:{ports[1]}"
    args = ["train", str(root / "data"), "--vocab-size", "600", "--engine", "dask", "--scheduler", scheduler]
    done = run(BPE, *args, "--out", str(root / "refused"), cwd=root, env=clean_env())
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"bpe: error: --scheduler {scheduler} speaks TLS, and Dask's TLS client settings are not set "
        "(DASK_DISTRIBUTED__COMM__TLS__CA_FILE, __CLIENT__CERT, __CLIENT__KEY); for the cluster of "
        '`bpe cluster up`, run `eval "$(bpe cluster env)"` in this shell first'
    )
    assert not (root / "refused").exists()


def test_down_says_stopped_once_every_process_is_gone(cluster):
    """`bpe cluster down` answers once every process it started, and every process of their
    groups (a Dask nanny's worker), has exited and left the process table (`ps` shows none)."""
    import psutil

    root, state, ports = cluster["root"], cluster["state"], cluster["ports"]
    recorded = json.loads((state / "cluster.json").read_text())
    pids = [p["pid"] for p in recorded["processes"]]
    groups = {pid: [q.pid for q in psutil.process_iter() if _pgid(q.pid) == pid] for pid in pids}
    assert len(groups[pids[2]]) > 1  # a Dask worker: nanny and worker process
    down = bpe("cluster", "down", "--state-dir", str(state), cwd=root)
    left = [pid for pid in (p for group in groups.values() for p in group) if psutil.pid_exists(pid)]
    assert down.returncode == 0, down.stdout + down.stderr
    assert down.stdout.strip() == "stopped 5 process(es)"
    assert not left, [(pid, psutil.Process(pid).status()) for pid in left if psutil.pid_exists(pid)]
    assert not (state / "cluster.json").exists()
    found = subprocess.run(["pgrep", "-f", f"127.0.0.1:{ports[1]}|--port {ports[0]}"], capture_output=True, text=True)
    assert found.stdout.strip() == "", f"processes left behind: {found.stdout}"


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


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

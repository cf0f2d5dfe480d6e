"""`bpe cluster up|status|down`: the docker-compose topology as local processes on 127.0.0.1.

`up` starts a Prefect server (SQLite in the state directory, or PostgreSQL with --database-url), a
Dask scheduler, N Dask workers and a Prefect worker on the `bpe` process work pool whose flow runs
use that scheduler; registers the deployments; prints the URLs; and records every PID in
`<state>/cluster.json`. `status` shows them; `down` stops exactly those processes, workers first.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from bpe.errors import SettingsError
from bpe.pipeline.security import make_auth_string, make_certificates
from bpe.pipeline.services import (
    Service,
    port_in_use,
    prefect_env,
    start_dask_scheduler,
    start_dask_worker,
    start_prefect_server,
    start_prefect_worker,
    stop,
)

STATE_FILE = "cluster.json"
AUTH_FILE = "prefect-auth"  # the Prefect API's auth string, readable by its owner only


def up(
    state_dir: Path,
    workers: int = 2,
    prefect_port: int = 4200,
    dask_port: int = 8786,
    dashboard_port: int = 8787,
    database_url: str | None = None,
    conf_dir: Path | None = None,
    pool: str = "bpe",
    log=print,
) -> dict:
    """Start the topology; returns the state written to `<state_dir>/cluster.json`."""
    state_dir = Path(state_dir).absolute()
    state_file = state_dir / STATE_FILE
    if state_file.exists() and any(_alive(p["pid"]) for p in json.loads(state_file.read_text())["processes"]):
        raise SettingsError(f"{state_file}: a cluster started from here is running; `bpe cluster down` first")
    for port, what, parameter in (
        (prefect_port, "Prefect server", "prefect_port"),
        (dask_port, "Dask scheduler", "dask_port"),
        (dashboard_port, "Dask dashboard", "dashboard_port"),
    ):
        if port_in_use(port):
            raise SettingsError(
                f"port {port} on 127.0.0.1 is in use ({what}); choose another with {parameter}", parameter=parameter
            )
    logs = state_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    started: list[Service] = []
    state = {"state_dir": str(state_dir), "processes": [], "urls": {}}

    def record(service: Service) -> None:
        started.append(service)
        state["processes"].append(
            {"name": service.name, "pid": service.pid, "log": str(service.log), "stop_signal": service.stop_signal}
        )
        state_file.write_text(json.dumps(state, indent=2))  # written as we go: `down` can stop a partial start

    tls = make_certificates(state_dir / "tls")
    auth = make_auth_string(state_dir / AUTH_FILE)
    try:
        server = start_prefect_server(
            state_dir / "prefect", prefect_port, database_url, logs / "prefect-server.log", auth=auth
        )
        record(server)
        scheduler = start_dask_scheduler(dask_port, dashboard_port, logs / "dask-scheduler.log", tls=tls)
        record(scheduler)
        for i in range(workers):
            record(start_dask_worker(scheduler.url, logs / f"dask-worker-{i}.log", tls=tls))
        api = f"{server.url}/api"
        env = {
            **prefect_env(api, state_dir / "prefect", auth),
            **tls.dask_environment(),
            "BPE_DASK_SCHEDULER": scheduler.url,
        }
        _deploy(env, conf_dir, pool)
        record(start_prefect_worker(api, state_dir / "prefect", pool, logs / "prefect-worker.log", env))
    except BaseException:
        for service in reversed(started):
            service.stop()
        state_file.unlink(missing_ok=True)
        raise
    state["urls"] = {
        "prefect_ui": server.url,
        "prefect_api": api,
        "dask_scheduler": scheduler.url,
        "dask_dashboard": f"http://127.0.0.1:{dashboard_port}/status",
    }
    state["database"] = "postgresql" if database_url else f"sqlite in {state_dir / 'prefect'}"
    state["client_env"] = {"PREFECT_API_AUTH_STRING": f"$(cat {state_dir / AUTH_FILE})", **tls.dask_environment()}
    state_file.write_text(json.dumps(state, indent=2))
    return state


def _deploy(env: dict, conf_dir: Path | None, pool: str) -> None:
    import subprocess
    import sys

    args = [sys.executable, "-m", "bpe.flows.deploy", "--pool", pool]
    if conf_dir:
        args += ["--conf", str(conf_dir)]
    done = subprocess.run(args, env={**os.environ, **env}, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"registering the deployments failed:\n{done.stderr[-2000:]}")


def status(state_dir: Path) -> dict:
    """The recorded processes with whether each is alive."""
    state = _read(state_dir)
    for p in state["processes"]:
        p["alive"] = _alive(p["pid"])
    return state


def down(state_dir: Path, timeout: float = 15) -> list[dict]:
    """Stop every recorded process, the last started first (the Prefect worker before the server)."""
    state = _read(state_dir)
    stopped = []
    for p in reversed(state["processes"]):
        if _alive(p["pid"]):
            stop(p["pid"], timeout, p.get("stop_signal", signal.SIGINT))
        stopped.append({**p, "alive": _alive(p["pid"])})
    (Path(state_dir) / STATE_FILE).unlink(missing_ok=True)
    return stopped


def _read(state_dir: Path) -> dict:
    path = Path(state_dir) / STATE_FILE
    if not path.exists():
        raise SettingsError(f"{path}: no cluster was started from here (`bpe cluster up` first)")
    return json.loads(path.read_text())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is gone for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False

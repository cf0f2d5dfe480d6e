"""`bpe cluster up|status|down`: the docker-compose topology as local processes on 127.0.0.1.

`up` starts a Prefect server (SQLite in the state directory, or PostgreSQL with --database-url), a
Dask scheduler, N Dask workers and a Prefect worker on the `bpe` process work pool whose flow runs
use that scheduler; registers the deployments (saying what `bpe deploy` said); prints the URLs; and
records every PID in `<state>/cluster.json`. `env` prints the settings a client needs (`eval "$(bpe
cluster env)"`), `status` shows the processes; `down` stops exactly those, workers first, and waits
for them to exit. The state directory is its owner's only: it holds the cluster's keys, its auth
string and the Prefect database.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import time
from collections.abc import Callable
from pathlib import Path

from bpe.errors import SettingsError
from bpe.pipeline.security import make_auth_string, make_certificates
from bpe.pipeline.services import (
    Service,
    group_running,
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
    log: Callable[[str], None] = print,
) -> dict:
    """Start the topology; returns the state written to `<state_dir>/cluster.json`. `log` gets
    what registering the deployments said, a line at a time."""
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
                lambda s, port=port, what=what, parameter=parameter: (
                    f"port {port} on 127.0.0.1 is in use ({what}); choose another with {s(parameter)}"
                ),
                parameter=parameter,
            )
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    state_dir.chmod(0o700)  # made by an earlier version, or by hand, with the default umask
    logs = state_dir / "logs"
    logs.mkdir(exist_ok=True, mode=0o700)
    started: list[Service] = []
    state = {"state_dir": str(state_dir), "processes": [], "urls": {}}

    def record(service: Service) -> None:
        started.append(service)
        state["processes"].append(
            {"name": service.name, "pid": service.pid, "log": str(service.log), "stop_signal": service.stop_signal}
        )
        _write_state(state_file, state)  # written as we go: `down` can stop a partial start

    tls = make_certificates(state_dir / "tls")
    auth = make_auth_string(state_dir / AUTH_FILE)
    try:
        # The Prefect server takes seconds to answer (a new database is migrated first): the Dask
        # scheduler and workers start meanwhile, the workers all at once.
        server = start_prefect_server(
            state_dir / "prefect", prefect_port, database_url, logs / "prefect-server.log", auth=auth, wait=False
        )
        record(server)
        scheduler = start_dask_scheduler(dask_port, dashboard_port, logs / "dask-scheduler.log", tls=tls)
        record(scheduler)
        dask_workers = []
        for i in range(workers):
            dask_workers.append(start_dask_worker(scheduler.url, logs / f"dask-worker-{i}.log", tls=tls, wait=False))
            record(dask_workers[-1])
        for service in [*dask_workers, server]:
            service.wait_ready()
        api = f"{server.url}/api"
        env = {
            **prefect_env(api, state_dir / "prefect", auth),
            **tls.dask_environment(),
            "BPE_DASK_SCHEDULER": scheduler.url,
        }
        for line in _deploy(env, conf_dir, pool):
            log(line)
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
    state["auth_file"] = str(state_dir / AUTH_FILE)
    # What a client of the cluster needs: the API, and Dask's TLS settings of the client role only.
    # Not the servers' roles nor REQUIRE_ENCRYPTION, which would keep a shell that has them from
    # starting a local cluster (`bpe train --engine dask` without --scheduler).
    state["client_env"] = {
        "PREFECT_API_URL": api,
        **{k: v for k, v in tls.dask_environment().items() if k.endswith(CLIENT_TLS)},
    }
    _write_state(state_file, state)
    _owner_only(state_dir)
    return state


CLIENT_TLS = ("__TLS__CA_FILE", "__TLS__CLIENT__CERT", "__TLS__CLIENT__KEY")


def _write_state(path: Path, state: dict) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(state, indent=2))


def _owner_only(state_dir: Path) -> None:
    """Take group and other permissions off what the cluster keeps in `state_dir` (the Prefect
    server writes its database with an owner-only umask already; this covers what the other
    processes made as they started). Only its own entries: the directory may hold others."""
    for entry in (STATE_FILE, AUTH_FILE, "logs", "tls", "prefect"):
        top = state_dir / entry
        for path in [top, *(top.rglob("*") if top.is_dir() and not top.is_symlink() else ())]:
            if path.exists() and not path.is_symlink():
                path.chmod(path.stat().st_mode & 0o700)


def _deploy(env: dict, conf_dir: Path | None, pool: str) -> list[str]:
    """Register the deployments as `bpe deploy` does, in a process of its own; returns what it
    said (one line per deployment: active, or paused and why). A configuration it refuses is an
    error of one line, as `bpe deploy` gives it."""
    import subprocess
    import sys

    args = [sys.executable, "-m", "bpe.flows.deploy", "--pool", pool]
    if conf_dir:
        args += ["--conf", str(conf_dir)]
    done = subprocess.run(args, env={**os.environ, **env}, capture_output=True, text=True)
    errors = [line for line in done.stderr.splitlines() if line.startswith("deploy: error: ")]
    if done.returncode != 0 and errors:
        raise SettingsError(f"registering the deployments: {errors[-1].removeprefix('deploy: error: ')}")
    if done.returncode != 0:
        raise RuntimeError(f"registering the deployments failed:\n{done.stderr[-2000:]}")
    return [line for line in done.stdout.splitlines() if line.strip()]


def client_env(state_dir: Path) -> list[str]:
    """`export NAME=value` lines (quoted for a POSIX shell) with what a client of the cluster
    needs: the Prefect API's URL and auth string (read from its file when the lines are run, so
    that it is not printed) and Dask's TLS client settings. For `eval "$(bpe cluster env)"`."""
    state = _read(state_dir)
    if "client_env" not in state:
        raise SettingsError(f"{Path(state_dir) / STATE_FILE}: the cluster has not finished starting")
    lines = [f"export {name}={shlex.quote(value)}" for name, value in state["client_env"].items()]
    auth = f'export PREFECT_API_AUTH_STRING="$(cat {shlex.quote(state["auth_file"])})"'
    return lines[:1] + [auth] + lines[1:]


def status(state_dir: Path) -> dict:
    """The recorded processes with whether each is alive."""
    state = _read(state_dir)
    for p in state["processes"]:
        p["alive"] = _alive(p["pid"])
    return state


def down(state_dir: Path, timeout: float = 15, reap_timeout: float = 10) -> list[dict]:
    """Stop every recorded process, the last started first (the Prefect worker before the server),
    each with the rest of its process group; returns them with `alive` True for those still running.
    A process counts as stopped once it has exited, and is waited for (up to `reap_timeout` s for
    all) until it has left the process table: an exited service is collected by whoever adopted it
    when `bpe cluster up` exited, which may take seconds, and `ps` shows it until then."""
    state = _read(state_dir)
    stopped = []
    for p in reversed(state["processes"]):
        alive = False
        if _alive(p["pid"]) or group_running(p["pid"]):
            alive = not stop(p["pid"], timeout, p.get("stop_signal", signal.SIGINT))
        stopped.append({**p, "alive": alive})
    deadline = time.monotonic() + reap_timeout
    while any(_exists(p["pid"]) for p in stopped if not p["alive"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    if not any(p["alive"] for p in stopped):
        (Path(state_dir) / STATE_FILE).unlink(missing_ok=True)
    return stopped


def _exists(pid: int) -> bool:
    """Whether `pid` is in the process table at all, a zombie included."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read(state_dir: Path) -> dict:
    path = Path(state_dir) / STATE_FILE
    if not path.exists():
        raise SettingsError(f"{path}: no cluster was started from here (`bpe cluster up` first)")
    return json.loads(path.read_text())


def _alive(pid: int) -> bool:
    """Whether `pid` runs: in the process table and not a zombie."""
    if not _exists(pid):
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False

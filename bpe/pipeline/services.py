"""Starting and stopping the pipeline's services as local processes on 127.0.0.1: the Prefect
server, Prefect workers, the Dask scheduler and Dask workers.

Each start function returns a `Service` (name, process, URL) once the service answers, or, with
`wait=False`, as soon as its process is started (`Service.wait_ready` then waits for the answer:
services that take seconds to start, such as the Prefect server, start meanwhile); `stop` ends it
by PID, gently first. Workers must stop before the server or scheduler they talk to.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bpe.pipeline.security import TLSFiles

BIN = Path(sys.executable).parent


@dataclass
class Service:
    name: str
    process: subprocess.Popen
    url: str
    log: Path | None = None
    env: dict = field(default_factory=dict)
    stop_signal: int = signal.SIGINT  # what the service shuts down cleanly and quickly on
    answers: Callable[[], bool] | None = field(default=None, repr=False)  # whether it answers yet
    start_timeout: float = 60

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_ready(self) -> Service:
        """Wait until the service answers (stopped, and an error, if its process exits first or
        it does not answer within its start timeout); returns it."""
        if self.answers is not None:
            _wait(self.answers, self.name, self.process, self.start_timeout, self.log)
        return self

    def stop(self, timeout: float = 10) -> None:
        stop(self.process, timeout, self.stop_signal)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        return s.connect_ex((host, port)) == 0


def _command(tool: str) -> str:
    path = BIN / tool
    return str(path) if path.exists() else tool


def _spawn(
    name: str, args: list[str], env: dict, log: Path | None, cwd: Path | None = None, umask: int = -1
) -> subprocess.Popen:
    """Start a service in a process group of its own, its output appended to `log` (a file only its
    owner can read: logs hold URLs, paths and tracebacks); `umask` for what the service creates."""
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600) if log else subprocess.DEVNULL
    try:
        return subprocess.Popen(
            args,
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=cwd,
            umask=umask,
        )
    finally:
        if log:
            os.close(out)


def _wait(check, service: str, process: subprocess.Popen, timeout: float, log: Path | None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(errors="replace")[-1500:] if log and log.exists() else ""
            raise RuntimeError(f"{service} exited with code {process.returncode} while starting\n{tail}")
        if check():
            return
        time.sleep(0.2)
    stop(process)
    raise TimeoutError(f"{service} did not answer within {timeout:.0f} s")


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as reply:
            return reply.status == 200
    except OSError:
        return False


def prefect_env(api_url: str, home: Path, auth: str | None = None) -> dict:
    """The settings a process needs to talk to our server quietly and quickly (with the server's
    auth string, if it has one)."""
    env = {
        "PREFECT_API_URL": api_url,
        "PREFECT_HOME": str(home),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_WORKER_QUERY_SECONDS": os.environ.get("PREFECT_WORKER_QUERY_SECONDS", "2"),
    }
    if auth:
        env["PREFECT_API_AUTH_STRING"] = auth
    return env


def start_prefect_server(
    home: Path,
    port: int,
    database_url: str | None = None,
    log: Path | None = None,
    ui: bool = True,
    timeout: float = 60,
    auth: str | None = None,
    wait: bool = True,
) -> Service:
    """`prefect server start` on 127.0.0.1:port with its own PREFECT_HOME (SQLite there, or
    `database_url`, e.g. PostgreSQL); with `auth`, every API call must carry that auth string.
    What it writes (the database, with every flow run's parameters and logs) only its owner can read.
    It answers after 3-10 s (a new database is migrated first): with `wait=False`, start other
    services meanwhile, then `wait_ready()`."""
    if port_in_use(port):
        raise OSError(f"port {port} on 127.0.0.1 is in use (Prefect server); choose another")
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    url = f"http://127.0.0.1:{port}"
    env = {
        "PREFECT_HOME": str(home),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_UI_ENABLED": "true" if ui else "false",
        "PREFECT_API_URL": f"{url}/api",
    }
    if database_url:
        env["PREFECT_SERVER_DATABASE_CONNECTION_URL"] = database_url
    if auth:
        env["PREFECT_SERVER_API_AUTH_STRING"] = auth
    args = [_command("prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    process = _spawn("prefect server", args, env, log, umask=0o077)
    answers = lambda: _http_ok(f"{url}/api/health")  # noqa: E731
    server = Service("prefect-server", process, url, log, env, answers=answers, start_timeout=timeout)
    return server.wait_ready() if wait else server


def start_prefect_worker(
    api_url: str, home: Path, pool: str, log: Path | None = None, env: dict | None = None, timeout: float = 60
) -> Service:
    """`prefect worker start` on a process work pool; it runs flow runs as subprocesses."""
    worker_env = {**prefect_env(api_url, home), **(env or {})}
    args = [_command("prefect"), "worker", "start", "--pool", pool, "--type", "process"]
    process = _spawn("prefect worker", args, worker_env, log)
    _wait(lambda: _worker_online(log), "prefect worker", process, timeout, log)
    return Service(f"prefect-worker ({pool})", process, api_url, log, worker_env)


def _worker_online(log: Path | None) -> bool:
    return log is None or (log.exists() and b"started!" in log.read_bytes())


def start_dask_scheduler(
    port: int,
    dashboard_port: int | None = None,
    log: Path | None = None,
    timeout: float = 60,
    tls: TLSFiles | None = None,
) -> Service:
    """`dask scheduler` on 127.0.0.1:port (its dashboard on 127.0.0.1 too); over TLS with `tls`."""
    if port_in_use(port):
        raise OSError(f"port {port} on 127.0.0.1 is in use (Dask scheduler); choose another")
    dashboard = f"127.0.0.1:{dashboard_port or 0}"
    args = [
        _command("dask"),
        "scheduler",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dashboard-address",
        dashboard,
        "--no-show",
    ]
    if tls:
        args += ["--protocol", "tls", *tls.dask_options()]
    process = _spawn("dask scheduler", args, tls.dask_environment() if tls else {}, log)
    _wait(lambda: port_in_use(port), "dask scheduler", process, timeout, log)
    url = f"{'tls' if tls else 'tcp'}://127.0.0.1:{port}"
    return Service("dask-scheduler", process, url, log, stop_signal=signal.SIGTERM)


def start_dask_worker(
    scheduler: str,
    log: Path | None = None,
    nthreads: int = 1,
    timeout: float = 60,
    tls: TLSFiles | None = None,
    cwd: Path | None = None,
    env: dict | None = None,
    wait: bool = True,
    memory_limit: str | None = None,
) -> Service:
    """`dask worker` on 127.0.0.1 (nanny, worker and its HTTP server alike); over TLS with `tls`;
    in `cwd` with `env` added to this process's environment (a worker of its own, as on another
    machine: its own working directory and TMPDIR); `memory_limit` as `dask worker` takes it
    ("2GB"; Dask's default: the machine's memory). With `wait=False`, returned once started (see
    `start_dask_workers`); `wait_ready()` waits until it has registered with the scheduler."""
    args = [
        _command("dask"),
        "worker",
        scheduler,
        "--nthreads",
        str(nthreads),
        "--host",
        "127.0.0.1",
        "--dashboard-address",
        "127.0.0.1:0",
        "--preload",
        "bpe.distributed.preload",
    ]
    if memory_limit is not None:
        args += ["--memory-limit", memory_limit]
    if tls:
        args += ["--protocol", "tls", *tls.dask_options()]
    process = _spawn("dask worker", args, {**(tls.dask_environment() if tls else {}), **(env or {})}, log, cwd)
    answers = lambda: _dask_worker_online(log)  # noqa: E731
    worker = Service(
        "dask-worker", process, scheduler, log, stop_signal=signal.SIGTERM, answers=answers, start_timeout=timeout
    )
    return worker.wait_ready() if wait else worker


def start_dask_workers(scheduler: str, logs: list[Path], **options) -> list[Service]:
    """One `dask worker` per log file, all started at once rather than each after the one before
    has registered (a worker takes seconds to import what it runs); returned once all have
    registered. If one fails, all are stopped. `options` as `start_dask_worker`'s."""
    workers: list[Service] = []
    try:
        for log in logs:
            workers.append(start_dask_worker(scheduler, log=log, wait=False, **options))
        for worker in workers:
            worker.wait_ready()
    except BaseException:
        for worker in workers:
            worker.stop()
        raise
    return workers


def _dask_worker_online(log: Path | None) -> bool:
    return log is None or (log.exists() and b"Registered to:" in log.read_bytes())


def run_deployment(env: dict, deployment: str, *args: str) -> uuid.UUID:
    """`prefect deployment run <deployment> [args]`, the command a user types; returns the run's id."""
    command = [_command("prefect"), "deployment", "run", deployment, *args]
    done = subprocess.run(command, env={**os.environ, **env}, capture_output=True, text=True, timeout=120)
    found = re.search(r"UUID: ([0-9a-f-]{36})", done.stdout)
    if done.returncode != 0 or not found:
        raise RuntimeError(f"{' '.join(command[1:])} failed:\n{done.stdout}{done.stderr}")
    return uuid.UUID(found.group(1))


def wait_for_flow_run(
    api_url: str, run_id: uuid.UUID, timeout: float = 300, poll: float = 0.2, auth: str | None = None
):
    """The flow run once its state is final; TimeoutError if it is not within `timeout` seconds.
    `auth` is the server's auth string, if it has one."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    deadline = time.monotonic() + timeout
    settings = {PREFECT_API_URL: api_url, **({PREFECT_API_AUTH_STRING: auth} if auth else {})}
    with temporary_settings(settings):
        with get_client(sync_client=True) as client:
            while True:
                run = client.read_flow_run(run_id)
                if run.state and run.state.is_final():
                    return run
                if time.monotonic() > deadline:
                    raise TimeoutError(f"flow run {run_id} is still {run.state.name if run.state else 'pending'}")
                time.sleep(poll)


def stop(process: subprocess.Popen | int, timeout: float = 10, first: int = signal.SIGINT) -> bool:
    """`first` (SIGINT: what Prefect shuts down cleanly on; a Dask nanny wants SIGTERM), then SIGTERM,
    then SIGKILL, to the process group the service was started in, each time waiting for every
    process of the group (a Dask nanny's worker, a Prefect worker's flow runs) to exit. Returns
    whether they all did."""
    pid = process if isinstance(process, int) else process.pid
    for sig, wait in ((first, timeout), (signal.SIGTERM, timeout / 2), (signal.SIGKILL, timeout / 2)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return True
        except PermissionError:
            os.kill(pid, sig)
        if _wait_gone(process, pid, wait):
            return True
    return False


def _wait_gone(process, pid: int, timeout: float) -> bool:
    """Wait until the process `pid` and the rest of its process group have exited."""
    deadline = time.monotonic() + timeout
    while True:
        if isinstance(process, subprocess.Popen):
            process.poll()  # reap it: it is our child
        if not group_running(pid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def group_running(pgid: int) -> list[int]:
    """The processes of process group `pgid` that are still running (a zombie has exited: it only
    waits for its parent to collect it)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []
    except PermissionError:
        pass
    proc = Path("/proc")
    if not proc.is_dir():  # no /proc (macOS): the group has a process, running or not
        return [pgid]
    running = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # exited meanwhile
            continue
        if int(fields[2]) == pgid and fields[0] not in "ZX":
            running.append(int(entry.name))
    return running


def start_ephemeral_server() -> None:
    """Start Prefect's ephemeral server now (a first flow call starts it, waiting seconds for its
    database), so that it starts while this process does other work. It serves the process's
    flows until the process ends."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        client.api_healthcheck()


def tie_ephemeral_server_to_this_process() -> None:
    """Have Prefect's ephemeral server (the uvicorn child `bpe demo` runs flows against) stopped by
    the kernel when this process dies, even by kill -9, instead of listening on as an orphan.
    Prefect starts it with a plain Popen; this wraps that one call to set the child's parent-death
    signal (Linux; elsewhere nothing changes)."""
    import ctypes
    import functools

    from prefect.server.api import server

    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return
    pr_set_pdeathsig = 1

    def die_with_parent() -> None:
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)

    start = server.SubprocessASGIServer._run_uvicorn_command
    if getattr(start, "tied_to_parent", False):
        return

    @functools.wraps(start)
    def start_tied(self):
        popen = subprocess.Popen
        subprocess.Popen = functools.partial(popen, preexec_fn=die_with_parent)  # for this one call
        try:
            return start(self)
        finally:
            subprocess.Popen = popen

    start_tied.tied_to_parent = True
    server.SubprocessASGIServer._run_uvicorn_command = start_tied

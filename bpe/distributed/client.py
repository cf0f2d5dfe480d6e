"""Connecting to a Dask cluster, or starting a local one, and getting its workers ready.

One client per scheduler address is kept per process (`client_for`), so that the pipeline's tasks
share it; `ready_workers` loads the compiled kernels in every worker before the first real task.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from bpe.engine.interrupts import interrupts_held
from bpe.errors import SchedulerLost, SettingsError, WorkersLost
from bpe.progress import Heartbeat
from bpe.training.counting import use_system_allocator

Log = Callable[[str], None]


@contextmanager
def dask_client(scheduler: str | None = None, workers: int | None = None, client=None, log: Log | None = None):
    """A client to an existing cluster, or to a local cluster of worker processes started here."""
    from distributed import Client, LocalCluster

    if client is not None:
        yield client, {"scheduler": client.scheduler.address, "started_here": False}
        return
    if scheduler:
        _check_tls_settings(scheduler)
        _check_reachable(scheduler)
        try:
            c = Client(scheduler, timeout="30s")
        except OSError as exc:
            raise SchedulerLost(f"cannot reach the Dask scheduler at {scheduler} ({exc})") from None
        try:
            yield c, {"scheduler": scheduler, "started_here": False}
        finally:
            c.close(timeout=5)
        return
    import logging

    logging.getLogger("distributed").setLevel(logging.WARNING)  # the cluster's chatter stays out of our logs
    n = workers or os.cpu_count() or 1
    # The worker processes log nothing below CRITICAL: a cluster started here speaks through our
    # errors, and stopping it (after Ctrl-C, say) may catch a worker's heartbeat in flight, which
    # it would report as an ERROR with a traceback.
    cluster = None
    try:
        with _children_ignore_ctrl_c():  # a Ctrl-C meanwhile is raised here, once the start has returned
            cluster = LocalCluster(
                n_workers=n,
                threads_per_worker=1,
                processes=True,
                dashboard_address="127.0.0.1:0",
                host="127.0.0.1",
                silence_logs=logging.CRITICAL,
            )
        c = Client(cluster)
        if log:
            log(f"started a local Dask cluster: {n} worker processes; dashboard {cluster.dashboard_link}")
        try:
            yield c, {"scheduler": cluster.scheduler_address, "started_here": True, "dashboard": cluster.dashboard_link}
        finally:
            c.close(timeout=5)
    finally:
        if cluster is not None:
            cluster.close()


@contextmanager
def _children_ignore_ctrl_c():
    """Processes started in here never see Ctrl-C, which a terminal sends to the whole process
    group: this process answers it, by stopping the cluster, rather than every worker printing its
    own traceback. They start with SIGINT blocked, which a process inherits even through exec (a
    handler is not: a spawned worker would get Python's own), and this process holds a Ctrl-C that
    comes meanwhile, delivering it once the body has returned (`interrupts_held`)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    from multiprocessing import resource_tracker

    # Started first: multiprocessing starts it with the first spawned process, and then unblocks
    # SIGINT in the thread that spawns it, which would spawn that worker without the block.
    resource_tracker.ensure_running()
    with interrupts_held():
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # one sent meanwhile is held now


_CLIENTS: dict = {}


def client_for(address: str):
    """One client per scheduler address in this process, shared by the pipeline's tasks."""
    from distributed import Client

    client = _CLIENTS.get(address)
    if client is None or client.status != "running":
        _check_tls_settings(address)
        _check_reachable(address)
        client = _CLIENTS[address] = Client(address, timeout="30s", set_as_default=False)
    return client


def share_client(client) -> str:
    """Make `client` the one `client_for` returns for its scheduler; returns the address."""
    _CLIENTS[client.scheduler.address] = client
    return client.scheduler.address


def _check_tls_settings(address: str) -> None:
    """A tls:// address needs Dask's TLS settings for clients (a CA file, a certificate and its
    key); without them distributed fails deep in its connection code with a TypeError. One line
    instead, saying where the settings of a `bpe cluster up` cluster come from."""
    if not address.startswith("tls://"):
        return
    from distributed.security import Security

    tls = Security().get_tls_config_for_role("client")
    if tls.get("ca_file") and tls.get("cert"):
        return
    raise SettingsError(
        lambda s: (
            f"{s.scheduler} {address} speaks TLS, and Dask's TLS client settings are not set "
            "(DASK_DISTRIBUTED__COMM__TLS__CA_FILE, __CLIENT__CERT, __CLIENT__KEY); for the cluster of "
            '`bpe cluster up`, run `eval "$(bpe cluster env)"` in this shell first'
        ),
        parameter="scheduler",
    )


def _check_reachable(address: str) -> None:
    """Fail at once, not after the client's 30 s of retries, when nothing listens at a tcp:// or
    tls:// address."""
    import socket

    scheme, _, location = address.partition("://")
    if scheme not in ("tcp", "tls"):
        return
    host, _, port = location.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
    except (OSError, ValueError) as exc:
        raise SchedulerLost(f"cannot reach the Dask scheduler at {address} ({exc})") from None


def check_scheduler(client, ping: bool = False) -> None:
    """Raise SchedulerLost if the client has lost its scheduler; `ping` also knocks on its port."""
    lost = client.status != "running"
    if ping and not lost:
        try:
            _check_reachable(client.scheduler.address)
        except SchedulerLost:
            lost = True
    if lost:
        raise SchedulerLost("lost the Dask scheduler; training stopped and nothing was written")


def warm_up(groups: Sequence[str] | None = None) -> dict[str, float]:
    """Load the compiled kernels of `groups` (`bpe.training.warm`; all a worker may run: None) in this worker,
    compiling those its machine's cache lacks, so that the first real task does not pay for it;
    returns the seconds it took and how many of them went to compiling. The compiler is unmapped
    after each group (`release_compiler`): a worker's memory is its words, not LLVM's 100 MiB of
    code, which loading a group maps again (its peak is one group's, not all of them at once)."""
    from bpe.engine.resident import release_compiler
    from bpe.training.warm import WORKER_GROUPS, load

    use_system_allocator()
    started = time.perf_counter()
    compile_seconds = 0.0
    for name in WORKER_GROUPS if groups is None else groups:
        compile_seconds += load([name])
        release_compiler()
    return {"seconds": time.perf_counter() - started, "compile_seconds": compile_seconds}


def prepare_kernels(groups: Sequence[str], workers_here: bool, say: Log | None = None) -> tuple[list[str], float]:
    """Compile ahead, on this machine's cores, the kernel groups a Dask run needs (`bpe.training.warm`): all
    of them when its workers run here (a cluster started here shares this machine's kernel
    cache), else the driver's alone. Returns the groups the workers load and the seconds spent."""
    from bpe.training.warm import DRIVER_GROUPS, compile_ahead

    on_workers = [name for name in groups if name not in DRIVER_GROUPS]
    here = list(groups) if workers_here else [name for name in groups if name in DRIVER_GROUPS]
    return on_workers, compile_ahead(here, say).seconds


@dataclass
class WorkersReady:
    """The workers a run starts with, and the seconds the slowest spent compiling kernels (0 when
    every worker found them in its kernel cache)."""

    workers: int
    compile_seconds: float


WORKER_WAIT = "60s"  # a scheduler without workers: how long a run waits for one to join, by default


def worker_wait_seconds() -> float:
    """How long a run waits for a worker to join a scheduler that has none: Dask's configuration
    key `bpe.worker-wait` (`DASK_BPE__WORKER_WAIT=10m` for a cluster that starts its workers on
    demand, or a Dask YAML file), 60 s by default."""
    import dask
    from dask.utils import parse_timedelta

    value = dask.config.get("bpe.worker-wait", WORKER_WAIT)
    try:
        seconds = parse_timedelta(value, default="s")
    except (KeyError, TypeError, ValueError):
        seconds = None
    if seconds is None or not seconds > 0:
        raise SettingsError(
            f"bpe.worker-wait (Dask configuration, DASK_BPE__WORKER_WAIT): {value!r} is not a duration "
            "such as 60s or 10m"
        )
    return float(seconds)


def _wait_for_a_worker(client, wait: float, log: Log | None) -> None:
    """Wait, saying so every few seconds, for a worker to join a scheduler that has none; refuse
    in one line after `wait` seconds (Dask's own timeout reads as a lost scheduler)."""
    address = client.scheduler.address
    try:
        if log is None:
            client.wait_for_workers(1, timeout=wait)
        else:
            with Heartbeat(log, f"waiting for a Dask worker to join the scheduler at {address}"):
                client.wait_for_workers(1, timeout=wait)
    except TimeoutError:
        raise WorkersLost(
            lambda s: (
                f"no Dask worker joined the scheduler at {address} in {wait:g} s; start workers "
                f"(`dask worker {address}`), give them longer (DASK_BPE__WORKER_WAIT=10m), or leave out "
                f"{s.scheduler} to train on a local cluster"
            )
        ) from None


def ready_workers(client, groups: Sequence[str] | None = None, log: Log | None = None) -> WorkersReady:
    """Wait for at least one worker and load the kernels of `groups` on all of them (see `warm_up`).
    Compiling (a worker's first run of this version of bpe, on a machine whose cache lacks them)
    is said in the log as a step of its own, with its time."""
    from bpe.distributed.memory import remember_limits

    wait = worker_wait_seconds()  # a value that is not a duration is refused whether or not it is needed
    if not client.scheduler_info()["workers"]:
        _wait_for_a_worker(client, wait, log)
    remember_limits(client, client.scheduler_info()["workers"])  # for a worker restarted before it is back
    if log is None:
        warmed = client.run(warm_up, groups)
    else:
        workers = len(client.scheduler_info()["workers"])
        with Heartbeat(log, f"loading the kernels on {workers} worker(s)"):
            warmed = client.run(warm_up, groups)
    compile_seconds = max((w["compile_seconds"] for w in warmed.values()), default=0.0)
    if log is not None:
        compiled = sum(w["compile_seconds"] >= 0.5 for w in warmed.values())
        if compiled:
            log(
                f"compiled the kernels on {compiled} of {len(warmed)} worker(s) in {compile_seconds:.1f} s "
                "(their first run of this version of bpe; `bpe warm` where a worker starts avoids it)"
            )
        else:
            slowest = max((w["seconds"] for w in warmed.values()), default=0.0)
            log(f"kernels loaded on {len(warmed)} worker(s) in {slowest:.1f} s")
    # The workers that ran it: the client's copy of the scheduler's worker list may lag behind.
    return WorkersReady(len(warmed), compile_seconds)

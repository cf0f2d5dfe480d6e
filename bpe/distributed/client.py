"""Connecting to a Dask cluster, or starting a local one, and getting its workers ready.

One client per scheduler address is kept per process (`client_for`), so that the pipeline's tasks
share it; `ready_workers` loads the compiled kernels in every worker before the first real task.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager

import numpy as np

from bpe.distributed.counting import split_by_bucket
from bpe.engine.count import WordCounter, WordCounts, use_system_allocator
from bpe.errors import SchedulerLost
from bpe.pretokenize import Pretokenizer

Log = Callable[[str], None]


@contextmanager
def dask_client(scheduler: str | None = None, workers: int | None = None, client=None, log: Log | None = None):
    """A client to an existing cluster, or to a local cluster of worker processes started here."""
    from distributed import Client, LocalCluster

    if client is not None:
        yield client, {"scheduler": client.scheduler.address, "started_here": False}
        return
    if scheduler:
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
    with _children_ignore_ctrl_c():
        cluster = LocalCluster(
            n_workers=n, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0",
            host="127.0.0.1", silence_logs=logging.ERROR,
        )  # fmt: skip
    c = Client(cluster)
    if log:
        log(f"started a local Dask cluster: {n} worker processes; dashboard {cluster.dashboard_link}")
    try:
        yield c, {"scheduler": cluster.scheduler_address, "started_here": True, "dashboard": cluster.dashboard_link}
    finally:
        c.close(timeout=5)
        cluster.close()


@contextmanager
def _children_ignore_ctrl_c():
    """Processes started in here ignore Ctrl-C, which they inherit: a terminal sends it to the
    whole process group, and it is this process that answers it, by stopping the cluster, rather
    than every worker printing its own traceback."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


_CLIENTS: dict = {}


def client_for(address: str):
    """One client per scheduler address in this process, shared by the pipeline's tasks."""
    from distributed import Client

    client = _CLIENTS.get(address)
    if client is None or client.status != "running":
        _check_reachable(address)
        client = _CLIENTS[address] = Client(address, timeout="30s", set_as_default=False)
    return client


def share_client(client) -> str:
    """Make `client` the one `client_for` returns for its scheduler; returns the address."""
    _CLIENTS[client.scheduler.address] = client
    return client.scheduler.address


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


def warm_up() -> float:
    """Load the compiled kernels in this worker (from numba's cache), so that the first real task
    does not pay for it; returns the seconds it took."""
    started = time.perf_counter()
    from bpe.engine.word_table import WordTable

    use_system_allocator()
    for name in ("gpt2", "cl100k", "o200k"):
        counter = WordCounter(Pretokenizer(name))
        counter.add_texts(["warm up, 1 2 3"])
    counts = counter.result()
    split_by_bucket(WordCounts.combine([counts, counts]), 2)
    table = WordTable(counts)
    table.take_deltas()
    table.apply(np.array([[119, 97, 256]], dtype=np.int64))
    table.take_deltas()
    return time.perf_counter() - started


def ready_workers(client) -> int:
    """Wait for at least one worker, load the kernels on all of them; returns how many there are."""
    if not client.scheduler_info()["workers"]:
        client.wait_for_workers(1, timeout=60)
    client.run(warm_up)
    return len(client.scheduler_info()["workers"])

"""Trouble with a Dask run's workers is never a silent hang: a worker paused for memory, one that
leaves, a scheduler with none. The run says so as it happens, and stops in one line with the way
out when it cannot go on."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bpe.distributed.memory_watch import GIVE_UP_SECONDS, MemoryWatch, WorkerMemory
from bpe.pipeline.services import free_port, start_dask_scheduler, start_dask_worker
from tests.conftest import write_parquet
from tests.distributed.conftest import train_args

BPE = str(Path(sys.executable).with_name("bpe"))

# Dask pauses a worker at this fraction of its memory limit: 2% of 2 GiB (41 MB) is less than a
# worker needs to start, so it is paused from its first heartbeat on and runs no task (the case of
# workers whose limit the run's words and kernels do not fit), while nothing kills it (95%).
PAUSED = {"DASK_DISTRIBUTED__WORKER__MEMORY__PAUSE": "0.02"}


@pytest.fixture
def paused_cluster(tmp_path):
    """A real `dask scheduler` and one `dask worker` that Dask pauses for memory."""
    scheduler = start_dask_scheduler(free_port(), log=tmp_path / "scheduler.log")
    try:
        worker = start_dask_worker(scheduler.url, log=tmp_path / "worker.log", env=PAUSED, memory_limit="2GiB")
        try:
            yield scheduler.url
        finally:
            worker.stop()
    finally:
        scheduler.stop()


def test_a_worker_paused_for_memory_stops_the_run_in_one_line_with_the_way_out(tmp_path, paused_cluster):
    data = write_parquet(
        tmp_path / "data.parquet", [f"row {i} of a corpus too big for its workers" for i in range(200)]
    )
    out = tmp_path / "tok"
    started = time.monotonic()
    result = subprocess.run(
        [BPE, *train_args(data, paused_cluster, out)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **PAUSED},  # the driver knows the workers' pause fraction, as a shared config gives it
    )
    took = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    said = [line for line in lines if line.startswith("dask worker paused for memory: tcp://127.0.0.1:")]
    assert len(said) == 1 and said[0].endswith("; the run waits for it"), result.stderr
    assert re.fullmatch(
        r"bpe: error: dask worker paused for memory for 30 s, so the run cannot go on: tcp://127\.0\.0\.1:\d+: "
        r"[\d,]+ MB of its 2,048 MB limit \(\d+%\); give workers a memory limit above [\d,]+ MB "
        r"\(Dask pauses one at 2% of it\), or use more workers",
        lines[-1],
    ), result.stderr
    assert GIVE_UP_SECONDS <= took < GIVE_UP_SECONDS + 150, took  # never a hang (the start aside: a loaded machine)
    assert not out.exists()  # nothing written


def worker(address: str, status: str, memory_mb: int = 300) -> WorkerMemory:
    return WorkerMemory(address, status, memory_mb << 20, 400 << 20)


def test_each_pause_resume_and_departure_is_said_once_and_a_callers_client_is_never_stopped():
    said: list[str] = []
    watch = MemoryWatch(client=None, log=said.append, may_stop=False)  # a client the caller gave: never closed
    looks = [
        [worker("tcp://a:1", "running"), worker("tcp://b:2", "running")],
        [worker("tcp://a:1", "paused", 330), worker("tcp://b:2", "running")],
        [worker("tcp://a:1", "paused", 330), worker("tcp://b:2", "running")],
        [worker("tcp://a:1", "running")],
    ]
    for seconds, workers in zip((0, 1, 1000, 1001), looks, strict=True):
        assert watch._look(workers, seconds) is False
    assert said == [
        "dask worker paused for memory: tcp://a:1: 330 MB of its 400 MB limit (82%); the run waits for it",
        "dask worker tcp://b:2 left the cluster (Dask restarts a worker past its memory limit)",
        "dask worker tcp://a:1 resumed",
    ]
    assert watch.stopped is None


def test_a_scheduler_without_workers_is_waited_on_aloud_then_refused_in_one_line(tmp_path):
    scheduler = start_dask_scheduler(free_port(), log=tmp_path / "scheduler.log")
    try:
        data = write_parquet(tmp_path / "data.parquet", ["a corpus with no worker to count it"] * 10)
        result = subprocess.run(
            [BPE, *train_args(data, scheduler.url, tmp_path / "tok")],
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        scheduler.stop()
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1, result.stderr
    waiting = f"waiting for a Dask worker to join the scheduler at {scheduler.url}"
    waits = [line for line in lines if line.startswith(waiting)]
    assert len(waits) >= 60 // 5, result.stderr  # said as the wait starts, then every 5 s: never silent
    assert lines[-1] == (
        f"bpe: error: no Dask worker joined the scheduler at {scheduler.url} in 60 s; start workers "
        f"(`dask worker {scheduler.url}`), or leave out --scheduler to train on a local cluster"
    ), result.stderr
    assert not (tmp_path / "tok").exists()

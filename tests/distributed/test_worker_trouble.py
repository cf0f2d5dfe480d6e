"""Trouble with a Dask run's workers is never a silent hang: a scheduler with none is waited on
aloud, then refused in one line with the way out."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bpe.pipeline.services import free_port, start_dask_scheduler
from tests.conftest import write_parquet
from tests.distributed.conftest import train_args

BPE = str(Path(sys.executable).with_name("bpe"))


@pytest.fixture(scope="module")
def idle_scheduler(tmp_path_factory):
    """A real `dask scheduler` on 127.0.0.1 that no worker ever joins."""
    scheduler = start_dask_scheduler(free_port(), log=tmp_path_factory.mktemp("scheduler") / "scheduler.log")
    try:
        yield scheduler.url
    finally:
        scheduler.stop()


def train_without_workers(tmp_path, scheduler: str, wait: str) -> subprocess.CompletedProcess:
    """`bpe train --engine dask --scheduler SCHEDULER` with Dask's `bpe.worker-wait` set to `wait`."""
    data = write_parquet(tmp_path / "data.parquet", ["a corpus with no worker to count it"] * 10)
    return subprocess.run(
        [BPE, *train_args(data, scheduler, tmp_path / "tok")],
        env={**os.environ, "DASK_BPE__WORKER_WAIT": wait},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_scheduler_without_workers_is_waited_on_aloud_then_refused_in_one_line(tmp_path, idle_scheduler):
    """Waited on as long as Dask's configuration says (`bpe.worker-wait`, 60 s unless set), said
    every 5 s, then one line with the ways out."""
    result = train_without_workers(tmp_path, idle_scheduler, "12s")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1, result.stderr
    waiting = f"waiting for a Dask worker to join the scheduler at {idle_scheduler}"
    waits = [line for line in lines if line.startswith(waiting)]
    assert len(waits) >= 12 // 5, result.stderr  # said as the wait starts, then every 5 s: never silent
    assert lines[-1] == (
        f"bpe: error: no Dask worker joined the scheduler at {idle_scheduler} in 12 s; start workers "
        f"(`dask worker {idle_scheduler}`), give them longer (DASK_BPE__WORKER_WAIT=10m), or leave out "
        "--scheduler to train on a local cluster"
    ), result.stderr
    assert not (tmp_path / "tok").exists()


@pytest.mark.parametrize("wait", ["soon", "0s", "-5"])
def test_a_worker_wait_that_is_not_a_duration_is_one_line_naming_the_setting(tmp_path, idle_scheduler, wait):
    result = train_without_workers(tmp_path, idle_scheduler, wait)
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    prefix = "bpe: error: bpe.worker-wait (Dask configuration, DASK_BPE__WORKER_WAIT): "
    assert result.stderr.startswith(prefix) and wait in result.stderr, result.stderr
    assert result.stderr.rstrip().endswith("is not a duration such as 60s or 10m"), result.stderr
    assert not (tmp_path / "tok").exists()

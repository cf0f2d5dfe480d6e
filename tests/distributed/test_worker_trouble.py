"""Trouble with a Dask run's workers is never a silent hang: a scheduler with none is waited on
aloud, then refused in one line with the way out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bpe.pipeline.services import free_port, start_dask_scheduler
from tests.conftest import write_parquet
from tests.distributed.conftest import train_args

BPE = str(Path(sys.executable).with_name("bpe"))


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

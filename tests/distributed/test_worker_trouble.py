"""Trouble with a Dask run's workers is never a silent hang: a scheduler with none is waited on
aloud, then refused in one line with the way out; workers all paused for memory are said, then
stop the run in one line with the way out."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bpe.distributed.memory import GIVE_UP_SECONDS, MB, PausedWorkers, WorkerMemory
from bpe.errors import WorkersOutOfMemory
from bpe.pipeline.services import free_port, start_dask_scheduler, start_dask_worker
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


@pytest.mark.services  # a real scheduler and workers
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


@pytest.mark.services  # a real scheduler
@pytest.mark.parametrize("wait", ["soon", "0s", "-5"])
def test_a_worker_wait_that_is_not_a_duration_is_one_line_naming_the_setting(tmp_path, idle_scheduler, wait):
    result = train_without_workers(tmp_path, idle_scheduler, wait)
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    prefix = "bpe: error: bpe.worker-wait (Dask configuration, DASK_BPE__WORKER_WAIT): "
    assert result.stderr.startswith(prefix) and wait in result.stderr, result.stderr
    assert result.stderr.rstrip().endswith("is not a duration such as 60s or 10m"), result.stderr
    assert not (tmp_path / "tok").exists()


# Dask pauses a worker at this fraction of its memory limit: 2% of 2 GiB (41 MB) is less than a
# worker needs to start, so it is paused from its first heartbeat on and runs no task (the case of
# workers whose limit the run's words and kernels do not fit), while nothing kills it (95%).
PAUSED = {"DASK_DISTRIBUTED__WORKER__MEMORY__PAUSE": "0.01"}  # 1%: below an idle worker's memory


def train_on_one_worker(
    tmp_path, memory_limit: str, env: dict | None = None
) -> tuple[subprocess.CompletedProcess, float]:
    """`bpe train --engine dask --scheduler ...` on a real scheduler and one `dask worker` (with its
    nanny) limited to `memory_limit`, both given `env` (Dask configuration); the run and its seconds."""
    env = env or {}
    scheduler = start_dask_scheduler(free_port(), log=tmp_path / "scheduler.log")
    try:
        worker = start_dask_worker(scheduler.url, log=tmp_path / "worker.log", env=env, memory_limit=memory_limit)
        try:
            data = write_parquet(
                tmp_path / "data.parquet", [f"row {i} of a corpus too big for its workers" for i in range(200)]
            )
            started = time.monotonic()
            result = subprocess.run(
                [BPE, *train_args(data, scheduler.url, tmp_path / "tok")],
                env={**os.environ, **env},  # the driver reads the pause fraction from the same Dask configuration
                capture_output=True,
                text=True,
                timeout=300,
            )
            return result, time.monotonic() - started
        finally:
            worker.stop()
    finally:
        scheduler.stop()


@pytest.mark.services  # a real scheduler and workers
def test_workers_all_paused_for_memory_stop_the_run_in_one_line_with_the_way_out(tmp_path):
    result, took = train_on_one_worker(tmp_path, "2GiB", PAUSED)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    said = [line for line in lines if line.startswith("dask worker paused for memory: tcp://127.0.0.1:")]
    assert len(said) == 1 and re.search(r": [\d,]+ MB of its 2,147 MB limit \(\d+%\); the run waits for it$", said[0])
    assert re.fullmatch(
        rf"bpe: error: every Dask worker is paused for memory, so no task can run \({GIVE_UP_SECONDS:.0f} s\): "
        r"tcp://127\.0\.0\.1:\d+: [\d,]+ MB of its 2,147 MB limit \(\d+%\); give workers a memory limit above "
        r"[\d,]+ MB \(Dask pauses one at 1% of it\), or use more workers",
        lines[-1],
    ), result.stderr
    assert took < GIVE_UP_SECONDS + 120, took  # never a hang (a worker's start and kernels aside)
    assert not (tmp_path / "tok").exists()


def test_a_pause_is_said_once_and_stops_only_when_every_worker_is_paused_long_enough():
    said: list[str] = []
    watch = PausedWorkers(client=None, log=said.append)

    def worker(address: str, status: str) -> WorkerMemory:
        return WorkerMemory(address, status, 330 * MB, 400 * MB)

    watch.see([worker("tcp://a:1", "paused"), worker("tcp://b:2", "running")], now=0.0)
    watch.see([worker("tcp://a:1", "paused"), worker("tcp://b:2", "running")], now=100.0)  # b runs the tasks
    assert said == ["dask worker paused for memory: tcp://a:1: 330 MB of its 400 MB limit (82%); the run waits for it"]
    watch.see([worker("tcp://a:1", "paused"), worker("tcp://b:2", "paused")], now=101.0)
    watch.see([worker("tcp://a:1", "paused"), worker("tcp://b:2", "paused")], now=101.0 + GIVE_UP_SECONDS - 1)
    with pytest.raises(WorkersOutOfMemory, match=r"give workers a memory limit above 420 MB \(Dask pauses one at 80%"):
        watch.see([worker("tcp://a:1", "paused"), worker("tcp://b:2", "paused")], now=101.0 + GIVE_UP_SECONDS)
    assert len(said) == 2  # b's pause said once too


@pytest.mark.services  # a real scheduler and a worker with its nanny
def test_workers_restarted_for_memory_stop_the_run_in_one_line_with_the_way_out(tmp_path):
    """A worker whose limit its kernels do not fit is restarted by its nanny (at 95% of its limit):
    the run stops in one line naming the phase, the worker, its memory and its limit, and what to
    give the workers; not as a lost scheduler, nor with Dask's traceback."""
    result, took = train_on_one_worker(tmp_path, "150MB")  # an idle worker fits; its kernels, loading, do not
    assert result.returncode == 1, result.stderr
    assert re.fullmatch(
        r"bpe: error: Dask workers ran out of memory while (loading the kernels|counting): restarted (once|\d+ times), "
        r"last tcp://127\.0\.0\.1:\d+ restarted for memory at [\d,]+ MB of its 150 MB limit; give workers a memory "
        r"limit above 150 MB, or use more workers",
        result.stderr.strip().splitlines()[-1],
    ), result.stderr
    assert "Traceback" not in result.stderr
    assert took < 120, took  # never a hang
    assert not (tmp_path / "tok").exists()


def test_a_worker_restarted_for_memory_is_said_and_named_in_the_runs_error():
    """What a nanny reports to the scheduler as it restarts a worker for memory (its
    `worker-restart-memory` event), read back from a real scheduler: said once while the run goes
    on, and the run's error when it cannot; errors about the input stay as they are."""
    from distributed import Client, LocalCluster

    from bpe.distributed.memory import failed_for_memory, out_of_memory
    from bpe.errors import InputError

    with (
        LocalCluster(n_workers=1, processes=False, memory_limit="838MB", dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):
        said: list[str] = []
        watch = PausedWorkers(client, said.append)
        since = time.time()
        assert out_of_memory(client, since, "while counting") is None
        client.log_event("worker-restart-memory", {"worker": "tcp://127.0.0.1:40123", "pid": 7, "rss": 812_000_000})
        watch.look()
        watch.look()
        assert said == [
            "dask worker tcp://127.0.0.1:40123 restarted for memory at 812 MB of its 838 MB limit; its tasks run "
            "again on the workers left"
        ]
        error = failed_for_memory(client, since, "while counting", OSError("Stream is closed"))
        assert isinstance(error, WorkersOutOfMemory)
        assert str(error) == (
            "Dask workers ran out of memory while counting: restarted once, last tcp://127.0.0.1:40123 restarted "
            "for memory at 812 MB of its 838 MB limit; give workers a memory limit above 838 MB, or use more workers"
        )
        bad_input = InputError("data.parquet: row 3: not text")
        assert failed_for_memory(client, since, "while counting", bad_input) is bad_input
        assert out_of_memory(client, time.time() + 60, "while counting") is None  # restarts before the run: not its own


def wait_until_paused(client, seconds: float = 60.0) -> None:
    """Wait until the scheduler has a worker and sees every worker paused."""
    client.wait_for_workers(1, timeout=seconds)
    deadline = time.monotonic() + seconds
    while any(w.get("status") != "paused" for w in client.scheduler_info()["workers"].values()):
        assert time.monotonic() < deadline, client.scheduler_info()["workers"]
        time.sleep(0.1)


@pytest.mark.services  # a real scheduler and a worker with its nanny
def test_counts_made_here_that_no_paused_worker_takes_stop_the_run_in_one_line(tmp_path):
    """Texts given in memory are counted here and placed on the workers, which Dask does only on a
    running worker: the run says the pause and stops once every worker has stayed paused for
    GIVE_UP_SECONDS, rather than end in Dask's `TimeoutError: No valid workers found`."""
    import dask
    from distributed import Client

    from bpe import train

    scheduler = start_dask_scheduler(free_port(), log=tmp_path / "scheduler.log")
    try:
        worker = start_dask_worker(scheduler.url, log=tmp_path / "worker.log", env=PAUSED, memory_limit="2GiB")
        try:
            said: list[str] = []
            with Client(scheduler.url) as client, dask.config.set({"distributed.worker.memory.pause": 0.01}):
                wait_until_paused(client)  # a worker runs tasks from joining until its first memory check
                started = time.monotonic()
                with pytest.raises(WorkersOutOfMemory, match=r"^every Dask worker is paused for memory") as raised:
                    train(
                        ["words for a holder to hold"] * 50,
                        vocab_size=300,
                        engine="dask",
                        client=client,
                        log=said.append,
                    )
                took = time.monotonic() - started
        finally:
            worker.stop()
    finally:
        scheduler.stop()
    assert "\n" not in str(raised.value)
    assert any(line.startswith("dask worker paused for memory: tcp://127.0.0.1:") for line in said), said
    assert took < GIVE_UP_SECONDS + 30, took

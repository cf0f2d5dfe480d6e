"""Threads default to the cores this process may use: its CPU affinity and its cgroup's quota; the
merge loop's, to those of them that other processes are not keeping busy."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from bpe.engine.cores import BusyCores, available_cores, cgroup_cpu_quota, cores_busy_elsewhere


def test_cgroup_quotas_are_read_as_whole_cpus(tmp_path):
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_quota(v2) == 2  # 1.5 CPUs of time: two threads keep it busy
    (v2 / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_quota(v2) is None
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("300000\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_quota(v1) == 3
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpu_quota(v1) is None
    assert cgroup_cpu_quota(tmp_path / "none") is None


def test_available_cores_follow_the_affinity_mask():
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no CPU affinity on this platform")
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(before)})
        assert available_cores() == 1
    finally:
        os.sched_setaffinity(0, before)
    assert 1 <= available_cores() <= len(before)


@pytest.fixture
def a_busy_core():
    """A CPU-bound process on this process's cores (a child inherits the affinity mask)."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    time.sleep(0.3)
    yield spinner
    spinner.kill()
    spinner.wait()


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="reads Linux's /proc/stat")
def test_a_core_kept_busy_by_another_process_is_seen(a_busy_core):
    assert cores_busy_elsewhere(window=0.1) >= 0.5


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="reads Linux's /proc/stat")
def test_the_merge_loop_leaves_a_core_busy_elsewhere_to_its_process(a_busy_core):
    """With one core kept busy by another process, the merge loop's default threads (for a table
    large enough to share) leave that core alone: spinning on it would slow down both."""
    from bpe.training.trainer import THREADED_MERGE_MIN_WORDS, merge_threads_for

    if available_cores() < 2:
        pytest.skip("one core: the merge loop runs on one thread anyway")
    assert 1 <= merge_threads_for(10 * THREADED_MERGE_MIN_WORDS) <= available_cores() - 1


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="reads Linux's /proc/stat")
def test_a_window_opened_as_a_run_starts_sees_a_core_kept_busy_while_it_works():
    """A run measures the load over its own start-up instead of sleeping: the window opens, the run
    works on one thread, another process keeps a core busy meanwhile, and the reading sees it."""
    busy = BusyCores()
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        deadline = time.monotonic() + 0.4
        while time.monotonic() < deadline:  # this process at work on one thread, as start-up is
            sum(range(10_000))
        seen = busy.measured()
    finally:
        spinner.kill()
        spinner.wait()
    assert seen >= 0.5
    assert busy.measured() == seen  # read once: a run's later choices use the same figure

"""Threads default to the cores this process may use: its CPU affinity and its cgroup's quota."""

from __future__ import annotations

import os

import pytest

from bpe.engine.cores import available_cores, cgroup_cpu_quota


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

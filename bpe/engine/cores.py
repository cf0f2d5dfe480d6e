"""How many cores this process may use: the CPU affinity mask and the cgroup's CPU quota (a
container limited to 2 CPUs on a 64-core host gets 2), not the machine's count.

>>> available_cores() >= 1
True
"""

from __future__ import annotations

import math
import os
from pathlib import Path


def available_cores() -> int:
    """Cores this process may run on at once: the fewest of the affinity mask and the cgroup quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    quota = cgroup_cpu_quota()
    return max(1, min(cores, quota)) if quota else max(1, cores)


def cgroup_cpu_quota(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """CPUs the cgroup allows (cgroup v2 `cpu.max`, or v1 `cpu.cfs_quota_us`), rounded up; None if unlimited."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else math.ceil(int(quota) / int(period))
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return None if quota_us <= 0 else math.ceil(quota_us / period_us)
    except (OSError, ValueError):
        return None

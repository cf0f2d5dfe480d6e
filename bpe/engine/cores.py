"""How many cores this process may use: the CPU affinity mask and the cgroup's CPU quota (a
container limited to 2 CPUs on a 64-core host gets 2), not the machine's count.

>>> available_cores() >= 1
True
"""

from __future__ import annotations

import math
import os
import threading
import time
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


def cores_busy_elsewhere(window: float = 0.05, stat: Path = Path("/proc/stat")) -> float:
    """Cores of this process's affinity mask that other processes kept busy over the next `window`
    seconds: their busy time in /proc/stat less this process's own CPU time, over the window (Linux;
    0.0 where it cannot tell). A merge loop whose threads spin between rounds should not count on
    those cores: on them it would slow down both itself and the other work."""
    return BusyCores(stat).measured(window)


class BusyCores:
    """`cores_busy_elsewhere` over a window that opens when this is made and closes when it is
    read, so that the caller works meanwhile instead of sleeping (a run's start-up: 50 ms of a
    3 s run, twice). The window must see this process on one thread at most, as start-up does:
    its own threads crowding the cores would hide how much another process wants them."""

    def __init__(self, stat: Path = Path("/proc/stat")) -> None:
        self.stat = stat
        self.opened = time.monotonic()
        self._value: float | None = None
        self._reading = threading.Lock()  # a run's reader thread may read it first
        try:
            self._cpus = {f"cpu{i}" for i in os.sched_getaffinity(0)}
            self._before, self._mine = _busy_ticks(stat, self._cpus), time.process_time()
        except (AttributeError, OSError, ValueError):
            self._value = 0.0

    def measured(self, window: float = 0.05) -> float:
        """The cores other processes kept busy since this was made, the window sleeping out what is
        left of `window` seconds; the same figure on every later call, from any thread."""
        with self._reading:
            return self._measured(window)

    def _measured(self, window: float) -> float:
        if self._value is None:
            time.sleep(max(0.0, window - (time.monotonic() - self.opened)))
            try:
                after, mine = _busy_ticks(self.stat, self._cpus), time.process_time() - self._mine
            except (OSError, ValueError):
                after, mine = self._before, 0.0
            elapsed = time.monotonic() - self.opened
            busy = (after - self._before) / os.sysconf("SC_CLK_TCK")
            self._value = max(0.0, (busy - mine) / elapsed)
        return self._value

    def age(self) -> float:
        """Seconds since the window opened."""
        return time.monotonic() - self.opened


def _busy_ticks(stat: Path, cpus: set[str]) -> int:
    """Clock ticks the CPUs `cpus` spent busy since boot (all but idle and iowait)."""
    total = 0
    for line in stat.read_text().splitlines():
        name, *fields = line.split()
        if name in cpus:
            ticks = [int(f) for f in fields[:8]]  # user nice system idle iowait irq softirq steal
            total += sum(ticks) - ticks[3] - ticks[4]
    return total

"""Progress reporting: a terminal bar for the `bpe` command, log lines for flows and services.

Trainers call `progress(phase, done, total)`; what it shows is up to the caller.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

ProgressFn = Callable[[str, int, int], None]

UNITS = {"count": "B", "merge": "merges"}


def _human(n: float, unit: str) -> str:
    if unit == "B":
        for suffix in ("B", "KB", "MB", "GB", "TB"):
            if abs(n) < 1000 or suffix == "TB":
                return f"{n:.0f} {suffix}" if suffix == "B" else f"{n:.1f} {suffix}"
            n /= 1000
    return f"{n:,.0f} {unit}"


def _eta(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 60}:{seconds % 60:02d}"


class TerminalProgress:
    """One bar per phase on stderr, redrawn at most 10 times a second; silent when not a terminal."""

    def __init__(self, stream=None, force: bool = False) -> None:
        self.stream = stream or sys.stderr
        self.enabled = force or self.stream.isatty()
        self.phase: str | None = None
        self.started = 0.0
        self.last_draw = 0.0

    def __call__(self, phase: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if phase != self.phase:
            self.finish()
            self.phase, self.started = phase, now
        if now - self.last_draw < 0.1 and done < total:
            return
        self.last_draw = now
        unit = UNITS.get(phase, "")
        elapsed = now - self.started
        rate = done / elapsed if elapsed > 0 else 0.0
        fraction = min(done / total, 1.0) if total else 1.0
        width = 30
        bar = "#" * int(fraction * width) + "-" * (width - int(fraction * width))
        left = (total - done) / rate if rate > 0 else 0
        line = (
            f"\r{phase:<6} [{bar}] {fraction * 100:5.1f}%  {_human(done, unit)} / {_human(total, unit)}"
            f"  {_human(rate, unit)}/s  eta {_eta(left)} "
        )
        self.stream.write(line)
        self.stream.flush()

    def finish(self) -> None:
        if self.enabled and self.phase is not None:
            self.stream.write("\n")
            self.stream.flush()
        self.phase = None


class LogProgress:
    """Progress as log lines (for Prefect logs and services), at most one every `every` seconds."""

    def __init__(self, log: Callable[[str], None], every: float = 5.0) -> None:
        self.log = log
        self.every = every
        self.last: dict[str, float] = {}
        self.started: dict[str, float] = {}

    def __call__(self, phase: str, done: int, total: int) -> None:
        now = time.perf_counter()
        self.started.setdefault(phase, now)
        if done < total and now - self.last.get(phase, 0.0) < self.every:
            return
        self.last[phase] = now
        unit = UNITS.get(phase, "")
        elapsed = now - self.started[phase]
        rate = done / elapsed if elapsed > 0 else 0.0
        left = (total - done) / rate if rate > 0 else 0.0
        pct = 100.0 * done / total if total else 100.0
        self.log(
            f"{phase}: {_human(done, unit)} of {_human(total, unit)} ({pct:.0f}%), "
            f"{_human(rate, unit)}/s, about {_eta(left)} left"
        )

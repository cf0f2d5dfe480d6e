"""Progress reporting: bars (tqdm) for the `bpe` command, notebooks and `train(progress=True)`; log
lines for flows and services.

Trainers call `progress(phase, done, total)`, in the units and over the time the summary after
training uses, so that a bar's figures and the summary's agree:

- "count": UTF-8 bytes of text counted (the manifest's `counts.bytes`). `total` is an estimate
  while counting (the text counted so far, scaled by the share of the input files read), capped by
  a `--limit` in bytes, and exact in the last call (`done == total`); None when unknown (in-memory
  texts of unknown length).
- "index": unique words put into the word tables, between counting and merging (the local
  engine): their pairs counted and listed, after a base's merges are replayed on them (then
  replaying a word is half its share). A second stage of superwords spends minutes here at 2 GB.
- "merge": merges made by the merge loop, of the merges asked for (the loop may stop earlier).
- "superword count", "superword index", "superword merge": the same for the second stage of a
  superword run.

Each phase's first call has `done == 0` and comes when its work starts: counting before the first
batch is read, merging when the loop starts (after the word table and the pair counts are built).
A bar's elapsed time, rate and ETA are therefore those of the summary's `count` and `merge_loop`
seconds. This module imports no numba, numpy or tqdm at the top: `bpe --help` stays fast.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable

ProgressFn = Callable[[str, int, int | None], None]

UNITS = {
    "count": "B",
    "index": "words",
    "merge": "merges",
    "superword count": "B",
    "superword index": "words",
    "superword merge": "merges",
}


def estimate_text_bytes(text_done: int, read: int, size: int) -> int:
    """The text bytes of a whole input, estimated while counting it: the text counted so far scaled
    by the input's `size` over the `read` part of it (file bytes); `size` before anything is read.

    >>> estimate_text_bytes(0, 0, 1000), estimate_text_bytes(400, 250, 1000), estimate_text_bytes(1600, 1000, 1000)
    (1000, 1600, 1600)
    """
    if read <= 0 or text_done <= 0:
        return max(size, text_done)
    return max(text_done, round(text_done * size / min(read, size)))


def at_most(progress: ProgressFn, phase: str, cap: int) -> ProgressFn:
    """`progress` with the totals of `phase` capped by `cap` (a `--limit` in bytes: the text cannot
    be more), and a missing total replaced by it."""

    def report(name: str, done: int, total: int | None) -> None:
        if name == phase:
            total = max(done, cap if total is None else min(total, cap))
        progress(name, done, total)

    return report


class PhaseClock:
    """Passes progress on (to `progress`, if any) and times each phase as its bar does: from its
    first report (when its work starts) to its last, less the seconds `compiling()` grew by
    meanwhile (numba compiling kernels: a version's first run only)."""

    def __init__(self, progress: ProgressFn | None = None, compiling: Callable[[], float] = lambda: 0.0) -> None:
        self.progress = progress
        self.compiling = compiling
        self._first: dict[str, tuple[float, float]] = {}
        self._last: dict[str, tuple[float, float]] = {}

    def __call__(self, phase: str, done: int, total: int | None) -> None:
        mark = (time.perf_counter(), self.compiling())
        self._first.setdefault(phase, mark)
        self._last[phase] = mark
        if self.progress is not None:
            self.progress(phase, done, total)

    def seconds(self, phase: str) -> float:
        if phase not in self._first:
            return 0.0
        (t0, c0), (t1, c1) = self._first[phase], self._last[phase]
        return max(t1 - t0 - (c1 - c0), 0.0)


class Bars:
    """One tqdm bar per phase, in the summary's units, with elapsed time, the average rate and the
    time left. `tqdm.auto`: a widget in Jupyter (with ipywidgets), text on a terminal. Without
    `force`, text bars are drawn only on a terminal (nothing in a pipe or a log file)."""

    def __init__(self, file=None, force: bool = False) -> None:
        self.file = file
        self.force = force
        self._bar = None
        self._phase: str | None = None
        self._lock = threading.Lock()

    def __call__(self, phase: str, done: int, total: int | None) -> None:
        with self._lock:
            if self._bar is None or phase != self._phase:
                self._close()
                self._bar, self._phase = self._open(phase, done, total), phase
                return
            bar = self._bar
            if total != bar.total:
                bar.total = total
                container = getattr(bar, "container", None)  # a notebook's widget keeps its own maximum
                if container is not None and total is not None:
                    container.children[1].max = total
            bar.update(done - bar.n)

    def _open(self, phase: str, done: int, total: int | None):
        from tqdm.auto import tqdm

        unit = UNITS.get(phase, "")
        file = self.file if self.file is not None else sys.stderr
        columns = _columns(file)  # 0 for a terminal of unknown width (a new pseudo-terminal): then 80, not nothing
        return tqdm(
            desc=phase,
            total=total,
            initial=done,
            unit=unit if unit == "B" else f" {unit}",
            unit_scale=True,
            unit_divisor=1000,  # MB as the summary counts them
            smoothing=0,  # the average rate since the phase started: the summary's, and a steady ETA
            mininterval=0.1,
            dynamic_ncols=bool(columns),
            ncols=80 if columns == 0 else None,
            nrows=24 if columns == 0 else None,  # tqdm hides every bar on a terminal of 0 rows
            leave=True,
            file=file,
            disable=False if self.force else None,  # None: tqdm draws only on a terminal
        )

    def _close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        self._bar, self._phase = None, None

    def finish(self) -> None:
        """End the current bar (its line stays), so that what is printed next starts a line of its own."""
        with self._lock:
            self._close()

    def say(self, line: str) -> None:
        """A line about the run that is not a phase's progress (kernels compiling), on a line of its
        own, on a terminal or not: `bpe: <line>`."""
        self.finish()
        print(f"bpe: {line}", file=self.file if self.file is not None else sys.stderr, flush=True)


def _columns(file) -> int | None:
    """The width of the terminal `file` is: 0 if unknown, None if `file` is not a terminal."""
    try:
        return os.get_terminal_size(file.fileno()).columns if file.isatty() else None
    except (AttributeError, OSError, ValueError):  # no file descriptor: a notebook's stream, a StringIO
        return None


def _human(n: float, unit: str) -> str:
    if unit == "B":
        for suffix in ("B", "KB", "MB", "GB", "TB"):
            if abs(n) < 1000 or suffix == "TB":
                return f"{n:.0f} {suffix}" if suffix == "B" else f"{n:.1f} {suffix}"
            n /= 1000
    return f"{n:,.0f} {unit}"


def _clock(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class LogProgress:
    """Progress as log lines (for Prefect logs and services), in the bars' units and rates: a
    phase's first and last report, and at most one line every `every` seconds between."""

    def __init__(self, log: Callable[[str], None], every: float = 5.0, clock: Callable[[], float] = time.perf_counter):
        self.log = log
        self.every = every
        self.clock = clock
        self.last: dict[str, float] = {}
        self.started: dict[str, float] = {}

    def __call__(self, phase: str, done: int, total: int | None) -> None:
        now = self.clock()
        first = phase not in self.started
        self.started.setdefault(phase, now)
        finished = total is not None and done >= total
        if not (first or finished) and now - self.last[phase] < self.every:
            return
        self.last[phase] = now
        unit = UNITS.get(phase, "")
        elapsed = now - self.started[phase]
        rate = done / elapsed if elapsed > 0 else 0.0
        if total is None:
            line = f"{phase}: {_human(done, unit)} in {_clock(elapsed)}"
        elif finished:
            line = f"{phase}: {_human(done, unit)} (100%) in {_clock(elapsed)}"
        else:
            of = f"about {_human(total, unit)}" if phase == "count" else _human(total, unit)
            shown = f"{done:,}" if unit != "B" else _human(done, unit)
            line = f"{phase}: {shown} of {of} ({100 * done / total if total else 100:.0f}%) in {_clock(elapsed)}"
        if rate > 0:
            line += f", {_human(rate, unit)}/s"
            if total is not None and not finished:
                line += f", about {_clock((total - done) / rate)} left"
        self.log(line)

    def say(self, line: str) -> None:
        """A line about the run that is not a phase's progress (kernels compiling)."""
        self.log(line)


def say_of(progress: object) -> Callable[[str], None] | None:
    """Where a run's lines that are not a phase's progress go: the progress reporter's `say`
    (bars, log lines), or nowhere for a plain callable."""
    return getattr(progress, "say", None)


class Heartbeat:
    """`with Heartbeat(say, "starting Prefect"):` says `what...` as the block starts, then `what...
    N s` every `every` seconds until it ends: a wait on something that reports no progress of its
    own (a server starting) is never silent for long."""

    def __init__(self, say: Callable[[str], None], what: str, every: float = 5.0) -> None:
        self.say, self.what, self.every = say, what, every
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def _beat(self) -> None:
        started = time.perf_counter()
        while not self._done.wait(self.every):
            self.say(f"{self.what}... {time.perf_counter() - started:.0f} s")

    def __enter__(self) -> Heartbeat:
        self.say(f"{self.what}...")
        self._thread = threading.Thread(target=self._beat, name="bpe-heartbeat", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()

"""Compiling the kernels, made visible. The first run of a new version of the package compiles
them (about half a minute on 2 cores); later runs load them from the cache in well under a second. A
`CompileWatch` sums the time numba spends compiling (loading from the cache is not compiling), so
that it is reported apart from counting and merging, and says when compiling starts.

>>> with CompileWatch() as watch:
...     pass
>>> watch.seconds
0.0
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from numba.core import event

COMPILE_EVENT = "numba:compile"


class CompileWatch(event.Listener):
    """Time spent compiling kernels while it is active (`with CompileWatch(...) as watch:`), and
    `on_start()` called once, when the first kernel starts compiling. numba compiles one kernel at a
    time (a global lock), and a kernel compiles the kernels it calls inside its own compile: only
    the outermost compile is timed."""

    def __init__(self, on_start: Callable[[], None] | None = None) -> None:
        self.on_start_compiling = on_start
        self.seconds = 0.0
        self.kernels = 0
        self._depth = 0
        self._started = 0.0
        self._lock = threading.Lock()

    def on_start(self, ev: event.Event) -> None:
        with self._lock:
            if self._depth == 0:
                self._started = time.perf_counter()
                if self.kernels == 0 and self.on_start_compiling is not None:
                    self.on_start_compiling()
                self.kernels += 1
            self._depth += 1

    def on_end(self, ev: event.Event) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0:
                self.seconds += time.perf_counter() - self._started

    def __enter__(self) -> CompileWatch:
        event.register(COMPILE_EVENT, self)
        return self

    def __exit__(self, *exc) -> None:
        event.unregister(COMPILE_EVENT, self)

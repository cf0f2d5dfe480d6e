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

import sys
import threading
import time
from collections.abc import Callable

COMPILE_EVENT = "numba:compile"

# Watches entered before numba was imported: a run on the pure-Python path never imports it, and
# one that does imports `kernel_cache` first, which calls `numba_imported` (see below).
_waiting: set[CompileWatch] = set()


class CompileWatch:
    """Time spent compiling kernels while it is active (`with CompileWatch(...) as watch:`), and
    `on_start()` called once, when the first kernel starts compiling. numba compiles one kernel at a
    time (a global lock), and a kernel compiles the kernels it calls inside its own compile: only
    the outermost compile is timed. Entering it does not import numba."""

    def __init__(self, on_start: Callable[[], None] | None = None) -> None:
        self.on_start_compiling = on_start
        self.seconds = 0.0
        self.kernels = 0
        self._depth = 0
        self._started = 0.0
        self._lock = threading.Lock()
        self._listener = None

    def on_start(self, ev=None) -> None:
        with self._lock:
            if self._depth == 0:
                self._started = time.perf_counter()
                if self.kernels == 0 and self.on_start_compiling is not None:
                    self.on_start_compiling()
                self.kernels += 1
            self._depth += 1

    def on_end(self, ev=None) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0:
                self.seconds += time.perf_counter() - self._started

    def _listen(self) -> None:
        from numba.core import event

        watch = self

        class Listener(event.Listener):
            def on_start(self, ev: event.Event) -> None:
                watch.on_start(ev)

            def on_end(self, ev: event.Event) -> None:
                watch.on_end(ev)

        self._listener = Listener()
        event.register(COMPILE_EVENT, self._listener)

    def __enter__(self) -> CompileWatch:
        if "numba" in sys.modules:
            self._listen()
        else:
            _waiting.add(self)
        return self

    def __exit__(self, *exc) -> None:
        _waiting.discard(self)
        if self._listener is not None:
            from numba.core import event

            event.unregister(COMPILE_EVENT, self._listener)
            self._listener = None


def numba_imported() -> None:
    """Start the watches waiting for numba: called as the kernels' cache is set up, before any
    kernel is defined."""
    for watch in list(_waiting):
        _waiting.discard(watch)
        watch._listen()

"""Ctrl-C and compiled kernels: hold the interrupt while a kernel runs, raise it when it is back.

A kernel that returns named state hands it back through Python objects; if Ctrl-C is pending at
that moment, the interrupt is raised inside numba's hand-back, which cannot unwind it, and the
process crashes (SIGSEGV). So while a kernel runs on the main thread, SIGINT only records itself,
and the interrupt is raised (or the previous handler called) once the kernel has returned.
"""

from __future__ import annotations

import functools
import signal
import threading
from collections.abc import Callable
from contextlib import contextmanager
from typing import TypeVar

F = TypeVar("F", bound=Callable)


@contextmanager
def interrupts_held():
    """Run the body with Ctrl-C held; deliver it after the body, as the previous handler would."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signals are handled on the main thread only
        return
    pending: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if pending:
        if callable(previous):
            previous(signal.SIGINT, None)
        elif previous == signal.SIG_DFL:
            raise KeyboardInterrupt


def holds_interrupts(function: F) -> F:
    """Decorate a Python function that calls kernels: Ctrl-C waits until it returns."""

    @functools.wraps(function)
    def held(*args, **kwargs):
        with interrupts_held():
            return function(*args, **kwargs)

    return held  # type: ignore[return-value]

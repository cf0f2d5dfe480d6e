"""Atomic loads and stores of int64 array elements, for kernels on several threads that hand work
to each other through shared arrays instead of locks.

A thread writes its data with plain stores, then `store_release`s a flag; a thread that sees the
flag with `load_acquire` then sees the data (release/acquire ordering, on every CPU). A spinning
loop calls `backoff`: a few `pause`s first (x86), then `sched_yield`s, then naps of 50 µs, so that
a wait of more than about 0.2 ms (a thread descheduled on a busy machine, a slow round) hands the
core to whatever else is ready to run.

>>> import numpy as np
>>> from numba import njit
>>> @njit
... def bump(flags):
...     store_release(flags, 0, load_acquire(flags, 0) + 1)
...     return load_acquire(flags, 0), backoff(0), backoff(100), backoff(1000)
>>> bump(np.zeros(1, dtype=np.int64))
(1, 1, 101, 1001)
"""

from __future__ import annotations

import platform
import sys

from llvmlite import ir
from numba import njit
from numba.core import cgutils, types
from numba.extending import intrinsic

_X86 = platform.machine().lower() in {"x86_64", "amd64", "i386", "i686"}
_POSIX = sys.platform != "win32"
PAUSES_BEFORE_YIELDING = 64
YIELDS_BEFORE_NAPPING = 512  # a yield takes about 0.4 µs
NAP_MICROSECONDS = 50


def _element_pointer(context, builder, array_type, array, index):
    array = context.make_array(array_type)(context, builder, array)
    return cgutils.get_item_pointer(context, builder, array_type, array, [index])


def _is_int64_array(array) -> bool:
    return isinstance(array, types.Array) and array.dtype == types.int64 and array.ndim == 1


@intrinsic
def load_acquire(typingctx, array, index):
    """array[index], read with acquire ordering: later reads see what was written before the
    matching `store_release`."""
    if not _is_int64_array(array) or not isinstance(index, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        pointer = _element_pointer(context, builder, signature.args[0], args[0], args[1])
        return builder.load_atomic(pointer, "acquire", 8)

    return types.int64(array, types.intp), codegen


@intrinsic
def store_release(typingctx, array, index, value):
    """array[index] = value, with release ordering: whoever sees the value sees every write before it."""
    if not _is_int64_array(array) or not isinstance(index, types.Integer) or not isinstance(value, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        pointer = _element_pointer(context, builder, signature.args[0], args[0], args[1])
        builder.store_atomic(args[2], pointer, "release", 8)
        return context.get_dummy_value()

    return types.none(array, types.intp, types.int64), codegen


@intrinsic
def cpu_relax(typingctx):
    """A hint that this thread is spinning (x86 `pause`): it lets the other thread run faster."""

    def codegen(context, builder, signature, args):
        if _X86:
            pause = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse2.pause"
            )
            builder.call(pause, [])
        return context.get_dummy_value()

    return types.none(), codegen


@intrinsic
def sched_yield(typingctx):
    """The C library's `sched_yield` (a no-op where there is none): let another ready thread run."""

    def codegen(context, builder, signature, args):
        if _POSIX:
            function = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.IntType(32), []), "sched_yield"
            )
            builder.call(function, [])
        return context.get_dummy_value()

    return types.none(), codegen


@intrinsic
def nap(typingctx, microseconds):
    """The C library's `usleep` (a `sched_yield` where there is none): sleep that long, or a bit more."""
    if not isinstance(microseconds, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        if _POSIX:
            function = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.IntType(32), [ir.IntType(32)]), "usleep"
            )
            builder.call(function, [builder.trunc(args[0], ir.IntType(32))])
        return context.get_dummy_value()

    return types.none(types.int64), codegen


@njit
def backoff(spins):
    """Wait a little in a spinning loop that has gone round `spins` times; returns spins + 1."""
    if spins < PAUSES_BEFORE_YIELDING:
        cpu_relax()
    elif spins < PAUSES_BEFORE_YIELDING + YIELDS_BEFORE_NAPPING:
        sched_yield()
    else:
        nap(NAP_MICROSECONDS)
    return spins + 1

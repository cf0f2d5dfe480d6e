"""Asking the processor to fetch an array element ahead of its use, for loops that chase indices.

A merge rewrites words scattered over hundreds of MB: each word's start, length and tokens are a
cache miss, and a loop that reads them only when it reaches the word waits for each in turn. The
loop instead takes the next words off the pair's list first and calls `prefetch` on what it will
read a few words later, so that those loads overlap the work on the words before them. A prefetch
is a hint: it changes no value and never faults, even on an index past the array's end.

>>> import numpy as np
>>> from numba import njit
>>> @njit
... def total(a, rows):
...     prefetch(a, 3)
...     prefetch(rows, 1)
...     return a.sum() + rows.sum()
>>> int(total(np.arange(4), np.ones((2, 2))))
10
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_READ, _KEEP_IN_ALL_CACHES, _DATA = 0, 3, 1  # llvm.prefetch's rw, locality and cache-type arguments


@intrinsic
def prefetch(typingctx, array, index):
    """Hint that `array[index]` will be read soon: an element of a 1-D array, or the first element
    of row `index` of a 2-D C-contiguous one (a hash table's slot)."""
    if not (isinstance(array, types.Array) and isinstance(index, types.Integer)):
        return None
    if not (array.ndim == 1 or (array.ndim == 2 and array.layout == "C")):
        return None

    def codegen(context, builder, signature, args):
        view = context.make_array(signature.args[0])(context, builder, args[0])
        offset = context.cast(builder, args[1], signature.args[1], types.intp)
        if signature.args[0].ndim == 2:  # row `index` starts `index` * (row length) elements in
            offset = builder.mul(offset, cgutils.unpack_tuple(builder, view.shape)[1])
        byte_pointer = ir.IntType(8).as_pointer()
        address = builder.bitcast(builder.gep(view.data, [offset]), byte_pointer)
        int32 = ir.IntType(32)
        hint = ir.FunctionType(ir.VoidType(), [byte_pointer, int32, int32, int32])
        function = cgutils.get_or_insert_function(builder.module, hint, "llvm.prefetch.p0i8")
        builder.call(function, [address, *(ir.Constant(int32, v) for v in (_READ, _KEEP_IN_ALL_CACHES, _DATA))])
        return context.get_dummy_value()

    return types.void(array, index), codegen

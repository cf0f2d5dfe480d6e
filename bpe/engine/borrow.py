"""Borrowed views of arrays: the same memory without a reference count, for hot loops.

numba counts references to an array each time it is handed to a helper function (an atomic
increment and decrement of the array's owner), even when the helper is inlined. In a loop that
calls helpers millions of times (a hash-table insert per pre-token, a pair-count update per merge
site), that counting cost more than the work: the counting kernels ran 3x slower than the same
code written out in one loop. A kernel therefore takes a borrowed view of its arrays at the top
and hands those to its helpers. The view is only valid while the kernel holds the original, so it
must never be returned or stored: kernels return their original arrays.

>>> import numpy as np
>>> from numba import njit
>>> @njit
... def total(a):
...     view = borrowed(a)
...     return view.sum()
>>> int(total(np.arange(4)))
6
"""

from __future__ import annotations

from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def borrowed(typingctx, array):
    """A view of `array` (same data, shape and strides) that no reference count follows."""
    if not isinstance(array, types.Array):
        return None

    def codegen(context, builder, signature, args):
        source = context.make_array(signature.args[0])(context, builder, args[0])
        view = context.make_array(signature.return_type)(context, builder)
        for field in ("data", "shape", "strides", "itemsize", "nitems"):
            setattr(view, field, getattr(source, field))
        view.meminfo = cgutils.get_null_value(view.meminfo.type)
        view.parent = cgutils.get_null_value(view.parent.type)
        return view._getvalue()

    return array(array), codegen

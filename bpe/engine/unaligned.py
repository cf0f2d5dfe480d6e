"""Reading eight bytes of a byte array at once, from any position: what lets a hash take a word's
bytes a machine word at a time rather than one by one.

>>> import numpy as np
>>> from numba import njit
>>> @njit
... def second_to_ninth(data):
...     return load_u64(data, 1)
>>> hex(second_to_ninth(np.frombuffer(b"\\x00\\x01\\x02\\x03\\x04\\x05\\x06\\x07\\x08", dtype=np.uint8)))
'0x807060504030201'
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic


@intrinsic
def load_u64(typingctx, array, index):
    """The bytes array[index:index + 8] as one little-endian uint64 (x86 and ARM are little-endian),
    from a C-contiguous uint8 array. Unchecked, like the kernels' other reads: the caller keeps
    index + 8 within the array."""
    if not (isinstance(array, types.Array) and array.dtype == types.uint8 and array.ndim == 1):
        return None
    if array.layout != "C" or not isinstance(index, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        view = context.make_array(signature.args[0])(context, builder, args[0])
        offset = context.cast(builder, args[1], signature.args[1], types.intp)
        address = builder.bitcast(builder.gep(view.data, [offset]), ir.IntType(64).as_pointer())
        return builder.load(address, align=1)

    return types.uint64(array, index), codegen

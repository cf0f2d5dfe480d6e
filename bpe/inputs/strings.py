"""Arrow arrays built from their buffers: documents from their UTF-8 bytes, masks, counts.

`pa.array(...)` imports pandas the first time it runs, on a list or a NumPy array alike (pyarrow
checks whether it is a pandas object): a quarter of a second and 50-60 MB in every process that
reads text or writes counts, more than a small training run needs in all, and a fifth of what a
Dask worker holds before it holds a word. Building the array from its buffers imports nothing.

>>> large_strings(["a", None, "bc"]).to_pylist()
['a', None, 'bc']
>>> booleans(np.array([True, False, True])).to_pylist()
[True, False, True]
>>> int64s(np.array([3, 1], dtype=np.int32)).to_pylist()
[3, 1]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa


def large_strings(texts: Sequence[str | None]) -> pa.LargeStringArray:
    """`texts` as a large_string array (None: a null). A lone surrogate raises UnicodeEncodeError,
    as `pa.array` does."""
    encoded = [b"" if text is None else text.encode("utf-8") for text in texts]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    nulls = [text is None for text in texts]
    validity = None
    if any(nulls):
        validity = pa.py_buffer(np.packbits(~np.array(nulls, dtype=bool), bitorder="little"))
    return pa.LargeStringArray.from_buffers(
        len(encoded), pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded)), validity, sum(nulls)
    )


def booleans(mask: np.ndarray) -> pa.BooleanArray:
    """A NumPy boolean mask as an Arrow boolean array (for `filter`)."""
    packed = np.packbits(np.asarray(mask, dtype=bool), bitorder="little")
    return pa.BooleanArray.from_buffers(pa.bool_(), len(mask), [None, pa.py_buffer(packed)])


def int64s(values: np.ndarray) -> pa.Int64Array:
    """NumPy integers as an Arrow int64 array (shares the buffer when they already are int64)."""
    values = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Int64Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


def first_not_utf8(array: pa.Array) -> int | None:
    """The index of the first string of `array` whose bytes are not UTF-8 (by Arrow's full check),
    or None: where counting found one, found again in the array as the caller gave it.

    >>> first_not_utf8(pa.array([b"ok", b"", b"bad \\xff", b"x"], pa.binary()).view(pa.string()))
    2
    """
    try:
        array.validate(full=True)
        return None
    except pa.ArrowInvalid:
        pass
    low, high = 0, len(array)  # the first such string is in array[low:high]
    while high - low > 1:
        middle = (low + high) // 2
        try:
            array.slice(low, middle - low).validate(full=True)
            low = middle
        except pa.ArrowInvalid:
            high = middle
    return low

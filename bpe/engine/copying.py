"""Copying one array into another inside kernels, element by element.

numba compiles `a[i:j] = b` with a shape check whose error message formats both shapes: about
five seconds of compiling in every process that compiles such a kernel, for a copy that a loop
does as fast. The kernels copy with these instead:

>>> import numpy as np
>>> a = np.zeros(4, dtype=np.int64)
>>> copy_into(a[1:3], np.array([7, 8]))
>>> a.tolist()
[0, 7, 8, 0]
"""

from __future__ import annotations

from numba import njit

from bpe.engine import kernel_cache  # noqa: F401  (sets where the kernels below are cached)


@njit(cache=True)
def copy_into(target, source):
    """`target[:] = source` for 1-D arrays of one length (`target` a slice of a larger array)."""
    for i in range(len(source)):
        target[i] = source[i]


@njit(cache=True)
def copy_rows_into(target, source):
    """`target[:] = source` for 2-D arrays of one shape."""
    for i in range(source.shape[0]):
        for j in range(source.shape[1]):
            target[i, j] = source[i, j]

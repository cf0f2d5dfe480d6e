"""FNV-1a, the byte-string hash of counting: stable, the same in every process (Python's own hash
is salted per process), so that a row or a word lands in the same bucket wherever it is hashed.

>>> data = np.frombuffer(b"a", dtype=np.uint8)
>>> hex(fnv1a(data, 0, 1))
'0xaf63dc4c8601ec8c'
"""

from __future__ import annotations

import numpy as np
from numba import njit

from bpe.engine import kernel_cache  # noqa: F401  (sets where the kernels below are cached)

FNV_OFFSET_BASIS = np.uint64(14695981039346656037)
FNV_PRIME = np.uint64(1099511628211)


@njit
def fnv1a_step(h, byte):
    """The hash `h` extended by one byte."""
    return (h ^ np.uint64(byte)) * FNV_PRIME


@njit
def fnv1a(data, start, end):
    """FNV-1a of data[start:end]."""
    h = FNV_OFFSET_BASIS
    for i in range(start, end):
        h = fnv1a_step(h, data[i])
    return h


@njit(cache=True, nogil=True)
def hash_buckets(data, offsets, n):
    """FNV-1a of each byte string data[offsets[i]:offsets[i + 1]], modulo n."""
    out = np.empty(len(offsets) - 1, dtype=np.int64)
    for r in range(len(offsets) - 1):
        out[r] = np.int64(fnv1a(data, offsets[r], offsets[r + 1]) % np.uint64(n))
    return out

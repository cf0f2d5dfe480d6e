"""Pairs of token ids as single int64 keys, and the open-addressing lookup both pair tables use.

A pair (a, b) travels and is stored as a << 32 | b: `pack` makes the key, `unpack` takes it apart,
in kernels and in Python alike. A table is an (capacity, k) int64 array whose column KEY_COLUMN
holds key + 1 (0 marks an empty slot); capacity is a power of two, and the table holds at most
`most_pairs(capacity)` pairs (three quarters full: at half, as before, a table that had just
doubled was a quarter full, and the superword stage's two tables of millions of pairs took 800 MB).

>>> key = pack(1, 2)
>>> key, unpack(key)
(4294967298, (1, 2))
"""

from __future__ import annotations

import numpy as np
from numba import njit

from bpe.engine.prefetch import prefetch

PAIR_SHIFT = np.int64(32)
LOW32 = np.int64(0xFFFFFFFF)
KEY_COLUMN = 0


@njit
def pack(a, b):
    """The key of pair (a, b)."""
    return (np.int64(a) << PAIR_SHIFT) | np.int64(b)


@njit
def unpack(key):
    """The pair (a, b) of a key."""
    return key >> PAIR_SHIFT, key & LOW32


@njit
def most_pairs(capacity):
    """The most pairs a table of `capacity` slots holds before it grows: three quarters."""
    return capacity - capacity // 4


@njit
def mixed(key):
    """The key's bits mixed, so that pairs differing only in high bits land apart."""
    h = np.uint64(key)
    h = (h ^ (h >> np.uint64(29))) * np.uint64(0x9E3779B97F4A7C15)
    return h ^ (h >> np.uint64(32))


@njit
def bucket_of(sketch, key):
    """The counter of `key` in a sketch (a power-of-two array of counters shared by pairs)."""
    return np.int64(mixed(key) & np.uint64(len(sketch) - 1))


@njit(inline="always")
def _first_slot(table, key):
    """The slot where the search for `key` starts."""
    return mixed(key) & np.uint64(len(table) - 1)


@njit
def slot_of(table, key):
    """The slot holding `key`, or the empty slot where it would go (linear probing)."""
    mask = np.uint64(len(table) - 1)
    i = _first_slot(table, key)
    stored = key + 1
    while table[i, KEY_COLUMN] != 0 and table[i, KEY_COLUMN] != stored:
        i = (i + np.uint64(1)) & mask
    return np.int64(i)


@njit(inline="always")
def fetch_slot_of(table, key):
    """Ask the processor for the slot where the search for `key` starts (`prefetch`): a loop that
    calls it some keys ahead of `slot_of` finds that slot in cache."""
    prefetch(table, np.int64(_first_slot(table, key)))

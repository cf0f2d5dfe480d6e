"""Several word tables that take each round in one compiled call: a Dask holder of several word
buckets (a multilingual parity run's hash bucket of each language) applies every merge to each and
hands back each table's deltas, one table's after the other, with where each ends (`split` them).
Calling each table's kernels from Python costs about 25 µs a call, two calls a table a round, which
a parity run (one merge a round) pays thousands of times.

>>> from bpe.engine.count import WordCounts
>>> group = TableGroup([WordTable(WordCounts.from_dict({b"abab": 1})), WordTable(WordCounts.from_dict({b"ab": 2}))])
>>> [deltas.tolist() for _, deltas in split(*group.take_deltas())]  # the initial counts: ab ba ab, ab x 2
[[2, 1], [2]]
>>> [deltas.tolist() for _, deltas in split(*group.apply_and_take(np.array([[97, 98, 256]])))]
[[-2, -1, 1], [-2]]
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.typed import List

from bpe.engine import kernel_cache  # noqa: F401  (sets where the kernels below are cached)
from bpe.engine.copying import copy_into
from bpe.engine.word_table import WordTable, words_apply_merges, words_take_deltas

Deltas = tuple[np.ndarray, np.ndarray]
Joined = tuple[np.ndarray, np.ndarray, np.ndarray]  # every table's keys, then deltas, one after the other; ends


class TableGroup:
    """Word tables whose rounds are applied together. The tables' own states are brought up to date
    by `sync` (before reading them: a checkpoint, their statistics)."""

    def __init__(self, tables: list[WordTable]) -> None:
        self.tables = tables
        self._states = typed_list([table._state for table in tables], tables[0]._state)

    def take_deltas(self) -> Joined:
        """Each table's (pair keys, count deltas) since the last call, joined."""
        return _take_all(self._states)

    def apply_and_take(self, merges: np.ndarray) -> Joined:
        """Apply merges ((n, 3) int64: a, b, new id) to every table; each table's deltas, joined."""
        return _apply_and_take_all(self._states, np.ascontiguousarray(merges[:, :3], dtype=np.int64))

    def sync(self) -> None:
        """Give each table its state as the rounds left it."""
        for i, table in enumerate(self.tables):
            table._state = _get(self._states, i)


def join(parts: list[Deltas]) -> Joined:
    """Several tables' deltas as `TableGroup` gives them: keys and deltas one after the other, ends."""
    ends = np.cumsum([len(keys) for keys, _ in parts], dtype=np.int64)
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), ends
    return np.concatenate([k for k, _ in parts]), np.concatenate([d for _, d in parts]), ends


def split(keys: np.ndarray, deltas: np.ndarray, ends: np.ndarray) -> list[Deltas]:
    """Each table's (keys, deltas) from joined deltas (views, not copies)."""
    starts = [0, *ends[:-1].tolist()]
    return [(keys[s:e], deltas[s:e]) for s, e in zip(starts, ends.tolist(), strict=True)]


def typed_list(items: list, like: object) -> List:
    """`items` (each of the type of `like`) as a typed list, for a kernel to loop over."""
    out = _new_list(like)
    for item in items:
        _append(out, item)
    return out


@njit(cache=True)
def _new_list(like):
    """An empty typed list for items like `like` (made in a cached kernel: numba's own list
    methods, called from Python, would compile in every worker process)."""
    items = List()
    items.append(like)
    items.pop()
    return items


@njit(cache=True)
def _append(items, item):
    items.append(item)


@njit(cache=True)
def _get(items, i):
    return items[i]


@njit(cache=True)
def _apply_and_take_all(states, merges):
    """Apply `merges` to every state in turn; their deltas, one after the other, and where each ends."""
    for i in range(len(states)):
        states[i] = words_apply_merges(states[i], merges)
    return _take_all(states)


@njit(cache=True)
def _take_all(states):
    parts = List()
    total = 0
    ends = np.empty(len(states), dtype=np.int64)
    for i in range(len(states)):
        keys, deltas = words_take_deltas(states[i])
        parts.append((keys, deltas))
        total += len(keys)
        ends[i] = total
    keys = np.empty(total, dtype=np.int64)
    deltas = np.empty(total, dtype=np.int64)
    start = 0
    for i in range(len(parts)):
        k, d = parts[i]
        copy_into(keys[start : start + len(k)], k)
        copy_into(deltas[start : start + len(k)], d)
        start += len(k)
    return keys, deltas, ends

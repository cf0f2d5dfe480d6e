"""The count side of the merge loop: global pair counts, a max-heap, and the choice of merges.

Counts change only through deltas reported by word tables. The heap uses lazy deletion: a pair is
pushed whenever its count grows; an entry whose count went stale is fixed when it reaches the top.

Order: highest count first; ties go to the greatest pair of token byte strings (`tie_break="bytes"`,
comparing the first tokens' bytes, then the second's) or of token ids (`tie_break="ids"`).

A round may take several merges when that provably equals merging one at a time. Merging (a, b)
changes the count of a pair only if the pair ends with a or starts with b (or holds a at all, when
a == b): call those the pairs it touches. Walk the pairs in order; keep taking pairs that no pair
taken before touches; stop at the first one that is touched, and give back the taken pairs
(except the first) whose count is not strictly above the stopping pair's. A kept pair's count is
unchanged by the merges before it, pairs that rank above it are all taken, and every pair a merge
creates counts at most as much as a pair that merge touches, which ranks at or below the stopping
pair - strictly below the kept pair - so none can overtake it. The one exception: the pairs that
(a, a) creates are bounded only by (a, a) itself ("a a a" becomes "X a"), so a round ends after a
pair (a, a), and the next pair in order is its stopping pair.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from bpe.errors import SettingsError
from bpe.pair_keys import slot_of

TIE_BREAKS = {"bytes": 0, "ids": 1}
LOW32 = np.int64(0xFFFFFFFF)


class PairQueue:
    """Pair counts summed over all word tables, and the vocabulary's byte strings."""

    def __init__(self, tie_break: str = "bytes") -> None:
        if tie_break not in TIE_BREAKS:
            raise SettingsError(f"--tie-break: expected one of {', '.join(TIE_BREAKS)}, got {tie_break!r}")
        self._state = _new(TIE_BREAKS[tie_break])

    def add(self, keys: np.ndarray, deltas: np.ndarray) -> None:
        """Apply count deltas (pair keys a << 32 | b)."""
        self._state = _add(self._state, np.asarray(keys, np.int64), np.asarray(deltas, np.int64))

    def next_round(self, max_merges: int, min_frequency: int = 1) -> np.ndarray:
        """The merges of the next round as an (n, 4) array (a, b, new id, count); empty when done."""
        self._state, merges = _next_round(self._state, max(int(max_merges), 0), int(min_frequency))
        return merges

    def best_count(self) -> int:
        """Count of the pair that would be merged next (0 when no pair is left)."""
        self._state = _grow(self._state, 0, 1, 0, 0)
        return int(_peek(self._state))

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._state)


# ---------------------------------------------------------------------------------------------
# Kernels. State: (counts, heap_count, heap_key, tok_start, tok_len, tok_data, marks, meta) with
# counts an (capacity, 3) table of [key + 1, count, last call that changed it] and meta = [pairs,
# heap size, tokens, token bytes used, round number, tie-break, calls of _add].


@njit(cache=True)
def _new(tie_break):
    counts = np.zeros((1 << 12, 3), dtype=np.int64)  # every table grows by doubling as pairs arrive
    heap_count = np.empty(1 << 12, dtype=np.int64)
    heap_key = np.empty(1 << 12, dtype=np.int64)
    tok_start = np.empty(1 << 12, dtype=np.int64)
    tok_len = np.empty(1 << 12, dtype=np.int64)
    tok_data = np.empty(1 << 16, dtype=np.uint8)
    marks = np.zeros((1 << 12, 2), dtype=np.int64)
    for t in range(256):
        tok_start[t] = t
        tok_len[t] = 1
        tok_data[t] = t
    meta = np.zeros(8, dtype=np.int64)
    meta[2] = 256
    meta[3] = 256
    meta[5] = tie_break
    return (counts, heap_count, heap_key, tok_start, tok_len, tok_data, marks, meta)


@njit(inline="always")
def _compare_tokens(tok_start, tok_len, tok_data, x, y):
    """-1, 0 or 1 as the byte string of token x is below, equal to or above that of token y."""
    if x == y:
        return 0
    sx, lx = tok_start[x], tok_len[x]
    sy, ly = tok_start[y], tok_len[y]
    for i in range(min(lx, ly)):
        bx, by = tok_data[sx + i], tok_data[sy + i]
        if bx != by:
            return 1 if bx > by else -1
    if lx == ly:
        return 0
    return 1 if lx > ly else -1


@njit(inline="always")
def _ranks_above(state, c1, k1, c2, k2):
    """Does (count c1, pair k1) come before (c2, k2)?"""
    if c1 != c2:
        return c1 > c2
    if state[7][5] == 1:
        return k1 > k2
    tok_start, tok_len, tok_data = state[3], state[4], state[5]
    first = _compare_tokens(tok_start, tok_len, tok_data, k1 >> 32, k2 >> 32)
    if first != 0:
        return first > 0
    return _compare_tokens(tok_start, tok_len, tok_data, k1 & LOW32, k2 & LOW32) > 0


@njit(inline="always")
def _push(state, count, key):
    heap_count, heap_key, meta = state[1], state[2], state[7]
    i = meta[1]
    meta[1] += 1
    while i > 0:
        parent = (i - 1) >> 1
        if not _ranks_above(state, count, key, heap_count[parent], heap_key[parent]):
            break
        heap_count[i] = heap_count[parent]
        heap_key[i] = heap_key[parent]
        i = parent
    heap_count[i] = count
    heap_key[i] = key


@njit(inline="always")
def _pop(state):
    heap_count, heap_key, meta = state[1], state[2], state[7]
    top_count, top_key = heap_count[0], heap_key[0]
    meta[1] -= 1
    n = meta[1]
    count, key = heap_count[n], heap_key[n]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        if child + 1 < n and _ranks_above(
            state, heap_count[child + 1], heap_key[child + 1], heap_count[child], heap_key[child]
        ):
            child += 1
        if not _ranks_above(state, heap_count[child], heap_key[child], count, key):
            break
        heap_count[i] = heap_count[child]
        heap_key[i] = heap_key[child]
        i = child
    heap_count[i] = count
    heap_key[i] = key
    return top_count, top_key


@njit(cache=True)
def _grow(state, new_pairs, new_heap, new_tokens, new_bytes):
    counts, heap_count, heap_key, tok_start, tok_len, tok_data, marks, meta = state
    if meta[0] + new_pairs >= len(counts) // 2:
        capacity = len(counts)
        while meta[0] + new_pairs >= capacity // 2:
            capacity *= 2
        bigger = np.zeros((capacity, 3), dtype=np.int64)
        for r in range(len(counts)):
            if counts[r, 0] != 0:
                bigger[slot_of(bigger, counts[r, 0] - 1)] = counts[r]
        counts = bigger
    if meta[1] + new_heap > len(heap_count):
        size = max(2 * len(heap_count), meta[1] + new_heap)
        more_count = np.empty(size, dtype=np.int64)
        more_key = np.empty(size, dtype=np.int64)
        more_count[: meta[1]] = heap_count[: meta[1]]
        more_key[: meta[1]] = heap_key[: meta[1]]
        heap_count, heap_key = more_count, more_key
    if meta[2] + new_tokens > len(tok_start):
        size = max(2 * len(tok_start), meta[2] + new_tokens)
        more_start = np.empty(size, dtype=np.int64)
        more_len = np.empty(size, dtype=np.int64)
        more_marks = np.zeros((size, 2), dtype=np.int64)
        more_start[: meta[2]] = tok_start[: meta[2]]
        more_len[: meta[2]] = tok_len[: meta[2]]
        more_marks[: meta[2]] = marks[: meta[2]]
        tok_start, tok_len, marks = more_start, more_len, more_marks
    if meta[3] + new_bytes > len(tok_data):
        more_data = np.empty(max(2 * len(tok_data), meta[3] + new_bytes), dtype=np.uint8)
        more_data[: meta[3]] = tok_data[: meta[3]]
        tok_data = more_data
    return (counts, heap_count, heap_key, tok_start, tok_len, tok_data, marks, meta)


@njit(cache=True)
def _add(state, keys, deltas):
    """Add deltas (a key may come several times, from several word tables); push each pair whose
    count went up once, with its final count."""
    state = _grow(state, len(keys), len(keys), 0, 0)
    counts, meta = state[0], state[7]
    meta[6] += 1
    call = meta[6]
    slots = np.empty(len(keys), dtype=np.int64)
    before = np.full(len(keys), -1, dtype=np.int64)
    for i in range(len(keys)):
        slot = slot_of(counts, keys[i])
        if counts[slot, 0] == 0:
            counts[slot, 0] = keys[i] + 1
            meta[0] += 1
        if counts[slot, 2] != call:
            counts[slot, 2] = call
            before[i] = counts[slot, 1]
        counts[slot, 1] += deltas[i]
        slots[i] = slot
    for i in range(len(keys)):
        if before[i] >= 0:
            count = counts[slots[i], 1]
            if count < 0:
                raise ValueError("a pair count went negative: the deltas do not match the counts")
            if count > before[i]:
                _push(state, count, keys[i])
    return state


@njit(inline="always")
def _pop_valid(state):
    """The top entry whose count is current, fixing stale entries on the way; (-1, -1) if none."""
    counts, meta = state[0], state[7]
    while meta[1] > 0:
        stored, key = _pop(state)
        current = counts[slot_of(counts, key), 1]
        if current == stored:
            return stored, key
        if 0 < current < stored:
            _push(state, current, key)
    return -1, -1


@njit(cache=True)
def _peek(state):
    count, key = _pop_valid(state)
    if count < 0:
        return 0
    _push(state, count, key)
    return count


MAX_ROUND = 256  # merges per round at most; a cap keeps the round's scratch arrays small
ENDS_WITH, STARTS_WITH = 0, 1  # marks[t, ENDS_WITH] == round: pairs ending with t are touched


@njit(cache=True)
def _next_round(state, max_merges, min_frequency):
    max_merges = min(max_merges, MAX_ROUND)
    state = _grow(state, 0, max_merges + 2, max_merges, 0)
    marks, meta = state[6], state[7]
    meta[4] += 1
    this_round = meta[4]
    taken_key = np.empty(max(max_merges, 1), dtype=np.int64)
    taken_count = np.empty(max(max_merges, 1), dtype=np.int64)
    k = 0
    stop_count = -1
    while k <= max_merges:
        count, key = _pop_valid(state)
        if count < 0:
            break
        a, b = key >> 32, key & LOW32
        if count < min_frequency or k == max_merges:
            _push(state, count, key)
            stop_count = count
            break
        if marks[b, ENDS_WITH] == this_round or marks[a, STARTS_WITH] == this_round:
            _push(state, count, key)
            stop_count = count
            break
        duplicate = False  # a second heap entry of a pair taken this round
        for t in range(k):
            duplicate = duplicate or taken_key[t] == key
        if duplicate:
            continue
        taken_key[k] = key
        taken_count[k] = count
        marks[a, ENDS_WITH] = this_round
        marks[b, STARTS_WITH] = this_round
        k += 1
        if a == b:
            max_merges = k  # pairs that (a, a) creates are bounded only by (a, a): the round ends here
    while k > 1 and taken_count[k - 1] <= stop_count:
        k -= 1
        _push(state, taken_count[k], taken_key[k])
    new_bytes = 0
    for t in range(k):
        new_bytes += state[4][taken_key[t] >> 32] + state[4][taken_key[t] & LOW32]
    state = _grow(state, 0, 0, 0, new_bytes)
    tok_start, tok_len, tok_data, meta = state[3], state[4], state[5], state[7]
    merges = np.empty((k, 4), dtype=np.int64)
    for t in range(k):
        a, b = taken_key[t] >> 32, taken_key[t] & LOW32
        new = meta[2]
        used = meta[3]
        tok_start[new] = used
        tok_len[new] = tok_len[a] + tok_len[b]
        tok_data[used : used + tok_len[a]] = tok_data[tok_start[a] : tok_start[a] + tok_len[a]]
        tok_data[used + tok_len[a] : used + tok_len[new]] = tok_data[tok_start[b] : tok_start[b] + tok_len[b]]
        meta[2] = new + 1
        meta[3] = used + tok_len[new]
        merges[t, 0] = a
        merges[t, 1] = b
        merges[t, 2] = new
        merges[t, 3] = taken_count[t]
    return state, merges

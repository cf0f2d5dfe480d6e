"""The word side of the merge loop: unique words as token ids, and which words hold each pair.

Applying merge (a, b) -> X visits only the words that hold the pair (an inverted index pair ->
words) and reports how pair counts changed next to each merge site, as deltas. For a word
[1, 2, 3, 1, 2] of frequency 1, merge (1, 2) -> 256 gives [256, 3, 256] and the deltas
(1, 2): -2, (2, 3): -1, (3, 1): -1, (256, 3): +1, (3, 256): +1.

The local engine keeps one table; the Dask engine keeps one per worker, and sums the deltas.
All hot loops are numba kernels over flat arrays; `WordTable` is the small Python face.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from bpe.count import WordCounts
from bpe.pair_keys import slot_of

PAIR_SHIFT = np.int64(32)
LOW32 = np.int64(0xFFFFFFFF)
TOUCHED = np.int64(1) << np.int64(40)

# Columns of the pair table: key + 1 (0 = empty slot), head of the list of words holding the
# pair, delta accumulated since the last report, and (last word linked + 1) | TOUCHED.
_KEY, _HEAD, _DELTA, _FLAGS = 0, 1, 2, 3


class WordTable:
    """Words of one shard with frequencies, rewritten in place as merges arrive."""

    def __init__(self, counts: WordCounts) -> None:
        tokens = counts.data.astype(np.int32)
        lengths = np.diff(counts.offsets).astype(np.int32)
        self._state = _build(tokens, counts.offsets[:-1].astype(np.int64), lengths, counts.counts.astype(np.int64))

    @classmethod
    def from_words(cls, tokens: np.ndarray, lengths: np.ndarray, freqs: np.ndarray) -> WordTable:
        """A table over words given as token ids (flat, with each word's length): a checkpoint."""
        table = cls.__new__(cls)
        starts = np.zeros(len(lengths), dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        table._state = _build(tokens.astype(np.int32), starts, lengths.astype(np.int32), freqs.astype(np.int64))
        table.take_deltas()
        return table

    def to_words(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(tokens, lengths, freqs) of the words as they stand, compacted: what a checkpoint keeps."""
        tokens, starts, lengths, freqs = self._state[:4]
        keep = np.repeat(starts, lengths) + _ranges(lengths)
        return tokens[keep].copy(), lengths.copy(), freqs.copy()

    @property
    def n_words(self) -> int:
        return len(self._state[1])

    def take_deltas(self) -> tuple[np.ndarray, np.ndarray]:
        """(pair keys, count deltas) accumulated since the last call; the first call gives the initial counts."""
        return _take_deltas(self._state)

    def apply(self, merges: np.ndarray) -> None:
        """Apply merges in order; `merges` is an (n, 3) int64 array of (a, b, new id)."""
        self._state = _apply_merges(self._state, np.ascontiguousarray(merges, dtype=np.int64))

    def words(self) -> list[list[int]]:
        """Current token ids of every word (for tests and checkpoints)."""
        tokens, starts, lengths = self._state[0], self._state[1], self._state[2]
        return [tokens[starts[w] : starts[w] + lengths[w]].tolist() for w in range(len(starts))]

    def token_count(self) -> int:
        """Tokens of all word occurrences as they stand: sum of frequency x length."""
        lengths, freqs = self._state[2], self._state[3]
        return int((lengths.astype(np.int64) * freqs).sum())

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._state)


def _ranges(lengths: np.ndarray) -> np.ndarray:
    """[2, 3] -> [0, 1, 0, 1, 2]: the position of every token inside its word."""
    total = int(lengths.sum())
    ends = np.cumsum(lengths)
    return np.arange(total, dtype=np.int64) - np.repeat(ends - lengths, lengths)


# ---------------------------------------------------------------------------------------------
# Kernels. The state is a tuple:
# (tokens, starts, lengths, freqs, pairs, node_word, node_next, touched, meta)
# meta = [pairs used, nodes used, free node list head, touched count, free nodes]. A word list is
# a singly linked list of nodes; lists of merged pairs are recycled into the free list.


@njit(inline="always")
def _slot_for(pairs, meta, key):
    """The slot of `key`, inserting it if new (the caller guarantees room)."""
    i = slot_of(pairs, key)
    if pairs[i, _KEY] == 0:
        pairs[i, _KEY] = key + 1
        pairs[i, _HEAD] = -1
        pairs[i, _DELTA] = 0
        pairs[i, _FLAGS] = 0
        meta[0] += 1
    return i


@njit(inline="always")
def _add_delta(pairs, touched, meta, slot, delta):
    pairs[slot, _DELTA] += delta
    if not pairs[slot, _FLAGS] & TOUCHED:
        pairs[slot, _FLAGS] |= TOUCHED
        touched[meta[3]] = slot
        meta[3] += 1


@njit(inline="always")
def _link(pairs, node_word, node_next, meta, slot, word):
    """Record that `word` holds the pair in `slot` (once per word in a row)."""
    if pairs[slot, _FLAGS] & LOW32 == word + 1:
        return
    pairs[slot, _FLAGS] = (pairs[slot, _FLAGS] & ~LOW32) | (word + 1)
    node = meta[2]
    if node >= 0:
        meta[2] = node_next[node]
        meta[4] -= 1
    else:
        node = meta[1]
        meta[1] += 1
    node_word[node] = word
    node_next[node] = pairs[slot, _HEAD]
    pairs[slot, _HEAD] = node


@njit(cache=True, nogil=True)
def _build(tokens, starts, lengths, freqs):
    total_pairs = 0
    for w in range(len(starts)):
        total_pairs += max(lengths[w] - 1, 0)
    capacity = 1 << 12  # small inputs stay small; the table doubles as pairs arrive
    pairs = np.zeros((capacity, 4), dtype=np.int64)
    n_nodes = total_pairs + 1024
    node_word = np.empty(n_nodes, dtype=np.int32)
    node_next = np.empty(n_nodes, dtype=np.int32)
    touched = np.empty(capacity // 2 + 1, dtype=np.int32)
    meta = np.zeros(5, dtype=np.int64)
    meta[2] = -1
    state = (tokens, starts, lengths, freqs, pairs, node_word, node_next, touched, meta)
    w = 0
    while w < len(starts):
        w = _index_words(tokens, starts, lengths, freqs, pairs, node_word, node_next, touched, meta, w)
        if w < len(starts):
            state = _make_room(state, lengths[w], 0)
            pairs, touched = state[4], state[7]
    return state


@njit(cache=True, nogil=True)
def _index_words(tokens, starts, lengths, freqs, pairs, node_word, node_next, touched, meta, first):
    """Count and index the pairs of words `first`, `first` + 1, ...; returns where it stopped (the
    number of words when done, earlier when the pair table needs room first)."""
    for w in range(first, len(starts)):
        if meta[0] + lengths[w] >= len(pairs) // 2:
            return w
        s = starts[w]
        for i in range(lengths[w] - 1):
            key = (np.int64(tokens[s + i]) << PAIR_SHIFT) | tokens[s + i + 1]
            slot = _slot_for(pairs, meta, key)
            _add_delta(pairs, touched, meta, slot, freqs[w])
            _link(pairs, node_word, node_next, meta, slot, w)
    return len(starts)


@njit(cache=True, nogil=True)
def _make_room(state, new_pairs, new_nodes):
    """Grow the pair table and node pool so that `new_pairs` pairs and `new_nodes` nodes fit."""
    tokens, starts, lengths, freqs, pairs, node_word, node_next, touched, meta = state
    if meta[0] + new_pairs >= len(pairs) // 2:
        capacity = len(pairs)
        while meta[0] + new_pairs >= capacity // 2:
            capacity *= 2
        old = pairs
        pairs = np.zeros((capacity, 4), dtype=np.int64)
        touched = np.empty(capacity // 2 + 1, dtype=np.int32)
        meta[3] = 0
        for r in range(len(old)):
            if old[r, _KEY] != 0:
                i = slot_of(pairs, old[r, _KEY] - 1)
                pairs[i] = old[r]
                if old[r, _FLAGS] & TOUCHED:
                    touched[meta[3]] = i
                    meta[3] += 1
    if meta[1] + new_nodes - meta[4] > len(node_word):
        size = max(len(node_word) + len(node_word) // 4, meta[1] + new_nodes - meta[4])
        more_word = np.empty(size, dtype=np.int32)
        more_next = np.empty(size, dtype=np.int32)
        more_word[: meta[1]] = node_word[: meta[1]]
        more_next[: meta[1]] = node_next[: meta[1]]
        node_word, node_next = more_word, more_next
    return (tokens, starts, lengths, freqs, pairs, node_word, node_next, touched, meta)


@njit(cache=True, nogil=True)
def _apply_merges(state, merges):
    for m in range(len(merges)):
        a, b, new = merges[m, 0], merges[m, 1], merges[m, 2]
        pairs = state[4]
        merged = slot_of(pairs, (a << PAIR_SHIFT) | b)
        if pairs[merged, _KEY] == 0:
            continue  # no word of this shard holds the pair
        node = pairs[merged, _HEAD]
        pairs[merged, _HEAD] = -1
        while node >= 0:
            tokens, starts, lengths, freqs, pairs, node_word, node_next, touched, meta = state
            node = _merge_words(
                tokens, starts, lengths, freqs, pairs, node_word, node_next, touched, meta, node, a, b, new
            )
            if node >= 0:
                state = _make_room(state, 2 * lengths[node_word[node]], 2 * lengths[node_word[node]])
    return state


@njit(cache=True, nogil=True)
def _merge_words(tokens, starts, lengths, freqs, pairs, node_word, node_next, touched, meta, node, a, b, new):
    """Rewrite the words listed from `node` on, recording deltas and linking words to new pairs.

    Returns -1 when the list is done, or the node to resume from when the tables need room first
    (a word of length n adds at most n pairs and n nodes).
    """
    merged = slot_of(pairs, (a << PAIR_SHIFT) | b)
    while node >= 0:
        w = node_word[node]
        length = lengths[w]
        if meta[0] + 2 * length >= len(pairs) // 2 or meta[1] + 2 * length - meta[4] > len(node_word):
            return node
        following = node_next[node]
        node_next[node] = meta[2]  # recycle the node
        meta[2] = node
        meta[4] += 1
        node = following
        s = starts[w]
        f = freqs[w]
        i = 0
        j = 0
        while i < length:
            t = tokens[s + i]
            if t == a and i + 1 < length and tokens[s + i + 1] == b:
                _add_delta(pairs, touched, meta, merged, -f)
                if j > 0:
                    before = np.int64(tokens[s + j - 1])
                    _add_delta(pairs, touched, meta, slot_of(pairs, (before << PAIR_SHIFT) | a), -f)
                    slot = _slot_for(pairs, meta, (before << PAIR_SHIFT) | new)
                    _add_delta(pairs, touched, meta, slot, f)
                    _link(pairs, node_word, node_next, meta, slot, w)
                if i + 2 < length:
                    after = np.int64(tokens[s + i + 2])
                    _add_delta(pairs, touched, meta, slot_of(pairs, (b << PAIR_SHIFT) | after), -f)
                    slot = _slot_for(pairs, meta, (new << PAIR_SHIFT) | after)
                    _add_delta(pairs, touched, meta, slot, f)
                    _link(pairs, node_word, node_next, meta, slot, w)
                tokens[s + j] = new
                i += 2
            else:
                tokens[s + j] = t
                i += 1
            j += 1
        lengths[w] = j
    return -1


@njit(cache=True, nogil=True)
def _take_deltas(state):
    pairs, touched, meta = state[4], state[7], state[8]
    n = meta[3]
    keys = np.empty(n, dtype=np.int64)
    deltas = np.empty(n, dtype=np.int64)
    k = 0
    for t in range(n):
        slot = touched[t]
        d = pairs[slot, _DELTA]
        if d != 0:
            keys[k] = pairs[slot, _KEY] - 1
            deltas[k] = d
            k += 1
        pairs[slot, _DELTA] = 0
        pairs[slot, _FLAGS] &= ~TOUCHED
    meta[3] = 0
    return keys[:k].copy(), deltas[:k].copy()

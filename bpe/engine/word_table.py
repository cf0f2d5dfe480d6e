"""The word side of the merge loop: unique words as token ids, and which words hold each pair.

Applying merge (a, b) -> X visits only the words that hold the pair (an inverted index pair ->
words) and reports how pair counts changed next to each merge site, as deltas.
The local engine keeps one table; the Dask engine keeps one per worker, and sums the deltas.
All hot loops are numba kernels over flat arrays; `WordTable` is the small Python face.

For a word [1, 2, 3, 1, 2] of frequency 1, merge (1, 2) -> 256 gives [256, 3, 256]; the pair
(1, 2) is lost twice, (2, 3) and (3, 1) once each, and (256, 3), (3, 256) appear:

>>> from bpe.engine.pair_keys import unpack
>>> table = WordTable.from_words(np.array([1, 2, 3, 1, 2]), lengths=np.array([5]), freqs=np.array([1]))
>>> table.apply(np.array([[1, 2, 256]]))
>>> table.words()
[[256, 3, 256]]
>>> keys, deltas = table.take_deltas()
>>> dict(sorted((unpack(key), int(delta)) for key, delta in zip(keys, deltas)))
{(1, 2): -2, (2, 3): -1, (3, 1): -1, (3, 256): 1, (256, 3): 1}
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable

import numpy as np
from numba import njit

from bpe.engine import kernel_cache  # noqa: F401  (sets where the kernels below are cached)
from bpe.engine.borrow import borrowed
from bpe.engine.count import WordCounts
from bpe.engine.interrupts import holds_interrupts
from bpe.engine.pair_keys import KEY_COLUMN, LOW32, pack, slot_of
from bpe.engine.replay import BaseMerges

# The kernels' state. tokens, starts, lengths, freqs: the words (word w is
# tokens[starts[w]:starts[w] + lengths[w]], rewritten in place). pairs: the pair table (columns
# below). node_word, node_next: a word list is a singly linked list of nodes; lists of merged
# pairs are recycled into the free list. touched: slots whose delta changed since the last report.
# meta: the counters below.
WordState = namedtuple(
    "WordState", ["tokens", "starts", "lengths", "freqs", "pairs", "node_word", "node_next", "touched", "meta"]
)

# Columns of the pair table (24 bytes a pair: the table is the largest part of a big word table):
# key + 1 (0 = empty slot), the delta accumulated since the last report, and the links: bits 0-31
# hold the head of the list of words holding the pair + 1 (0 = none), bits 32-62 the last word
# linked + 1, and the sign bit is TOUCHED (the delta changed since the last report).
_DELTA, _LINKS = 1, 2
_PAIR_COLUMNS = 3
TOUCHED = np.int64(np.iinfo(np.int64).min)
_WORD_SHIFT = np.int64(32)
_LAST_WORD = np.int64(0x7FFFFFFF) << _WORD_SHIFT

# Entries of meta: pairs in the table, nodes ever used, head of the free node list (-1 = empty),
# touched slots, nodes in the free list.
_PAIRS_USED, _NODES_USED, _FREE_HEAD, _N_TOUCHED, _FREE_NODES = range(5)
_META_SIZE = _FREE_NODES + 1


class WordTable:
    """Words with frequencies (all of them, or one slice or bucket), rewritten in place as merges arrive."""

    @holds_interrupts
    def __init__(self, counts: WordCounts, base: BaseMerges | None = None) -> None:
        """The words of `counts` as bytes, or as they stand after the `base` tokenizer's merges."""
        if base is None:
            tokens = counts.data.astype(np.int32)
            lengths = np.diff(counts.offsets).astype(np.int32)
            starts = counts.offsets[:-1].astype(np.int64)
        else:
            tokens, lengths = base.replay(counts)
            starts = np.zeros(len(lengths), dtype=np.int64)
            np.cumsum(lengths[:-1], out=starts[1:])
        self._state = _build(tokens, starts, lengths, counts.counts.astype(np.int64))

    @classmethod
    @holds_interrupts
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
        state = self._state
        keep = np.repeat(state.starts, state.lengths) + _ranges(state.lengths)
        return state.tokens[keep].copy(), state.lengths.copy(), state.freqs.copy()

    @property
    def n_words(self) -> int:
        return len(self._state.starts)

    @holds_interrupts
    def take_deltas(self) -> tuple[np.ndarray, np.ndarray]:
        """(pair keys, count deltas) accumulated since the last call; the first call gives the initial counts."""
        return words_take_deltas(self._state)

    @holds_interrupts
    def apply(self, merges: np.ndarray) -> None:
        """Apply merges in order; `merges` is an (n, 3) int64 array of (a, b, new id)."""
        self._state = words_apply_merges(self._state, np.ascontiguousarray(merges, dtype=np.int64))

    def apply_and_take(self, merges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One round: `apply`, then `take_deltas`, for a loop of rounds on a worker thread or holding
        Ctrl-C itself: `merges` is a contiguous int64 array, (a, b, new id) in its first columns."""
        self._state = words_apply_merges(self._state, merges)
        return words_take_deltas(self._state)

    def lend(self, loop: Callable[..., tuple], *args) -> tuple:
        """Run `loop(state, *args)`, a compiled loop of rounds of the engine (`merge.py`,
        `spin_rounds.py`) over this table's kernel state (a `WordState`), which returns the state it
        leaves first: this table keeps it, and the rest is returned."""
        result = loop(self._state, *args)
        self._state = result[0]
        return result[1:]

    def words(self) -> list[list[int]]:
        """Current token ids of every word (for tests and checkpoints)."""
        tokens, starts, lengths = self._state.tokens, self._state.starts, self._state.lengths
        return [tokens[starts[w] : starts[w] + lengths[w]].tolist() for w in range(len(starts))]

    def token_count(self) -> int:
        """Tokens of all word occurrences as they stand: sum of frequency x length."""
        return int((self._state.lengths.astype(np.int64) * self._state.freqs).sum())

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._state)


def _ranges(lengths: np.ndarray) -> np.ndarray:
    """[2, 3] -> [0, 1, 0, 1, 2]: the position of every token inside its word."""
    total = int(lengths.sum())
    ends = np.cumsum(lengths)
    return np.arange(total, dtype=np.int64) - np.repeat(ends - lengths, lengths)


# ---------------------------------------------------------------------------------------------
# Kernels over a WordState. Loops that may need bigger tables return to a driver that grows them
# (`_make_room`) and re-enters: inside a loop the arrays stay fixed, which keeps it fast. The word
# side of a round, `words_apply_merges` then `words_take_deltas`, is public: the engine's compiled
# merge loops call it on a state lent them (`WordTable.lend`).


@njit
def _borrowed_words(state):
    """The state as borrowed views (see `borrow.py`), for a kernel's loop; never returned."""
    return WordState(
        borrowed(state.tokens), borrowed(state.starts), borrowed(state.lengths), borrowed(state.freqs),
        borrowed(state.pairs), borrowed(state.node_word), borrowed(state.node_next), borrowed(state.touched),
        borrowed(state.meta),
    )  # fmt: skip


@njit
def _slot_for(pairs, meta, key):
    """The slot of `key`, inserting it if new (the caller guarantees room)."""
    i = slot_of(pairs, key)
    if pairs[i, KEY_COLUMN] == 0:
        pairs[i, KEY_COLUMN] = key + 1
        pairs[i, _DELTA] = 0
        pairs[i, _LINKS] = 0
        meta[_PAIRS_USED] += 1
    return i


@njit
def _add_delta(pairs, touched, meta, slot, delta):
    pairs[slot, _DELTA] += delta
    if pairs[slot, _LINKS] >= 0:
        pairs[slot, _LINKS] |= TOUCHED
        touched[meta[_N_TOUCHED]] = slot
        meta[_N_TOUCHED] += 1


@njit
def _link(pairs, node_word, node_next, meta, slot, word):
    """Record that `word` holds the pair in `slot` (once per word in a row)."""
    links = pairs[slot, _LINKS]
    if links & _LAST_WORD == (word + 1) << _WORD_SHIFT:
        return
    node = meta[_FREE_HEAD]
    if node >= 0:
        meta[_FREE_HEAD] = node_next[node]
        meta[_FREE_NODES] -= 1
    else:
        node = meta[_NODES_USED]
        meta[_NODES_USED] += 1
    node_word[node] = word
    node_next[node] = (links & LOW32) - 1
    pairs[slot, _LINKS] = (links & TOUCHED) | ((word + 1) << _WORD_SHIFT) | (node + 1)


@njit(cache=True, nogil=True)
def _build(tokens, starts, lengths, freqs):
    total_pairs = 0
    for w in range(len(starts)):
        total_pairs += max(lengths[w] - 1, 0)
    capacity = 1 << 12  # small inputs stay small; the table doubles as pairs arrive
    n_nodes = total_pairs + 1024
    meta = np.zeros(_META_SIZE, dtype=np.int64)
    meta[_FREE_HEAD] = -1
    state = WordState(
        tokens,
        starts,
        lengths,
        freqs,
        np.zeros((capacity, _PAIR_COLUMNS), dtype=np.int64),
        np.empty(n_nodes, dtype=np.int32),
        np.empty(n_nodes, dtype=np.int32),
        np.empty(capacity // 2 + 1, dtype=np.int32),
        meta,
    )
    w = 0
    while w < len(starts):
        w = _index_words(state, w)
        if w < len(starts):
            state = _make_room(state, lengths[w], 0)
    return state


@njit(cache=True, nogil=True)
def _index_words(state, first):
    """Count and index the pairs of words `first`, `first` + 1, ...; returns where it stopped (the
    number of words when done, earlier when the pair table needs room first)."""
    state = _borrowed_words(state)
    tokens, starts, lengths, freqs = state.tokens, state.starts, state.lengths, state.freqs
    pairs, touched, meta = state.pairs, state.touched, state.meta
    node_word, node_next = state.node_word, state.node_next
    for w in range(first, len(starts)):
        if meta[_PAIRS_USED] + lengths[w] >= len(pairs) // 2:
            return w
        s = starts[w]
        for i in range(lengths[w] - 1):
            slot = _slot_for(pairs, meta, pack(tokens[s + i], tokens[s + i + 1]))
            _add_delta(pairs, touched, meta, slot, freqs[w])
            _link(pairs, node_word, node_next, meta, slot, w)
    return len(starts)


@njit(cache=True, nogil=True)
def _make_room(state, new_pairs, new_nodes):
    """Grow the pair table and node pool so that `new_pairs` pairs and `new_nodes` nodes fit."""
    pairs, touched, meta = state.pairs, state.touched, state.meta
    node_word, node_next = state.node_word, state.node_next
    if meta[_PAIRS_USED] + new_pairs >= len(pairs) // 2:
        capacity = len(pairs)
        while meta[_PAIRS_USED] + new_pairs >= capacity // 2:
            capacity *= 2
        old = pairs
        pairs = np.zeros((capacity, _PAIR_COLUMNS), dtype=np.int64)
        touched = np.empty(capacity // 2 + 1, dtype=np.int32)
        meta[_N_TOUCHED] = 0
        for r in range(len(old)):
            if old[r, KEY_COLUMN] != 0:
                i = slot_of(pairs, old[r, KEY_COLUMN] - 1)
                pairs[i] = old[r]
                if old[r, _LINKS] < 0:  # TOUCHED
                    touched[meta[_N_TOUCHED]] = i
                    meta[_N_TOUCHED] += 1
    needed = meta[_NODES_USED] + new_nodes - meta[_FREE_NODES]
    if needed > len(node_word):
        size = max(len(node_word) + len(node_word) // 4, needed)
        used = meta[_NODES_USED]
        more_word = np.empty(size, dtype=np.int32)
        more_next = np.empty(size, dtype=np.int32)
        more_word[:used] = node_word[:used]
        more_next[:used] = node_next[:used]
        node_word, node_next = more_word, more_next
    return WordState(state.tokens, state.starts, state.lengths, state.freqs, pairs, node_word, node_next, touched, meta)


@njit(cache=True, nogil=True)
def words_apply_merges(state, merges):
    """Apply merges in order, each an (a, b, new id) row of `merges`."""
    for m in range(len(merges)):
        a, b, new = merges[m, 0], merges[m, 1], merges[m, 2]
        pairs = state.pairs
        merged = slot_of(pairs, pack(a, b))
        if pairs[merged, KEY_COLUMN] == 0:
            continue  # no word of this table holds the pair
        node = (pairs[merged, _LINKS] & LOW32) - 1
        pairs[merged, _LINKS] &= ~LOW32
        while node >= 0:
            node = _merge_words(state, node, a, b, new)
            if node >= 0:
                length = state.lengths[state.node_word[node]]
                state = _make_room(state, 2 * length, 2 * length)
    return state


@njit(cache=True, nogil=True)
def _merge_words(state, node, a, b, new):
    """Rewrite the words listed from `node` on by merge (a, b) -> new, recording deltas and
    linking words to new pairs.

    Returns -1 when the list is done, or the node to resume from when the tables need room first
    (a word of length n adds at most n pairs and n nodes).
    """
    state = _borrowed_words(state)
    tokens, starts, lengths, freqs = state.tokens, state.starts, state.lengths, state.freqs
    pairs, touched, meta = state.pairs, state.touched, state.meta
    node_word, node_next = state.node_word, state.node_next
    merged = slot_of(pairs, pack(a, b))
    while node >= 0:
        w = node_word[node]
        length = lengths[w]
        if meta[_PAIRS_USED] + 2 * length >= len(pairs) // 2 or (
            meta[_NODES_USED] + 2 * length - meta[_FREE_NODES] > len(node_word)
        ):
            return node
        following = node_next[node]
        node_next[node] = meta[_FREE_HEAD]  # recycle the node
        meta[_FREE_HEAD] = node
        meta[_FREE_NODES] += 1
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
                    before = tokens[s + j - 1]
                    _add_delta(pairs, touched, meta, slot_of(pairs, pack(before, a)), -f)
                    slot = _slot_for(pairs, meta, pack(before, new))
                    _add_delta(pairs, touched, meta, slot, f)
                    _link(pairs, node_word, node_next, meta, slot, w)
                if i + 2 < length:
                    after = tokens[s + i + 2]
                    _add_delta(pairs, touched, meta, slot_of(pairs, pack(b, after)), -f)
                    slot = _slot_for(pairs, meta, pack(new, after))
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
def words_take_deltas(state):
    """(pair keys, count deltas) of the pairs whose count changed since the last call; resets them."""
    pairs, touched, meta = state.pairs, state.touched, state.meta
    n = meta[_N_TOUCHED]
    keys = np.empty(n, dtype=np.int64)
    deltas = np.empty(n, dtype=np.int64)
    k = 0
    for t in range(n):
        slot = touched[t]
        d = pairs[slot, _DELTA]
        if d != 0:
            keys[k] = pairs[slot, KEY_COLUMN] - 1
            deltas[k] = d
            k += 1
        pairs[slot, _DELTA] = 0
        pairs[slot, _LINKS] &= ~TOUCHED
    meta[_N_TOUCHED] = 0
    return keys[:k].copy(), deltas[:k].copy()

"""The count side of the merge loop: global pair counts, a max-heap, and the choice of merges.

Counts change only through deltas reported by word tables. The heap uses lazy deletion: a pair is
pushed whenever its count grows; an entry whose count went stale is fixed when it reaches the top.
Pairs counted once wait outside the heap until nothing else is left (`HEAP_FLOOR`), and a full heap
is made again from the pair table before it grows, which drops its stale entries. The pairs a round
takes and gives back (below) are set aside in order for the next round rather than pushed back.

Order: highest count first; ties go to the greatest pair of token byte strings (`tie_break="bytes"`,
comparing the first tokens' bytes, then the second's) or of token ids (`tie_break="ids"`). Merges
may make two tokens of the same bytes ("a" + "aa" and "aa" + "a"), so two pairs may have the same
byte strings: between those, the lower pair of ids (first ids, then second) goes first.

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

`max_token_length` L: a pair whose token would be longer than L bytes is never chosen. Token
lengths never change, so such a pair is counted as usual but never enters the heap, and the walk
above goes over the pairs that may be chosen. The argument holds among those: a pair that a merge
(a, b) creates, (x, ab) say, is longer than the touched pair (x, a) that bounds it, so if it may be
chosen, so may (x, a), which therefore ranks at or below the stopping pair.

`SuperwordRules` (the second stage of a superword tokenizer, `bpe.training.superwords`): a pair whose
token would hold more than `max_words` words (runs of bytes other than the space, b" ") or, unless
`colon_space`, the bytes b": " is never chosen either. Like the length, these depend only on the
token's bytes, and a token that keeps them leaves every part of it keeping them (a part of a token
holds no more words than the token, and no b": " the token does not), so the argument above holds
for them too.

Two pairs that do not touch each other are taken in one round; the third, (2, 3), is touched by
(1, 2) and stops the round:

>>> from bpe.engine.pair_keys import pack
>>> from bpe.engine.rules import MergeRules
>>> rules = MergeRules(tie_break="bytes", min_frequency=1, max_token_length=None, superwords=None)
>>> queue = PairQueue(rules)
>>> queue.add(np.array([pack(1, 2), pack(3, 4), pack(2, 3)]), np.array([5, 4, 3]))
>>> queue.next_round(max_merges=10).tolist()  # rows (a, b, new id, count)
[[1, 2, 256, 5], [3, 4, 257, 4]]

A round ends after a pair (a, a), even when the next pair does not touch it:

>>> queue = PairQueue(rules)
>>> queue.add(np.array([pack(97, 97), pack(98, 99)]), np.array([6, 2]))
>>> queue.next_round(max_merges=10).tolist()
[[97, 97, 256, 6]]
>>> queue.next_round(max_merges=10).tolist()
[[98, 99, 257, 2]]
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable

import numpy as np
from numba import njit

from bpe.engine import (
    TIE_BREAKS,
    kernel_cache,  # noqa: F401  (sets where the kernels below are cached)
)
from bpe.engine.borrow import borrowed
from bpe.engine.copying import copy_into, copy_rows_into
from bpe.engine.interrupts import holds_interrupts
from bpe.engine.pair_keys import KEY_COLUMN, fetch_slot_of, most_pairs, slot_of, unpack
from bpe.engine.rules import MergeRules

TIE_BREAK_CODES = {name: code for code, name in enumerate(TIE_BREAKS)}
_BY_IDS = TIE_BREAK_CODES["ids"]

# The kernels' state. counts: the pair table, columns below. heap_count, heap_key: the max-heap.
# tok_start, tok_len, tok_data: token t's bytes are tok_data[tok_start[t]:tok_start[t] + tok_len[t]].
# tok_shape: what the superword rules read of token t's bytes (`_shape_of_byte`). marks: which tokens
# this round's merges touch (columns ENDS_WITH, STARTS_WITH below). meta: the counters below.
QueueState = namedtuple(
    "QueueState",
    ["counts", "heap_count", "heap_key", "tok_start", "tok_len", "tok_data", "tok_shape", "marks", "meta"],
)

# Columns of the pair table (16 bytes a pair): key + 1 (0 = empty slot), count.
_COUNT = 1
_PAIR_COLUMNS = 2

# Entries of meta: pairs in the table, heap size, tokens, token bytes used, rounds, tie-break code,
# the heap's floor (below), the longest token a merge may make in bytes (0: no limit), the most words
# a token may hold (0: no limit), whether a token may hold b": " (1: it may not), the entries set aside.
_N_PAIRS, _HEAP_SIZE, _N_TOKENS, _BYTES_USED, _ROUND, _TIE_BREAK, _FLOOR, _MAX_LEN, _MAX_WORDS, _NO_COLON_SPACE = range(
    10
)
_SET_ASIDE = 10  # entries set aside (`_set_aside`) at the end of the heap's arrays
_META_SIZE = _SET_ASIDE + 1

# The heap holds the pairs counted at least `meta[_FLOOR]` times: most pairs of a large corpus
# occur once (71% of the superword stage's on the English corpus), and a merge of count 1 comes
# last if at all. Should the heap run dry with such pairs left, the floor drops to 1 and the heap is
# refilled from the pair table, which holds every count; a round that runs out of the heap stops as
# if at a pair of count floor - 1, the most an unheld pair can have.
HEAP_FLOOR = 2
_SPACE, _COLON = 0x20, 0x3A

# A token's shape, what the superword rules read of its bytes, made from its parts' shapes when the
# token is made (`_joined_shapes`), so that checking a pair reads two numbers, not the bytes: its
# words (runs of bytes other than the space) in the low 32 bits, and whether it starts with a space,
# ends with one, ends with a colon, or holds b": ".
_WORDS = np.int64(0xFFFFFFFF)
_FIRST_SPACE, _LAST_SPACE, _LAST_COLON, _COLON_SPACE = (np.int64(1) << np.int64(k) for k in range(32, 36))


class PairQueue:
    """Pair counts summed over all word tables, and the vocabulary's byte strings."""

    @holds_interrupts
    def __init__(self, rules: MergeRules) -> None:
        """A queue that chooses by `rules`: ties by `rules.tie_break`; a pair whose token would be
        longer than `rules.max_token_length`, or one the superword rules refuse, never; one
        counted fewer than `rules.min_frequency` times ends the merges (`next_round`)."""
        tie_break, max_token_length, superwords = rules.tie_break, rules.max_token_length, rules.superwords
        self.rules = rules
        self._state = _new(TIE_BREAK_CODES[tie_break])
        self._state.meta[_MAX_LEN] = max_token_length or 0
        self.superwords = superwords
        if superwords is not None:
            self._state.meta[_MAX_WORDS] = superwords.max_words or 0
            self._state.meta[_NO_COLON_SPACE] = 0 if superwords.colon_space else 1

    @holds_interrupts
    def add_tokens(self, merges: np.ndarray) -> None:
        """Make the tokens of merges chosen before this queue ((n, 2) ids, a base tokenizer's), so
        that the merges it chooses take the ids after them and compare their bytes."""
        merges = np.ascontiguousarray(np.asarray(merges, np.int64).reshape(-1, 2))
        self._state = _add_tokens(self._state, merges)

    @holds_interrupts
    def add(self, keys: np.ndarray, deltas: np.ndarray) -> None:
        """Apply count deltas to pairs (keys made by `pair_keys.pack`)."""
        self._state = queue_add_deltas(self._state, np.asarray(keys, np.int64), np.asarray(deltas, np.int64))

    @holds_interrupts
    def next_round(self, max_merges: int) -> np.ndarray:
        """The merges of the next round as an (n, 4) array (a, b, new id, count); empty when done
        (no pair left, or the best one below `min_frequency`)."""
        min_frequency = int(self.rules.min_frequency)
        self._state, merges = queue_next_round(self._state, max(int(max_merges), 0), min_frequency)
        return merges

    @holds_interrupts
    def best_count(self) -> int:
        """Count of the pair that would be merged next (0 when no pair is left)."""
        self._state, count = queue_best_count(self._state)
        return int(count)

    def lend(self, loop: Callable[..., tuple], *args) -> tuple:
        """Run `loop(state, *args)`, a loop of rounds of the engine (`merge.py`, `spin_rounds.py`)
        over this queue's kernel state (a `QueueState`), which returns the state it leaves first:
        the queue keeps it, and the rest is returned. The loop calls `queue_next_round` and
        `queue_add_deltas` itself, compiled or not: no check or Ctrl-C hold per round."""
        result = loop(self._state, *args)
        self._state = result[0]
        return result[1:]

    @holds_interrupts
    def forget_below(self, least: int) -> None:
        """Forget the pairs counted fewer than `least` times (their deltas must not come again:
        `tracked_pairs`), in a pair table and heap sized for those left."""
        self._state = _forget_below(self._state, least)

    @property
    def pair_table(self) -> np.ndarray:
        """The pair counts as a table: key + 1 in column `KEY_COLUMN` (0: an empty slot), count in column 1."""
        return self._state.counts

    def any_pair_left(self) -> bool:
        """Whether any pair still occurs, one too long to merge (or refused by the rules) included."""
        return bool((self._state.counts[:, _COUNT] > 0).any())

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._state)


# ---------------------------------------------------------------------------------------------
# Kernels over a QueueState. The count side of a round, `queue_next_round` then
# `queue_add_deltas`, is public: the engine's merge loops call it on a state lent them
# (`PairQueue.lend`).


@njit(cache=True)
def _new(tie_break):
    """The state of an empty queue over the 256 byte tokens."""
    meta = np.zeros(_META_SIZE, dtype=np.int64)
    meta[_N_TOKENS] = 256
    meta[_BYTES_USED] = 256
    meta[_TIE_BREAK] = tie_break
    meta[_FLOOR] = HEAP_FLOOR
    state = QueueState(  # every table grows by doubling as pairs and tokens arrive
        np.zeros((1 << 12, _PAIR_COLUMNS), dtype=np.int64),
        np.empty(1 << 12, dtype=np.int64),
        np.empty(1 << 12, dtype=np.int64),
        np.empty(1 << 12, dtype=np.int64),
        np.empty(1 << 12, dtype=np.int64),
        np.empty(1 << 16, dtype=np.uint8),
        np.empty(1 << 12, dtype=np.int64),
        np.zeros((1 << 12, 2), dtype=np.int64),
        meta,
    )
    for t in range(256):
        state.tok_start[t] = t
        state.tok_len[t] = 1
        state.tok_data[t] = t
        state.tok_shape[t] = _shape_of_byte(t)
    return state


@njit
def _shape_of_byte(byte):
    """The shape of the token of one byte: a space starts and ends with a space; any other is a word."""
    if byte == _SPACE:
        return _FIRST_SPACE | _LAST_SPACE
    return np.int64(1) | (_LAST_COLON if byte == _COLON else np.int64(0))


@njit
def _joined_shapes(x, y):
    """The shape of a token made of tokens of shapes x then y: their words, less one when x's last
    word goes on into y; b": " if either holds it, or x ends with the colon and y starts with the space."""
    words = (x & _WORDS) + (y & _WORDS)
    if x & _LAST_SPACE == 0 and y & _FIRST_SPACE == 0:  # x ends inside a word, y starts inside one
        words -= 1
    shape = words | (x & _FIRST_SPACE) | (y & (_LAST_SPACE | _LAST_COLON)) | ((x | y) & _COLON_SPACE)
    if x & _LAST_COLON and y & _FIRST_SPACE:
        shape |= _COLON_SPACE
    return shape


@njit
def _borrowed_queue(state):
    """The state as borrowed views (see `borrow.py`), for a kernel's loop; never returned."""
    return QueueState(
        borrowed(state.counts), borrowed(state.heap_count), borrowed(state.heap_key), borrowed(state.tok_start),
        borrowed(state.tok_len), borrowed(state.tok_data), borrowed(state.tok_shape), borrowed(state.marks),
        borrowed(state.meta),
    )  # fmt: skip


@njit
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
    """Does (count c1, pair k1) come before (c2, k2)? The counts, inlined where the heap compares;
    the tie-break a call (`_tie_ranks_above`), whose byte comparison would be inlined at each."""
    if c1 != c2:
        return c1 > c2
    return _tie_ranks_above(state, k1, k2)


@njit
def _tie_ranks_above(state, k1, k2):
    """Of two pairs of the same count, does k1 come before k2 by the tie-break?"""
    if state.meta[_TIE_BREAK] == _BY_IDS:
        return k1 > k2
    a1, b1 = unpack(k1)
    a2, b2 = unpack(k2)
    first = _compare_tokens(state.tok_start, state.tok_len, state.tok_data, a1, a2)
    if first != 0:
        return first > 0
    second = _compare_tokens(state.tok_start, state.tok_len, state.tok_data, b1, b2)
    if second != 0:
        return second > 0
    return k1 < k2  # two tokens of the same bytes ("a" + "aa", "aa" + "a"): the lower ids first


@njit(inline="always")
def _push(state, count, key):
    heap_count, heap_key, meta = state.heap_count, state.heap_key, state.meta
    i = meta[_HEAP_SIZE]
    meta[_HEAP_SIZE] += 1
    while i > 0:
        parent = (i - 1) >> 1
        if not _ranks_above(state, count, key, heap_count[parent], heap_key[parent]):
            break
        _put(heap_count, heap_key, i, heap_count[parent], heap_key[parent])
        i = parent
    _put(heap_count, heap_key, i, count, key)


@njit(inline="always")
def _pop(state):
    heap_count, heap_key, meta = state.heap_count, state.heap_key, state.meta
    top_count, top_key = heap_count[0], heap_key[0]
    meta[_HEAP_SIZE] -= 1
    n = meta[_HEAP_SIZE]
    _sift_down(state, np.int64(0), heap_count[n], heap_key[n], n)
    return top_count, top_key


# Room asked of `_grow` as int64 values rather than literals: numba compiles a kernel again for every
# combination of literal arguments it is called with (six of `_grow`, 17 s of a first run).
_NONE, _ONE = np.int64(0), np.int64(1)


@njit(cache=True)
def _grow(state, new_pairs, new_heap, new_tokens, new_bytes):
    """A state with room for that many more pairs, heap entries, tokens and token bytes."""
    counts, heap_count, heap_key, meta = state.counts, state.heap_count, state.heap_key, state.meta
    tok_start, tok_len, tok_data, tok_shape = state.tok_start, state.tok_len, state.tok_data, state.tok_shape
    marks = state.marks
    if meta[_N_PAIRS] + new_pairs >= most_pairs(len(counts)):
        capacity = len(counts)
        while meta[_N_PAIRS] + new_pairs >= most_pairs(capacity):
            capacity *= 2
        bigger = np.zeros((capacity, _PAIR_COLUMNS), dtype=np.int64)
        for r in range(len(counts)):
            if counts[r, KEY_COLUMN] != 0:
                copy_into(bigger[slot_of(bigger, counts[r, KEY_COLUMN] - 1)], counts[r])
        counts = bigger
    if meta[_HEAP_SIZE] + meta[_SET_ASIDE] + new_heap > len(heap_count):
        # Full: refilled from the pair table, which drops stale entries, in a heap grown by half when
        # that leaves less than a quarter of it free, or fewer free entries than a quarter of the
        # table's slots: a refill reads the whole table, and a heap holding few of its pairs (the
        # local loop's, see `tracked_pairs`) would otherwise be refilled every few rounds.
        held = _held_pairs(state, counts)
        size = len(heap_count)
        room = max(size // 4, len(counts) // 4)
        if held + new_heap > size - room:
            size = max(size + size // 2, held + new_heap + room)
            heap_count = np.empty(size, dtype=np.int64)
            heap_key = np.empty(size, dtype=np.int64)
        state = QueueState(counts, heap_count, heap_key, tok_start, tok_len, tok_data, tok_shape, marks, meta)
        _refill(state)
    n_tokens = meta[_N_TOKENS]
    if n_tokens + new_tokens > len(tok_start):
        size = max(2 * len(tok_start), n_tokens + new_tokens)
        more_start = np.empty(size, dtype=np.int64)
        more_len = np.empty(size, dtype=np.int64)
        more_shape = np.empty(size, dtype=np.int64)
        more_marks = np.zeros((size, 2), dtype=np.int64)
        copy_into(more_start[:n_tokens], tok_start[:n_tokens])
        copy_into(more_len[:n_tokens], tok_len[:n_tokens])
        copy_into(more_shape[:n_tokens], tok_shape[:n_tokens])
        copy_rows_into(more_marks[:n_tokens], marks[:n_tokens])
        tok_start, tok_len, tok_shape, marks = more_start, more_len, more_shape, more_marks
    used = meta[_BYTES_USED]
    if used + new_bytes > len(tok_data):
        more_data = np.empty(max(2 * len(tok_data), used + new_bytes), dtype=np.uint8)
        copy_into(more_data[:used], tok_data[:used])
        tok_data = more_data
    return QueueState(counts, heap_count, heap_key, tok_start, tok_len, tok_data, tok_shape, marks, meta)


@njit(cache=True)
def _forget_below(state, least):
    old = borrowed(state.counts)
    kept = 0
    for r in range(len(old)):
        if old[r, KEY_COLUMN] != 0 and old[r, _COUNT] >= least:
            kept += 1
    capacity = 1 << 12
    while 2 * kept >= most_pairs(capacity):  # room for as many again before it grows
        capacity *= 2
    counts = np.zeros((capacity, _PAIR_COLUMNS), dtype=np.int64)
    kept_counts = borrowed(counts)
    for r in range(len(old)):
        if old[r, KEY_COLUMN] != 0 and old[r, _COUNT] >= least:
            copy_into(kept_counts[slot_of(kept_counts, old[r, KEY_COLUMN] - 1)], old[r])
    state.meta[_N_PAIRS] = kept
    size = max(2 * _held_pairs(state, counts), 1 << 12)
    state = QueueState(counts, np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64), state.tok_start,
                       state.tok_len, state.tok_data, state.tok_shape, state.marks, state.meta)  # fmt: skip
    _refill(state)
    return state


@njit(inline="always")
def _held(state, count, key):
    """Whether the heap holds a pair of `count`: at least the floor, and a token the rules allow."""
    if count < state.meta[_FLOOR]:
        return False
    if state.meta[_MAX_LEN] > 0 or state.meta[_MAX_WORDS] > 0 or state.meta[_NO_COLON_SPACE] > 0:
        a, b = unpack(key)
        return _may_make(state, a, b)
    return True


@njit
def _held_pairs(state, counts):
    """How many pairs of `counts` (a pair table) the heap holds once refilled."""
    state, counts = _borrowed_queue(state), borrowed(counts)
    n = 0
    for r in range(len(counts)):
        if counts[r, KEY_COLUMN] != 0 and _held(state, counts[r, _COUNT], counts[r, KEY_COLUMN] - 1):
            n += 1
    return n


@njit
def _refill(state):
    """The heap made again from the pair table: one entry per pair it holds, at its count."""
    state = _borrowed_queue(state)
    counts, heap_count, heap_key = state.counts, state.heap_count, state.heap_key
    n = np.int64(0)
    for r in range(len(counts)):
        if counts[r, KEY_COLUMN] != 0 and _held(state, counts[r, _COUNT], counts[r, KEY_COLUMN] - 1):
            _put(heap_count, heap_key, n, counts[r, _COUNT], counts[r, KEY_COLUMN] - 1)
            n += 1
    state.meta[_HEAP_SIZE] = n
    state.meta[_SET_ASIDE] = 0  # every pair they held is in the heap now
    for i in range(n // 2 - 1, -1, -1):
        _sift_down(state, i, heap_count[i], heap_key[i], n)


@njit(inline="always")
def _sift_down(state, i, count, key, n):
    """Place (count, key) at i or below, in a heap of n entries whose subtrees below i are heaps."""
    heap_count, heap_key = state.heap_count, state.heap_key
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
        _put(heap_count, heap_key, i, heap_count[child], heap_key[child])
        i = child
    _put(heap_count, heap_key, i, count, key)


@njit(inline="always")
def _put(heap_count, heap_key, i, count, key):
    """Heap entry i becomes (count, key)."""
    heap_count[i] = count
    heap_key[i] = key


@njit(cache=True)
def _with_top(state):
    """The state with a valid entry on top of the heap if any pair may still be merged: when the
    heap ran dry above the floor, the floor drops to 1 and the heap is refilled (grown if needed)."""
    if _best_valid(_borrowed_queue(state)) >= 0:
        return state
    if state.meta[_FLOOR] <= 1:
        return state
    state.meta[_FLOOR] = 1
    held = _held_pairs(state, state.counts)
    if held + 1 > len(state.heap_count):
        size = held + 1 + held // 2
        state = QueueState(
            state.counts, np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64), state.tok_start,
            state.tok_len, state.tok_data, state.tok_shape, state.marks, state.meta,
        )  # fmt: skip
    _refill(state)
    return state


DELTAS_AHEAD = 8  # deltas between asking for a pair's slot (`fetch_slot_of`) and adding to it


@njit(cache=True)
def queue_add_deltas(state, keys, deltas):
    """Add deltas (a key may come several times, from several word tables); push each pair whose
    count went up once, with its final count, if the heap holds it (`_held`)."""
    state = _grow(state, len(keys), len(keys), _NONE, _NONE)
    view = _borrowed_queue(state)
    keys, deltas = borrowed(keys), borrowed(deltas)
    counts, meta = view.counts, view.meta
    slots = np.empty(len(keys), dtype=np.int64)
    before = np.empty(len(keys), dtype=np.int64)
    for i in range(len(keys)):
        if i + DELTAS_AHEAD < len(keys):
            fetch_slot_of(counts, keys[i + DELTAS_AHEAD])
        slot = slot_of(counts, keys[i])
        if counts[slot, KEY_COLUMN] == 0:
            counts[slot, KEY_COLUMN] = keys[i] + 1
            counts[slot, _COUNT] = 0
            meta[_N_PAIRS] += 1
        slots[i] = slot
        before[i] = counts[slot, _COUNT]  # no delta is added before all are read: the count before the call
    for i in range(len(keys)):
        counts[slots[i], _COUNT] += deltas[i]
    # Each pair once, at the first of its keys: its key is negated once seen, then restored.
    for i in range(len(keys)):
        slot = slots[i]
        if counts[slot, KEY_COLUMN] < 0:
            continue
        counts[slot, KEY_COLUMN] = -counts[slot, KEY_COLUMN]
        count = counts[slot, _COUNT]
        if count < 0:
            raise ValueError("a pair count went negative: the deltas do not match the counts")
        if count > before[i] and _held(view, count, keys[i]):
            _push(view, count, keys[i])
    for i in range(len(keys)):
        if counts[slots[i], KEY_COLUMN] < 0:
            counts[slots[i], KEY_COLUMN] = -counts[slots[i], KEY_COLUMN]
    return state


@njit(inline="always")
def _may_make(state, a, b):
    """Whether the rules let a merge make the token a + b: its length, and the superword rules."""
    tok_len, meta = state.tok_len, state.meta
    max_len, max_words, no_colon_space = meta[_MAX_LEN], meta[_MAX_WORDS], meta[_NO_COLON_SPACE]
    if max_len > 0 and tok_len[a] + tok_len[b] > max_len:
        return False
    if max_words == 0 and no_colon_space == 0:
        return True
    shape = _joined_shapes(state.tok_shape[a], state.tok_shape[b])
    if no_colon_space and shape & _COLON_SPACE:
        return False
    return max_words == 0 or shape & _WORDS <= max_words


@njit
def _top_valid(state):
    """The count of the top entry once it is current, stale entries above it fixed on the way (each
    pushed again at its current count if the heap still holds it), left on the heap; -1 if none."""
    counts, meta = state.counts, state.meta
    while meta[_HEAP_SIZE] > 0:
        stored, key = state.heap_count[0], state.heap_key[0]
        current = counts[slot_of(counts, key), _COUNT]
        if current == stored:
            return stored
        _pop(state)
        if 0 < current < stored and current >= meta[_FLOOR]:  # _held: the rules allowed it when pushed
            _push(state, current, key)
    return -1


# A round's walk takes the pairs in order until one that a pair taken before it touches, and then
# gives back most of what it took: at the low counts, where many pairs tie, a round takes tens of
# pairs to keep a few (13 to 1 on the English corpus). Pushed back into the heap and popped again the
# next round, each would cost the heap twice. They are set aside instead, in order, at the end of the
# heap's arrays (meta[_SET_ASIDE] of them, the best one at len - meta[_SET_ASIDE]), and the next walk
# reads them and the heap as one order (`_next_valid`). An entry set aside goes stale as a heap entry
# does (its pair's count changed) and is dealt with as `_top_valid` deals with one.


@njit
def _set_aside(state, count, key):
    """Set (count, key) aside, above the entries set aside already (it ranks above them all)."""
    state.meta[_SET_ASIDE] += 1
    i = len(state.heap_count) - state.meta[_SET_ASIDE]
    _put(state.heap_count, state.heap_key, i, count, key)


@njit
def _aside_valid(state):
    """The count of the best entry set aside once current, stale ones above it dropped (each pushed
    on the heap at its current count where `_top_valid` would push it); -1 if none is left."""
    counts, meta = state.counts, state.meta
    while meta[_SET_ASIDE] > 0:
        i = len(state.heap_count) - meta[_SET_ASIDE]
        stored, key = state.heap_count[i], state.heap_key[i]
        current = counts[slot_of(counts, key), _COUNT]
        if current == stored:
            return stored
        meta[_SET_ASIDE] -= 1
        if 0 < current < stored and current >= meta[_FLOOR]:
            _push(state, current, key)
    return -1


@njit
def _best_valid(state):
    """The count of the best current entry, set aside or on the heap; -1 if none."""
    return max(_aside_valid(state), _top_valid(state))


@njit
def _next_valid(state, aside, top):
    """The best current entry, set aside or on the heap, taken off, given the counts of the best
    of each (`_aside_valid`, `_top_valid`; -1: none), which stay current while no delta comes:
    (count, key, and those counts after it); (-1, -1, ...) if none is left."""
    if aside >= 0:
        key = state.heap_key[len(state.heap_count) - state.meta[_SET_ASIDE]]
        if top < 0 or not _ranks_above(state, top, state.heap_key[0], aside, key):
            state.meta[_SET_ASIDE] -= 1
            count = aside
            aside = _aside_valid(state)  # pushes what it drops at current counts: the top stays current
            top = state.heap_count[0] if state.meta[_HEAP_SIZE] > 0 else np.int64(-1)
            return count, key, aside, top
    if top < 0:
        return np.int64(-1), np.int64(-1), aside, top
    count, key = _pop(state)
    return count, key, aside, _top_valid(state)


@njit(cache=True)
def _peek(state):
    return max(_best_valid(state), 0)


MAX_ROUND = 256  # merges per round at most; a cap keeps the round's scratch arrays small
ENDS_WITH, STARTS_WITH = 0, 1  # marks[t, ENDS_WITH] == round: pairs ending with t are touched


@njit(cache=True)
def _append_token(state, a, b):
    """Token meta[_N_TOKENS] := the bytes of a then b (room made by the caller); returns its id."""
    tok_start, tok_len, tok_data, meta = state.tok_start, state.tok_len, state.tok_data, state.meta
    new = meta[_N_TOKENS]
    used = meta[_BYTES_USED]
    tok_start[new] = used
    tok_len[new] = tok_len[a] + tok_len[b]
    copy_into(tok_data[used : used + tok_len[a]], tok_data[tok_start[a] : tok_start[a] + tok_len[a]])
    copy_into(tok_data[used + tok_len[a] : used + tok_len[new]], tok_data[tok_start[b] : tok_start[b] + tok_len[b]])
    state.tok_shape[new] = _joined_shapes(state.tok_shape[a], state.tok_shape[b])
    meta[_N_TOKENS] = new + 1
    meta[_BYTES_USED] = used + tok_len[new]
    return new


@njit(cache=True)
def queue_add_token(state, a, b):
    """(state, the id of a new token made of the bytes of a then b): a merge another queue chose
    (parity-aware merges keep a queue per language, and every queue knows every token)."""
    state = _grow(state, _NONE, _NONE, _ONE, state.tok_len[a] + state.tok_len[b])
    return state, _append_token(state, a, b)


@njit(cache=True)
def queue_best_count(state):
    """(state, the count of the pair that would be merged next: 0 when no pair is left)."""
    state = _with_top(_grow(state, _NONE, _ONE, _NONE, _NONE))
    return state, _peek(state)


@njit(cache=True)
def _add_tokens(state, merges):
    for k in range(len(merges)):
        a, b = merges[k, 0], merges[k, 1]
        state = _grow(state, _NONE, _NONE, _ONE, state.tok_len[a] + state.tok_len[b])
        _append_token(state, a, b)
    return state


@njit(cache=True)
def queue_next_round(state, max_merges, min_frequency):
    """(state, the next round's merges as (a, b, new id, count) rows: empty when none is left)."""
    max_merges = min(max_merges, MAX_ROUND)
    state = _with_top(_grow(state, _NONE, max_merges + 2, max_merges, _NONE))
    view = _borrowed_queue(state)
    marks, meta = view.marks, view.meta
    meta[_ROUND] += 1
    this_round = meta[_ROUND]
    taken_key = np.empty(max(max_merges, 1), dtype=np.int64)
    taken_count = np.empty(max(max_merges, 1), dtype=np.int64)
    k = 0
    stop_count = -1
    aside = _aside_valid(view)
    top = _top_valid(view)
    while k <= max_merges:
        count, key, aside, top = _next_valid(view, aside, top)
        if count < 0:
            stop_count = meta[_FLOOR] - 1  # what a pair the heap does not hold may count
            break
        a, b = unpack(key)
        if count < min_frequency or k == max_merges:
            _set_aside(view, count, key)
            stop_count = count
            break
        if marks[b, ENDS_WITH] == this_round or marks[a, STARTS_WITH] == this_round:
            _set_aside(view, count, key)
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
    while k > 1 and taken_count[k - 1] <= stop_count:  # the worst first: the best ends on top
        k -= 1
        _set_aside(view, taken_count[k], taken_key[k])
    new_bytes = np.int64(0)
    for t in range(k):
        a, b = unpack(taken_key[t])
        new_bytes += state.tok_len[a] + state.tok_len[b]
    state = _grow(state, _NONE, _NONE, _NONE, new_bytes)
    merges = np.empty((k, 4), dtype=np.int64)
    for t in range(k):
        a, b = unpack(taken_key[t])
        new = _append_token(state, a, b)
        merges[t, 0] = a
        merges[t, 1] = b
        merges[t, 2] = new
        merges[t, 3] = taken_count[t]
    return state, merges

"""The word side of the merge loop: unique words as token ids, and which words hold each pair.

Applying merge (a, b) -> X visits only the words that hold the pair (an inverted index pair ->
words) and reports how pair counts changed next to each merge site, as deltas.
The local engine keeps one table; the Dask engine keeps one per worker, and sums the deltas.
All hot loops are numba kernels over flat arrays; `WordTable` is the small Python face.

A long word (`LONG_WORD` tokens or more: a file without spaces, a run of spaces) is indexed by
position instead: each pair lists where it occurs, and the word's tokens are linked to their
neighbours rather than compacted, so that a merge costs the pair's occurrences, not the word's
length, and memory stays a few bytes per token (a rewrite per merge and room for two new pairs
per token made one huge word cost minutes and 200 bytes per byte).

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
from bpe.engine.copying import copy_into
from bpe.engine.count import WordCounts
from bpe.engine.interrupts import holds_interrupts
from bpe.engine.pair_keys import KEY_COLUMN, LOW32, bucket_of, most_pairs, pack, slot_of, unpack
from bpe.engine.prefetch import prefetch
from bpe.engine.replay import BaseMerges

# The kernels' state. tokens, starts, lengths, freqs: the words (word w is
# tokens[starts[w]:starts[w] + lengths[w]], rewritten in place). pairs: the pair table (columns
# below). node_word, node_next: a word list is a singly linked list of nodes; lists of merged
# pairs are recycled into the free list. touched: slots whose delta changed since the last report.
# meta: the counters below. long_word, long_start, next_gap, prev_gap: the long words (below).
WordState = namedtuple(
    "WordState",
    [
        "tokens", "starts", "lengths", "freqs", "pairs", "node_word", "node_next", "touched", "meta",
        "long_word", "long_start", "next_gap", "prev_gap",
    ],
)  # fmt: skip

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

# Long words. Long word k is word long_word[k] (ascending); its tokens keep their places in
# `tokens`, a merge writing the new token over the first and REMOVED over the second, and its
# positions are long_start[k], long_start[k] + 1, ... in one numbering of all long words' tokens.
# next_gap[c] and prev_gap[c] are how far the next and the previous live token are from position c
# (0: none; meaningful only while c is live). Their pairs are listed by position: a node holds
# len(starts) + c, the pair at position c, which may have gone since (checked when merged).
LONG_WORD = 1024  # tokens; shorter words are rewritten whole, each listed once per pair it holds
REMOVED = -1
# The node pool is allocated for twice the pairs the words start with: merges link words to new
# pairs faster than they free nodes (1.56x the starting pairs after 32,768 merges of the 500 MB
# benchmark corpus), and growing the pool copies it, its old and new arrays both resident for a
# moment (2.25x the pool). Pages never written stay unmapped, so what is reserved beyond what the
# nodes use costs no resident memory.
NODE_RESERVE = 2
_MAX_CODE = (1 << 31) - 2  # words + long positions: node_word and the last-linked field hold codes + 1 in 31 bits


class WordTable:
    """Words with frequencies (all of them, or one slice or bucket), rewritten in place as merges arrive."""

    @holds_interrupts
    def __init__(
        self,
        counts: WordCounts,
        base: BaseMerges | None = None,
        progress: Callable[[int], None] | None = None,
        indexed: bool = True,
        release_words: bool = False,
    ) -> None:
        """The words of `counts` as bytes, or as they stand after the `base` tokenizer's merges.
        `progress(n)`: n more words replayed (with a base), then gone through by each of the
        index's two passes (`_indexed`), as they are.
        `indexed=False`: no pair counted or indexed yet, for `index` to choose which.
        `release_words`: the caller is done with `counts`; a replay hands its bytes back as it goes."""
        if base is None:
            tokens = counts.data.astype(np.int32)
            lengths = np.diff(counts.offsets).astype(np.int32)
            starts = counts.offsets[:-1].astype(np.int64)
        else:
            tokens, lengths = base.replay(counts, LONG_WORD, progress, release=release_words)
            starts = np.zeros(len(lengths), dtype=np.int64)
            np.cumsum(lengths[:-1], out=starts[1:])
        freqs = counts.counts.astype(np.int64)
        if indexed:
            self._state = _built(tokens, starts, lengths, freqs, progress)
        else:
            self._state = _new_state(tokens, starts, lengths, freqs, LONG_WORD)

    @classmethod
    @holds_interrupts
    def from_words(cls, tokens: np.ndarray, lengths: np.ndarray, freqs: np.ndarray) -> WordTable:
        """A table over words given as token ids (flat, with each word's length): a checkpoint."""
        table = cls.__new__(cls)
        starts = np.zeros(len(lengths), dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        tokens, lengths, freqs = tokens.astype(np.int32), lengths.astype(np.int32), freqs.astype(np.int64)
        table._state = _built(tokens, starts, lengths, freqs)
        table.take_deltas()
        return table

    def to_words(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(tokens, lengths, freqs) of the words as they stand, compacted: what a checkpoint keeps."""
        state = self._state
        return _current_tokens(state), state.lengths.copy(), state.freqs.copy()

    @property
    def n_words(self) -> int:
        return len(self._state.starts)

    @holds_interrupts
    def index(self, sketch: np.ndarray, floor: int, progress: Callable[[int], None] | None = None) -> None:
        """Index the words as they stand again, only the pairs whose counter in `sketch` (see
        `add_to_sketch`) reaches `floor` (all for a floor of 0); the next `take_deltas` gives their
        counts. Other pairs are left out until the next index: merges that take them away from a
        word say nothing of it, and every pair a merge makes is indexed as it is made."""
        self._state = _indexed(_emptied(self._state), sketch, floor, progress)

    @holds_interrupts
    def forget_below(self, counts: np.ndarray, least: int) -> None:
        """Forget the pairs that `counts` (a queue's `pair_table`: all tables' counts) counts fewer
        than `least` times, freeing their nodes, in a pair table sized for those left: pairs whose
        count can no longer grow, once the queue takes no pair below `least` (`tracked_pairs`).
        Call it between rounds, with every delta taken."""
        self._state = _forgotten_below(self._state, counts, np.int64(least))

    @holds_interrupts
    def add_to_sketch(self, sketch: np.ndarray) -> None:
        """Add each pair's count in these words to its counter in `sketch` (`pair_keys.bucket_of`)."""
        _sketch_pairs(self._state, sketch)

    @property
    def n_tokens(self) -> int:
        """Tokens of the unique words as they stand (each word once)."""
        return int(self._state.lengths.sum(dtype=np.int64))

    @property
    def pair_count(self) -> int:
        """Pairs in the pair table: all the words' pairs, or those an `index` chose and merges made since."""
        return int(self._state.meta[_PAIRS_USED])

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
        tokens, lengths = _current_tokens(self._state), self._state.lengths
        ends = np.cumsum(lengths)
        return [tokens[end - length : end].tolist() for end, length in zip(ends, lengths)]

    @property
    def long_words(self) -> int:
        """How many words are indexed by position (see `LONG_WORD`)."""
        return len(self._state.long_word)

    def token_count(self) -> int:
        """Tokens of all word occurrences as they stand: sum of frequency x length."""
        return int((self._state.lengths.astype(np.int64) * self._state.freqs).sum())

    @property
    def nbytes(self) -> int:
        """Bytes allocated, the node pool's reserve included (resident only as used: `NODE_RESERVE`)."""
        return sum(a.nbytes for a in self._state)


# ---------------------------------------------------------------------------------------------
# Kernels over a WordState. Loops that may need bigger tables return to a driver that grows them
# (`_make_room`) and re-enters: inside a loop the arrays stay fixed, which keeps it fast. The word
# side of a round, `words_apply_merges` then `words_take_deltas`, is public: the engine's compiled
# merge loops call it on a state lent them (`WordTable.lend`).
#
# The helpers called at every merge site (`_slot_for` to `_room_for`) are inlined by numba itself
# (`inline="always"`): left to LLVM, `_slot_for` stayed a call, and each call of a helper hands it
# its arrays, a reference count call per array even for borrowed views. Inlined, the merge loop on
# one thread took 0.83-0.92x the time on the English corpus and 0.78x at 500 MB (5.7 s against
# 7.3 s), and the word tables still compile in 12-13 s.


@njit
def _borrowed_words(state):
    """The state as borrowed views (see `borrow.py`), for a kernel's loop; never returned."""
    return WordState(
        borrowed(state.tokens), borrowed(state.starts), borrowed(state.lengths), borrowed(state.freqs),
        borrowed(state.pairs), borrowed(state.node_word), borrowed(state.node_next), borrowed(state.touched),
        borrowed(state.meta), borrowed(state.long_word), borrowed(state.long_start), borrowed(state.next_gap),
        borrowed(state.prev_gap),
    )  # fmt: skip


@njit(inline="always")
def _slot_for(pairs, meta, key):
    """The slot of `key`, inserting it if new (the caller guarantees room)."""
    i = slot_of(pairs, key)
    if pairs[i, KEY_COLUMN] == 0:
        pairs[i, KEY_COLUMN] = key + 1
        pairs[i, _DELTA] = 0
        pairs[i, _LINKS] = 0
        meta[_PAIRS_USED] += 1
    return i


@njit(inline="always")
def _add_delta(pairs, touched, meta, slot, delta):
    pairs[slot, _DELTA] += delta
    if pairs[slot, _LINKS] >= 0:
        pairs[slot, _LINKS] |= TOUCHED
        touched[meta[_N_TOUCHED]] = slot
        meta[_N_TOUCHED] += 1


@njit(inline="always")
def _take_away(pairs, touched, meta, key, f):
    """A word of frequency f lost the pair `key`: its delta, unless the index left the pair out."""
    slot = slot_of(pairs, key)
    if pairs[slot, KEY_COLUMN] != 0:
        _add_delta(pairs, touched, meta, slot, -f)


@njit(inline="always")
def _link(pairs, node_word, node_next, meta, slot, word):
    """Record that `word` holds the pair in `slot` (once per word in a row)."""
    links = pairs[slot, _LINKS]
    if links & _LAST_WORD == (word + 1) << _WORD_SHIFT:
        return
    _push_node(pairs, node_word, node_next, meta, slot, word)


@njit(inline="always")
def _push_node(pairs, node_word, node_next, meta, slot, code):
    """Put a node holding `code` (a word, or a long word's position) at the head of the pair's list."""
    links = pairs[slot, _LINKS]
    node = meta[_FREE_HEAD]
    if node >= 0:
        meta[_FREE_HEAD] = node_next[node]
        meta[_FREE_NODES] -= 1
    else:
        node = meta[_NODES_USED]
        meta[_NODES_USED] += 1
    node_word[node] = code
    node_next[node] = (links & LOW32) - 1
    pairs[slot, _LINKS] = (links & TOUCHED) | ((code + 1) << _WORD_SHIFT) | (node + 1)


@njit(inline="always")
def _free_node(node_next, meta, node):
    node_next[node] = meta[_FREE_HEAD]
    meta[_FREE_HEAD] = node
    meta[_FREE_NODES] += 1


@njit(inline="always")
def _room_for(pairs, node_word, meta, new_pairs, new_nodes):
    """Whether `new_pairs` more pairs and `new_nodes` more nodes fit without growing."""
    pairs_fit = meta[_PAIRS_USED] + new_pairs < most_pairs(len(pairs))
    return pairs_fit and meta[_NODES_USED] + new_nodes - meta[_FREE_NODES] <= len(node_word)


INDEX_CHUNK = 1 << 16  # words indexed between two reports of progress
SKETCH_AHEAD = 32  # pairs between fetching a sketch counter and reading it (`_fetch_counter`)


_EVERY_PAIR = np.zeros(1, dtype=np.int64)  # a sketch for a floor of 0: every pair is indexed


def _built(tokens, starts, lengths, freqs, progress: Callable[[int], None] | None = None) -> WordState:
    """The state over these words, every pair counted and indexed."""
    return _indexed(_new_state(tokens, starts, lengths, freqs, LONG_WORD), _EVERY_PAIR, 0, progress)


def _indexed(state, sketch, floor: int, progress: Callable[[int], None] | None = None) -> WordState:
    """`state` (an empty index) with its words' pairs counted and indexed, those whose counter in
    `sketch` reaches `floor`; `INDEX_CHUNK` words at a time when `progress` is given (called with
    the words gone through since its last call, twice over: once counting, once linking).

    Two passes, so that each pair's list of words lies in consecutive nodes (`_lay_out_lists`):
    a merge walks its pair's list node by node, and a list whose nodes were taken as the words came,
    scattered over the whole pool, cost that walk a cache miss per word (a third of applying the
    merges at 500 MB)."""
    n_words = len(state.starts)
    floor = np.int64(floor)
    w = 0
    while w < n_words:
        end = n_words if progress is None else min(w + INDEX_CHUNK, n_words)
        reached = _count_pairs(state, w, end, sketch, floor)
        if reached < end:
            state = _make_room(state, int(state.lengths[reached]), 0)  # an int64, as the kernels pass it
        if progress is not None and reached > w:
            progress(reached - w)
        w = reached
    _lay_out_lists(state)
    step = max(n_words if progress is None else INDEX_CHUNK, 1)
    for w in range(0, n_words, step):
        end = min(w + step, n_words)
        _link_words(state, w, end, sketch, floor)
        if progress is not None:
            progress(end - w)
    k, i = _index_long_words(state, 0, 0, sketch, floor)  # called even without long words: `bpe warm` compiles it
    while k < len(state.long_word):
        state = _make_room(state, 1, 1)
        k, i = _index_long_words(state, k, i, sketch, floor)
    return state


@njit(cache=True, nogil=True)
def _new_state(tokens, starts, lengths, freqs, long_min):
    """The state over these words, before any pair is counted; words of `long_min` tokens or more
    are long (as many as codes allow: see `_MAX_CODE`)."""
    n_words = len(starts)
    long_min = max(long_min, 2)
    total_pairs = 0
    n_long = 0
    long_tokens = 0
    for w in range(n_words):
        total_pairs += max(lengths[w] - 1, 0)
        if lengths[w] >= long_min and n_words + long_tokens + lengths[w] <= _MAX_CODE:
            n_long += 1
            long_tokens += lengths[w]
    long_word = np.empty(n_long, dtype=np.int32)
    long_start = np.zeros(n_long + 1, dtype=np.int64)
    k = 0
    for w in range(n_words):
        if k < n_long and lengths[w] >= long_min and n_words + long_start[k] + lengths[w] <= _MAX_CODE:
            long_word[k] = w
            long_start[k + 1] = long_start[k] + lengths[w]
            k += 1
    next_gap = np.ones(long_tokens, dtype=np.int32)
    prev_gap = np.ones(long_tokens, dtype=np.int32)
    for k in range(n_long):
        next_gap[long_start[k + 1] - 1] = 0
        prev_gap[long_start[k]] = 0
    pairs, node_word, node_next, touched, meta = _empty_index(total_pairs)
    return WordState(
        tokens, starts, lengths, freqs, pairs, node_word, node_next, touched, meta, long_word, long_start, next_gap,
        prev_gap,
    )  # fmt: skip


@njit
def _empty_index(total_pairs):
    """A pair table, node pool, touched list and counters for words of `total_pairs` pairs, none indexed."""
    capacity = 1 << 12  # small inputs stay small; the table doubles as pairs arrive
    n_nodes = NODE_RESERVE * total_pairs + 1024  # reserved, not resident: see NODE_RESERVE
    meta = np.zeros(_META_SIZE, dtype=np.int64)
    meta[_FREE_HEAD] = -1
    pairs = np.zeros((capacity, _PAIR_COLUMNS), dtype=np.int64)
    touched = np.empty(most_pairs(capacity) + 1, dtype=np.int32)
    return pairs, np.empty(n_nodes, dtype=np.int32), np.empty(n_nodes, dtype=np.int32), touched, meta


@njit(cache=True, nogil=True)
def _emptied(state):
    """`state` with its words as they stand and an empty index, to be indexed again."""
    total_pairs = 0
    for w in range(len(state.lengths)):
        total_pairs += max(state.lengths[w] - 1, 0)
    pairs, node_word, node_next, touched, meta = _empty_index(total_pairs)
    return WordState(
        state.tokens, state.starts, state.lengths, state.freqs, pairs, node_word, node_next, touched, meta,
        state.long_word, state.long_start, state.next_gap, state.prev_gap,
    )  # fmt: skip


@njit(inline="always")
def _reaches(sketch, floor, key):
    """Whether an index with this floor takes the pair: its counter reaches the floor (any, at 0)."""
    return floor <= 0 or sketch[bucket_of(sketch, key)] >= floor


@njit(inline="always")
def _fetch_counter(sketch, tokens, p):
    """Fetch the sketch's counter of the pair at tokens[p], tokens[p + 1], if there is one. The
    words' pairs are read in the order their tokens lie, and their counters lie anywhere in a sketch
    of up to 32 MB: fetched `SKETCH_AHEAD` pairs ahead, their misses overlap. (Past a word's end the
    pair is none of its words', and the fetch only wasted.)"""
    if p + 1 < len(tokens):
        prefetch(sketch, bucket_of(sketch, pack(tokens[p], tokens[p + 1])))


@njit(cache=True, nogil=True)
def _count_pairs(state, first, end, sketch, floor):
    """Count the pairs of the words `first` ... `end` - 1 that are not long (those the floor takes:
    `_reaches`), and how many words hold each, in the low bits of its links (no node is taken yet);
    returns where it stopped (`end` when done, earlier when the pair table needs room first)."""
    state, sketch = _borrowed_words(state), borrowed(sketch)
    tokens, starts, lengths, freqs = state.tokens, state.starts, state.lengths, state.freqs
    pairs, touched, meta, long_word = state.pairs, state.touched, state.meta, state.long_word
    k = np.searchsorted(long_word, first)
    for w in range(first, end):
        if k < len(long_word) and long_word[k] == w:
            k += 1
            continue
        if meta[_PAIRS_USED] + lengths[w] >= most_pairs(len(pairs)):
            return w
        s = starts[w]
        mark = (np.int64(w) + 1) << _WORD_SHIFT
        for i in range(lengths[w] - 1):
            if floor > 0:
                _fetch_counter(sketch, tokens, s + i + SKETCH_AHEAD)
            key = pack(tokens[s + i], tokens[s + i + 1])
            if _reaches(sketch, floor, key):
                slot = _slot_for(pairs, meta, key)
                _add_delta(pairs, touched, meta, slot, freqs[w])
                links = pairs[slot, _LINKS]
                if links & _LAST_WORD != mark:  # once per word
                    pairs[slot, _LINKS] = ((links & ~_LAST_WORD) + 1) | mark
    return end


@njit(cache=True, nogil=True)
def _lay_out_lists(state):
    """Give each counted pair a run of consecutive nodes, one per word holding it, the runs one
    after another from node 0 (the pool is empty): its links then point just past its run, with no
    word linked, for `_link_words` to fill the run from its end."""
    pairs, meta = state.pairs, state.meta
    end = np.int64(0)
    for r in range(len(pairs)):
        if pairs[r, KEY_COLUMN] != 0:
            links = pairs[r, _LINKS]
            end += links & LOW32
            pairs[r, _LINKS] = (links & TOUCHED) | (end + 1)
    if end > len(state.node_word):
        raise ValueError("the words hold more pairs than the node pool was reserved for")
    meta[_NODES_USED] = end


@njit(cache=True, nogil=True)
def _link_words(state, first, end, sketch, floor):
    """Link the words `first` ... `end` - 1 that are not long to the pairs they hold (as counted by
    `_count_pairs`), each at the head of its pair's list in the node just before the head: a
    list's nodes end up in order, its head at the start of its run, the last word linked first."""
    state, sketch = _borrowed_words(state), borrowed(sketch)
    tokens, starts, lengths, long_word = state.tokens, state.starts, state.lengths, state.long_word
    pairs, node_word, node_next = state.pairs, state.node_word, state.node_next
    k = np.searchsorted(long_word, first)
    for w in range(first, end):
        if k < len(long_word) and long_word[k] == w:
            k += 1
            continue
        s = starts[w]
        mark = (np.int64(w) + 1) << _WORD_SHIFT
        for i in range(lengths[w] - 1):
            if floor > 0:
                _fetch_counter(sketch, tokens, s + i + SKETCH_AHEAD)
            key = pack(tokens[s + i], tokens[s + i + 1])
            if not _reaches(sketch, floor, key):
                continue
            slot = slot_of(pairs, key)
            links = pairs[slot, _LINKS]
            if links & _LAST_WORD == mark:
                continue
            head = (links & LOW32) - 1
            node = head - 1
            node_word[node] = w
            node_next[node] = head if links & _LAST_WORD else -1  # the first word linked ends the list
            pairs[slot, _LINKS] = (links & TOUCHED) | mark | (node + 1)


@njit(cache=True, nogil=True)
def _index_long_words(state, first, position, sketch, floor):
    """Count and index by position the pairs of long words `first`, `first` + 1, ... that the
    floor takes, from the live token at `position` of the first (0: its first token, always live);
    returns where it stopped, (long words, 0) when done."""
    state, sketch = _borrowed_words(state), borrowed(sketch)
    tokens, starts, freqs, next_gap = state.tokens, state.starts, state.freqs, state.next_gap
    pairs, touched, meta = state.pairs, state.touched, state.meta
    node_word, node_next, long_word, long_start = state.node_word, state.node_next, state.long_word, state.long_start
    n_words = len(starts)
    for k in range(first, len(long_word)):
        s = starts[long_word[k]]
        i = position if k == first else 0
        while next_gap[long_start[k] + i] > 0:
            if not _room_for(pairs, node_word, meta, 1, 1):
                return k, i
            step = next_gap[long_start[k] + i]
            key = pack(tokens[s + i], tokens[s + i + step])
            if _reaches(sketch, floor, key):
                slot = _slot_for(pairs, meta, key)
                _add_delta(pairs, touched, meta, slot, freqs[long_word[k]])
                _push_node(pairs, node_word, node_next, meta, slot, n_words + long_start[k] + i)
            i += step
    return len(long_word), 0


@njit(inline="always")
def _counted(counts, key):
    """The count of `key` in a queue's pair table (0 if absent)."""
    slot = slot_of(counts, key)
    return counts[slot, 1] if counts[slot, KEY_COLUMN] != 0 else 0


@njit(cache=True, nogil=True)
def _forgotten_below(state, counts, least):
    view, counts = _borrowed_words(state), borrowed(counts)
    pairs, node_next, meta = view.pairs, view.node_next, view.meta
    keep = np.zeros(len(pairs), dtype=np.bool_)  # each pair looked up once in the queue's table, a miss apiece
    kept = 0
    for r in range(len(pairs)):
        if pairs[r, KEY_COLUMN] != 0 and _counted(counts, pairs[r, KEY_COLUMN] - 1) >= least:
            keep[r] = True
            kept += 1
    capacity = 1 << 12
    while 2 * kept >= most_pairs(capacity):  # room for as many again before it grows
        capacity *= 2
    table = np.zeros((capacity, _PAIR_COLUMNS), dtype=np.int64)
    kept_pairs = borrowed(table)
    for r in range(len(pairs)):
        if pairs[r, KEY_COLUMN] == 0:
            continue
        if keep[r]:
            copy_into(kept_pairs[slot_of(kept_pairs, pairs[r, KEY_COLUMN] - 1)], pairs[r])
            continue
        node = (pairs[r, _LINKS] & LOW32) - 1
        while node >= 0:
            following = node_next[node]
            _free_node(node_next, meta, node)
            node = following
    meta[_PAIRS_USED] = kept
    meta[_N_TOUCHED] = 0
    return WordState(
        state.tokens, state.starts, state.lengths, state.freqs, table, state.node_word, state.node_next,
        np.empty(most_pairs(capacity) + 1, dtype=np.int32), state.meta, state.long_word, state.long_start,
        state.next_gap, state.prev_gap,
    )  # fmt: skip


@njit(cache=True, nogil=True)
def _sketch_pairs(state, sketch):
    """Add each pair's count in the words as they stand to its counter in `sketch`."""
    state, sketch = _borrowed_words(state), borrowed(sketch)
    tokens, starts, lengths, freqs = state.tokens, state.starts, state.lengths, state.freqs
    long_word, long_start, next_gap = state.long_word, state.long_start, state.next_gap
    k = 0
    for w in range(len(starts)):
        s = starts[w]
        if k < len(long_word) and long_word[k] == w:
            i = 0
            while next_gap[long_start[k] + i] > 0:
                step = next_gap[long_start[k] + i]
                sketch[bucket_of(sketch, pack(tokens[s + i], tokens[s + i + step]))] += freqs[w]
                i += step
            k += 1
            continue
        for i in range(lengths[w] - 1):
            _fetch_counter(sketch, tokens, s + i + SKETCH_AHEAD)
            sketch[bucket_of(sketch, pack(tokens[s + i], tokens[s + i + 1]))] += freqs[w]


@njit(cache=True, nogil=True)
def _make_room(state, new_pairs, new_nodes):
    """Grow the pair table and node pool so that `new_pairs` pairs and `new_nodes` nodes fit."""
    pairs, touched, meta = state.pairs, state.touched, state.meta
    node_word, node_next = state.node_word, state.node_next
    if meta[_PAIRS_USED] + new_pairs >= most_pairs(len(pairs)):
        capacity = len(pairs)
        while meta[_PAIRS_USED] + new_pairs >= most_pairs(capacity):
            capacity *= 2
        old = pairs
        pairs = np.zeros((capacity, _PAIR_COLUMNS), dtype=np.int64)
        touched = np.empty(most_pairs(capacity) + 1, dtype=np.int32)
        meta[_N_TOUCHED] = 0
        for r in range(len(old)):
            if old[r, KEY_COLUMN] != 0:
                i = slot_of(pairs, old[r, KEY_COLUMN] - 1)
                copy_into(pairs[i], old[r])
                if old[r, _LINKS] < 0:  # TOUCHED
                    touched[meta[_N_TOUCHED]] = i
                    meta[_N_TOUCHED] += 1
    needed = meta[_NODES_USED] + new_nodes - meta[_FREE_NODES]
    if needed > len(node_word) and len(state.long_word):
        _drop_stale_positions(state)  # grow only if that leaves less than an eighth free
        needed = meta[_NODES_USED] + new_nodes - meta[_FREE_NODES] + len(node_word) // 8
    if needed > len(node_word):
        size = max(len(node_word) + len(node_word) // 4, needed)
        used = meta[_NODES_USED]
        more_word = np.empty(size, dtype=np.int32)
        more_next = np.empty(size, dtype=np.int32)
        copy_into(more_word[:used], node_word[:used])
        copy_into(more_next[:used], node_next[:used])
        node_word, node_next = more_word, more_next
    return WordState(
        state.tokens, state.starts, state.lengths, state.freqs, pairs, node_word, node_next, touched, meta,
        state.long_word, state.long_start, state.next_gap, state.prev_gap,
    )  # fmt: skip


@njit(cache=True, nogil=True)
def _drop_stale_positions(state):
    """Free the nodes of long-word positions whose pair has gone from there (a merge next to it
    made another), rather than growing the node pool for them."""
    view = _borrowed_words(state)
    tokens, pairs, meta, node_word, node_next = view.tokens, view.pairs, view.meta, view.node_word, view.node_next
    n_words = len(view.starts)
    for r in range(len(pairs)):
        links = pairs[r, _LINKS]
        node = (links & LOW32) - 1
        if pairs[r, KEY_COLUMN] == 0 or node < 0:
            continue
        x, y = unpack(pairs[r, KEY_COLUMN] - 1)
        head = tail = -1
        while node >= 0:
            following = node_next[node]
            code = node_word[node]
            keep = True
            if code >= n_words:
                c = code - n_words
                _, _, g = _place(view, c)
                step = view.next_gap[c]
                keep = tokens[g] == x and step > 0 and tokens[g + step] == y
            if keep:
                if tail >= 0:
                    node_next[tail] = node
                else:
                    head = node
                tail = node
            else:
                _free_node(node_next, meta, node)
            node = following
        if tail >= 0:
            node_next[tail] = -1
        pairs[r, _LINKS] = (links & ~LOW32) | (head + 1)


# A merge takes the words off its pair's list `TAKEN_WORDS` at a time (`_take_words`), fetching their
# starts, lengths and frequencies as it goes, then rewrites them fetching each word's tokens
# `TOKENS_AHEAD` words before it reaches them (`_rewrite_words`): at 500 MB a word's data is a cache
# miss, and overlapping the misses of the words ahead took a fifth off applying the merges.
TAKEN_WORDS = 64
TOKENS_AHEAD = 8


@njit(cache=True, nogil=True)
def words_apply_merges(state, merges):
    """Apply merges in order, each an (a, b, new id) row of `merges`."""
    taken = np.empty(TAKEN_WORDS, dtype=np.int64)
    for m in range(len(merges)):
        a, b, new = merges[m, 0], merges[m, 1], merges[m, 2]
        pairs = state.pairs
        merged = slot_of(pairs, pack(a, b))
        if pairs[merged, KEY_COLUMN] == 0:
            continue  # no word of this table holds the pair
        node = (pairs[merged, _LINKS] & LOW32) - 1
        pairs[merged, _LINKS] &= ~LOW32
        while node >= 0:
            node, n, new_pairs, new_nodes = _take_words(state, node, a, b, taken)
            if not _room_for(state.pairs, state.node_word, state.meta, new_pairs, new_nodes):
                state = _make_room(state, new_pairs, new_nodes)
            _rewrite_words(state, taken, n, a, b, new)
    return state


@njit(cache=True, nogil=True)
def _take_words(state, node, a, b, taken):
    """Take the next codes off a pair's list from `node` into `taken`, freeing their nodes: up to
    `len(taken)` words while the tables have room for what their merge (a, b) may add (a word of
    length n adds at most n pairs and n nodes), or one long word's position alone (see `_nodes_at`).
    Returns (the node to go on from, -1 at the end; codes taken; pairs and nodes to make room for:
    more than the tables have only when the first word or position alone needs it, so that they
    grow when and as one word at a time would make them)."""
    state = _borrowed_words(state)
    starts, lengths, freqs = state.starts, state.lengths, state.freqs
    pairs, meta, node_word, node_next = state.pairs, state.meta, state.node_word, state.node_next
    n_words = len(starts)
    n = 0
    room = 0
    while node >= 0 and n < len(taken):
        w = node_word[node]
        if w >= n_words:
            if n > 0:
                break  # the words taken first; the position then goes alone
            taken[0] = w
            following = node_next[node]
            nodes = _nodes_at(state, w - n_words, a, b)
            _free_node(node_next, meta, node)
            return following, 1, 4, nodes
        more = room + 2 * lengths[w]
        if n > 0 and not _room_for(pairs, node_word, meta, more, more):
            break
        prefetch(starts, w)
        prefetch(freqs, w)
        taken[n] = w
        n += 1
        room = more
        following = node_next[node]
        _free_node(node_next, meta, node)  # recycled by the links the rewrite makes
        node = following
    return node, n, room, room


@njit(cache=True, nogil=True)
def _rewrite_words(state, taken, n, a, b, new):
    """Rewrite the words (or the long word's position) `taken[:n]` by merge (a, b) -> new,
    recording deltas and linking words to new pairs (room made by the caller)."""
    state = _borrowed_words(state)
    tokens, starts, lengths, freqs = state.tokens, state.starts, state.lengths, state.freqs
    pairs, touched, meta = state.pairs, state.touched, state.meta
    node_word, node_next = state.node_word, state.node_next
    n_words = len(starts)
    merged = slot_of(pairs, pack(a, b))
    for x in range(n):
        w = taken[x]
        if w >= n_words:
            _merge_at(state, w - n_words, a, b, new, merged)
            continue
        if x + TOKENS_AHEAD < n:
            prefetch(tokens, starts[taken[x + TOKENS_AHEAD]])
        length = lengths[w]
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
                    _take_away(pairs, touched, meta, pack(before, a), f)
                    slot = _slot_for(pairs, meta, pack(before, new))
                    _add_delta(pairs, touched, meta, slot, f)
                    _link(pairs, node_word, node_next, meta, slot, w)
                if i + 2 < length:
                    after = tokens[s + i + 2]
                    _take_away(pairs, touched, meta, pack(b, after), f)
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


@njit(inline="always")
def _place(state, c):
    """(long word, word, index in `tokens`) of long-word position c."""
    long_start = state.long_start
    k, above = 0, len(long_start) - 1  # long_start[k] <= c < long_start[above]
    while above - k > 1:
        middle = (k + above) >> 1
        if long_start[middle] <= c:
            k = middle
        else:
            above = middle
    w = state.long_word[k]
    return k, w, state.starts[w] + (c - state.long_start[k])


@njit(inline="always")
def _nodes_at(state, c, a, b):
    """How many nodes merging (a, b) at long-word position c may add: 2, or for a == b one per pair
    of the run of a's from c, plus 2 (4 pairs at most: (x, X), (X, a), (X, X), (X, y) for new X)."""
    if a != b:
        return 2
    tokens, next_gap = state.tokens, state.next_gap
    _, _, g = _place(state, c)
    back = state.prev_gap[c]
    if back > 0 and tokens[g - back] == a:
        return 0  # inside a run: merged from its first token
    run = 0
    step = 1
    while step > 0 and tokens[g] == a:
        run += 1
        step = next_gap[c]
        c += step
        g += step
    return run // 2 + 2


@njit(inline="always")
def _merge_at(state, c, a, b, new, merged):
    """Merge (a, b) -> new at long-word position c if the pair is still there, as `_rewrite_words`
    rewrites a word (the same deltas), linking the new pairs by position. The positions of a pair
    come in no order, but a word is rewritten left to right, which matters for a == b only ("a a a"
    merges its first pair): a run of a's is then merged whole from its first token, and a position
    inside it is left to that."""
    tokens, lengths, freqs = state.tokens, state.lengths, state.freqs
    pairs, touched, meta = state.pairs, state.touched, state.meta
    node_word, node_next, next_gap, prev_gap = state.node_word, state.node_next, state.next_gap, state.prev_gap
    n_words = len(state.starts)
    _, w, g = _place(state, c)
    f = freqs[w]
    back = prev_gap[c]
    if a == b and back > 0 and tokens[g - back] == a:
        return  # inside a run of a's: merged from the run's first token
    while True:
        step = next_gap[c]
        if tokens[g] != a or step == 0 or tokens[g + step] != b:
            return  # the pair is gone from here (a REMOVED token is never a), or the run ends
        _add_delta(pairs, touched, meta, merged, -f)
        if back > 0:
            before = tokens[g - back]
            _take_away(pairs, touched, meta, pack(before, a), f)
            slot = _slot_for(pairs, meta, pack(before, new))
            _add_delta(pairs, touched, meta, slot, f)
            _push_node(pairs, node_word, node_next, meta, slot, n_words + c - back)
        further = next_gap[c + step]
        run_goes_on = False
        if further > 0:
            after = tokens[g + step + further]
            _take_away(pairs, touched, meta, pack(b, after), f)
            slot = _slot_for(pairs, meta, pack(new, after))
            _add_delta(pairs, touched, meta, slot, f)
            beyond = next_gap[c + step + further]
            run_goes_on = a == b and after == a and beyond > 0 and tokens[g + step + further + beyond] == a
            if not run_goes_on:  # else the next merge of the run takes the pair (new, a) at once
                _push_node(pairs, node_word, node_next, meta, slot, n_words + c)
            prev_gap[c + step + further] = step + further
        next_gap[c] = step + further if further > 0 else 0
        tokens[g] = new
        tokens[g + step] = REMOVED
        lengths[w] -= 1
        if not run_goes_on:
            return
        back = step + further  # on along the run: the next pair's first token follows the new one
        c += back
        g += back


@njit(cache=True, nogil=True)
def _current_tokens(state):
    """The tokens of every word as they stand, one word after another (long words' gaps closed)."""
    tokens, starts, lengths, long_word = state.tokens, state.starts, state.lengths, state.long_word
    out = np.empty(lengths.astype(np.int64).sum(), dtype=np.int32)
    o = 0
    k = 0
    for w in range(len(starts)):
        s = starts[w]
        if k < len(long_word) and long_word[k] == w:
            c = state.long_start[k]
            step = 1
            while step > 0:  # a word's first token is never removed: merges remove the second of a pair
                out[o] = tokens[s]
                o += 1
                step = state.next_gap[c]
                s += step
                c += step
            k += 1
        else:
            copy_into(out[o : o + lengths[w]], tokens[s : s + lengths[w]])
            o += lengths[w]
    return out


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

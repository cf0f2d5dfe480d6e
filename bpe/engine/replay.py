"""Replaying a base tokenizer's merges on counted words: where training from a tokenizer starts.

Merge k of the base makes token 256 + k. Applying the merges in their order to every word is the
same as merging, in each word, the present pair of lowest rank until no pair has one: a pair once
merged never comes back (its new token is newer than both its parts), so the lowest-rank pair
present is always the next merge in order that occurs. That is how a word is encoded, so each
unique word is encoded once here, rather than each merge visiting the words that hold its pair.
A long word (`long_word` tokens or more) takes its pairs from a heap ordered by (rank, position)
instead of a pass over the word per rank, which made a word of megabytes cost minutes.

Words are first cut into segments between two bytes that no merge joins (the last byte of a merge's
first token followed by the first byte of its second): no token can ever span such a cut, so every
merge applies on one side of it, left to right there as in the segment alone, and the word's
tokens are its segments' tokens one after another. Each unique segment is replayed once. A
superword piece, " by the way", falls into the words the base was trained on, " by", " the",
" way", which repeat across millions of pieces: replaying those alone made the superword stage's
replay several times faster.

"aaab" with (97, 97) -> 256 and (256, 97) -> 257 gives [257, 98]; "aab" gives [256, 98]:

>>> from bpe.engine.count import WordCounts
>>> base = BaseMerges(np.array([[97, 97], [256, 97]]))
>>> tokens, lengths = base.replay(WordCounts.from_dict({b"aaab": 2, b"aab": 1}))
>>> tokens.tolist(), lengths.tolist()
([257, 98, 256, 98], [2, 2])
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numba import njit

from bpe.engine import kernel_cache  # noqa: F401  (sets where the kernels below are cached)
from bpe.engine.borrow import borrowed
from bpe.engine.count import (
    CountTable,
    WordCounts,
    borrowed_table,
    fetch_slot,
    hash_and_prefix,
    hashed_entry,
    table_entries,
    table_has_room,
    table_make_room,
    table_new,
)
from bpe.engine.interrupts import holds_interrupts
from bpe.engine.pair_keys import KEY_COLUMN, pack, slot_of
from bpe.engine.resident import ReleasedBehind

_NO_RANK = np.int64(np.iinfo(np.int64).max)
REPLAY_CHUNK = 1 << 16  # words cut into segments between two reports of progress


class BaseMerges:
    """A base tokenizer's merges ((n, 2) token ids, merge k making token 256 + k) with a table
    pair -> rank for replaying them on words."""

    def __init__(self, merges: np.ndarray) -> None:
        self.merges = np.ascontiguousarray(np.asarray(merges, dtype=np.int64).reshape(-1, 2))
        made = 256 + np.arange(len(self.merges), dtype=np.int64)[:, None]
        if np.any((self.merges < 0) | (self.merges >= made)):  # the kernels would read past their arrays
            raise ValueError("a merge uses a token made after it")
        self._tables: tuple[np.ndarray, np.ndarray] | None = None

    def _ranks_and_joined(self) -> tuple[np.ndarray, np.ndarray]:
        """The pair -> rank table and the pairs no merge joins, made at the first replay: a run
        loads a base before it compiles the kernels it needs (`bpe.training.warm`), and these are some."""
        if self._tables is None:
            self._tables = _rank_table(self.merges), _joined_bytes(self.merges)
        return self._tables

    def __len__(self) -> int:
        return len(self.merges)

    @property
    def first_new_id(self) -> int:
        """The id of the first merge learnt after the base's."""
        return 256 + len(self.merges)

    @holds_interrupts
    def replay(
        self,
        counts: WordCounts,
        long_word: int = 1024,
        progress: Callable[[int], None] | None = None,
        release: bool = False,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Every word of `counts` with the base's merges applied: (tokens as int32, flat; each
        word's length as int32), words in the order of `counts`; words of `long_word` bytes or
        more through a heap (the same tokens). Each unique segment (see above) is replayed once.
        `progress(n)`: n more words cut into segments (most of the time), `REPLAY_CHUNK` at a time.
        `release`: hand the words' bytes back as they are replayed (`resident.release_pages`), for
        a caller done with them: the tokens grow as the words go, not on top of them."""
        data, offsets = counts.data, counts.offsets
        ranks, joined = self._ranks_and_joined()
        table = table_new(max(len(counts), 1), max(len(data) // 4, 1))  # the unique segments
        segments = _SegmentTokens()
        # Reserved, not resident (a token holds at least a byte): the pages written are the tokens.
        tokens = np.empty(max(len(data), 1), dtype=np.int32)
        lengths = np.empty(len(counts), dtype=np.int32)
        word = written = 0
        behind = ReleasedBehind(data, int(offsets[0])) if release else None
        while word < len(counts):  # a chunk of words at a time: their segments' entries are chunk-sized
            end = min(word + REPLAY_CHUNK, len(counts))
            chunk = offsets[word : end + 1]
            per_word = _segments_per_word(data, chunk, joined)
            segment_of = np.empty(int(per_word.sum()), dtype=np.int32)
            reached = segment = 0
            at = -1
            while reached < end - word:
                reached, segment, at = _find_segments(table, data, chunk, joined, segment_of, reached, segment, at)
                if reached < end - word:
                    table = table_make_room(table, chunk[reached + 1] - chunk[reached])
            segments.replay_new(table, ranks, long_word)
            written = _join_segments(tokens, written, segment_of, per_word, segments.tokens, segments.starts,
                                     lengths[word:end])  # fmt: skip
            if behind is not None:
                behind.passed(int(chunk[-1]))
            if progress is not None:
                progress(end - word)
            word = end
        return tokens[:written], lengths

    def __reduce__(self):  # sent to Dask workers as the merges alone; the table is rebuilt there
        return BaseMerges, (self.merges,)


class _SegmentTokens:
    """The tokens of the unique segments met so far, entry after entry of their table: entry e's
    are tokens[starts[e]:starts[e + 1]]."""

    def __init__(self) -> None:
        self.tokens = np.empty(1 << 16, dtype=np.int32)
        self.starts = np.zeros(1 << 12, dtype=np.int64)
        self.replayed = 0  # entries whose tokens are here

    def replay_new(self, table: CountTable, ranks: np.ndarray, long_word: int) -> None:
        """Replay the entries `table` holds that are not here yet, and add their tokens."""
        entries = table_entries(table)
        if entries == self.replayed:
            return
        first, last = int(table.starts[self.replayed]), int(table.starts[entries])
        new, lengths = _replay(table.store[first:last], table.starts[self.replayed : entries + 1] - first, ranks,
                               long_word)  # fmt: skip
        end = int(self.starts[self.replayed])
        self.tokens = _with_room(self.tokens, end + len(new))
        self.tokens[end : end + len(new)] = new
        self.starts = _with_room(self.starts, entries + 1)
        np.cumsum(lengths, out=self.starts[self.replayed + 1 : entries + 1])
        self.starts[self.replayed + 1 : entries + 1] += end
        self.replayed = entries


def _with_room(array: np.ndarray, size: int) -> np.ndarray:
    """`array`, or a copy twice as long (or `size`) when it is shorter than `size`."""
    if len(array) >= size:
        return array
    bigger = np.empty(max(2 * len(array), size), dtype=array.dtype)
    bigger[: len(array)] = array
    return bigger


_RANK = 1  # the rank table's column beside KEY_COLUMN


@njit(cache=True)
def _joined_bytes(merges):
    """joined[x << 8 | y]: whether some merge joins a token ending in byte x to one starting with y."""
    first = np.empty(256 + len(merges), dtype=np.int64)
    last = np.empty(256 + len(merges), dtype=np.int64)
    for t in range(256):
        first[t] = t
        last[t] = t
    joined = np.zeros(1 << 16, dtype=np.bool_)
    for k in range(len(merges)):
        a, b = merges[k, 0], merges[k, 1]
        if not (0 <= a < 256 + k and 0 <= b < 256 + k):
            raise ValueError("a merge uses a token made after it")
        first[256 + k] = first[a]
        last[256 + k] = last[b]
        joined[last[a] << 8 | first[b]] = True
    return joined


@njit(cache=True, nogil=True)
def _segments_per_word(data, offsets, joined):
    """How many segments each word falls into: one more than the cuts between bytes no merge joins."""
    out = np.zeros(len(offsets) - 1, dtype=np.int64)
    for w in range(len(offsets) - 1):
        if offsets[w + 1] > offsets[w]:
            n = 1
            for p in range(offsets[w] + 1, offsets[w + 1]):
                if not joined[np.int64(data[p - 1]) << 8 | data[p]]:
                    n += 1
            out[w] = n
    return out


SEGMENTS_AHEAD = 8  # segments hashed ahead of the one looked up, their slots fetched meanwhile


@njit(cache=True, nogil=True)
def _find_segments(table, data, offsets, joined, segment_of, first_word, first_segment, first_byte):
    """Put the segments of words `first_word`, ... into `table` (a `count.CountTable`), writing each
    one's entry to `segment_of`, from segment `first_segment` at byte `first_byte` of the first word
    (-1: its start) on; returns where it stopped: (words, segments, -1) when done, or the word,
    segment and byte to go on from once the table has room. Each segment is looked up
    `SEGMENTS_AHEAD` segments after it is cut and hashed, its slot fetched meanwhile (as the
    counting loop does with its pieces); room for the segments waiting is set aside as they are cut."""
    view = borrowed_table(table)
    cuts = np.empty((SEGMENTS_AHEAD, 3), dtype=np.int64)  # waiting segment: start, end, its number
    hashes, prefixes = np.empty(SEGMENTS_AHEAD, dtype=np.uint64), np.empty(SEGMENTS_AHEAD, dtype=np.uint64)
    data, offsets, joined, segment_of = borrowed(data), borrowed(offsets), borrowed(joined), borrowed(segment_of)
    s = first_segment
    cut = found = 0
    waiting_bytes = 0
    for w in range(first_word, len(offsets) - 1):
        start, end = offsets[w], offsets[w + 1]
        a = first_byte if w == first_word and first_byte >= 0 else start
        full = False
        for p in range(a + 1, end + 1):
            if p == end or not joined[np.int64(data[p - 1]) << 8 | data[p]]:
                if not table_has_room(view, cut - found + 1, waiting_bytes + p - a):
                    full = True
                    break
                if cut - found == SEGMENTS_AHEAD:
                    waiting_bytes -= _look_up(view, data, cuts, hashes, prefixes, segment_of, found % SEGMENTS_AHEAD)
                    found += 1
                k = cut % SEGMENTS_AHEAD
                cuts[k, 0], cuts[k, 1], cuts[k, 2] = a, p, s
                hashes[k], prefixes[k] = hash_and_prefix(data, a, p)
                fetch_slot(view, hashes[k])
                waiting_bytes += p - a
                cut += 1
                s += 1
                a = p
        if full:
            stopped = (w, s, a)
            break
    else:  # every word
        stopped = (len(offsets) - 1, s, np.int64(-1))
    while found < cut:  # room was set aside for the segments waiting
        _look_up(view, data, cuts, hashes, prefixes, segment_of, found % SEGMENTS_AHEAD)
        found += 1
    return stopped


@njit(inline="always")
def _look_up(table, data, cuts, hashes, prefixes, segment_of, k):
    """Add waiting segment `k` to the table and write its entry; returns its length in bytes."""
    start, end = cuts[k, 0], cuts[k, 1]
    segment_of[cuts[k, 2]] = hashed_entry(table, data, start, end, 1, hashes[k], prefixes[k])
    return end - start


@njit(cache=True, nogil=True)
def _join_segments(out, written, segment_of, per_word, tokens, starts, word_lengths):
    """Write each word's tokens, its segments' one after another, into `out` from `written` on,
    and its length into `word_lengths`; returns where the words end in `out`."""
    out, segment_of, per_word, tokens = borrowed(out), borrowed(segment_of), borrowed(per_word), borrowed(tokens)
    starts, word_lengths = borrowed(starts), borrowed(word_lengths)
    i = written
    s = 0
    for w in range(len(per_word)):
        for _ in range(per_word[w]):
            e = segment_of[s]
            for t in range(starts[e], starts[e + 1]):  # a few tokens: no slices, whose references cost more
                out[i] = tokens[t]
                i += 1
            s += 1
        word_lengths[w] = i - written
        written = i
    return i


@njit(cache=True)
def _rank_table(merges):
    """Pair key -> rank (see bpe.engine.pair_keys), at most half full."""
    size = 16
    while size < 2 * len(merges):
        size *= 2
    table = np.zeros((size, 2), dtype=np.int64)
    for rank in range(len(merges)):
        key = pack(merges[rank, 0], merges[rank, 1])
        slot = slot_of(table, key)
        if table[slot, KEY_COLUMN] == 0:  # a repeated pair keeps its first rank: the later one never applies
            table[slot, KEY_COLUMN] = key + 1
            table[slot, _RANK] = rank
    return table


@njit(cache=True, inline="always")
def _rank(table, a, b):
    slot = slot_of(table, pack(a, b))
    return table[slot, _RANK] if table[slot, KEY_COLUMN] != 0 else _NO_RANK


@njit(cache=True, nogil=True)
def _replay(data, offsets, table, long_word):
    n_words = len(offsets) - 1
    tokens = np.empty(len(data), dtype=np.int32)
    lengths = np.empty(n_words, dtype=np.int32)
    longest = 1
    for w in range(n_words):
        if offsets[w + 1] - offsets[w] < long_word:
            longest = max(longest, offsets[w + 1] - offsets[w])
    rank = np.empty(longest, dtype=np.int64)  # rank[i]: the rank of the pair at i, i + 1 (one word at a time)
    data, offsets, table = borrowed(data), borrowed(offsets), borrowed(table)
    each_word, each_rank = borrowed(tokens), borrowed(rank)  # sliced per word: views without references
    out = 0
    for w in range(n_words):
        start, n = offsets[w], offsets[w + 1] - offsets[w]
        t = each_word[out : out + n]
        for i in range(n):
            t[i] = data[start + i]
        if n >= long_word:
            n = _replay_long(t, table)
            lengths[w] = n
            out += n
            continue
        r = each_rank[:n]
        for i in range(n - 1):
            r[i] = _rank(table, t[i], t[i + 1])
        while n > 1:
            best = _NO_RANK
            for i in range(n - 1):
                best = min(best, r[i])
            if best == _NO_RANK:
                break
            new = 256 + best
            # Merge every occurrence, left to right, compacting in place; a pair's rank is looked
            # up again only next to a new token (elsewhere it is the rank it had).
            j = 0
            i = 0
            previous_is_new = False
            while i < n:
                merged = i < n - 1 and r[i] == best
                token = new if merged else t[i]
                if j > 0:
                    r[j - 1] = _rank(table, t[j - 1], token) if merged or previous_is_new else r[i - 1]
                t[j] = token
                previous_is_new = merged
                i += 2 if merged else 1
                j += 1
            n = j
        lengths[w] = n
        out += n
    return tokens[:out].copy(), lengths


_POSITION_BITS = np.int64(32)
_POSITION = (np.int64(1) << _POSITION_BITS) - 1


@njit(cache=True, nogil=True)
def _replay_long(t, table):
    """Apply the merges to the word `t` in place; returns its new length. The pairs wait in a
    min-heap of rank << 32 | position: a rank's occurrences come out left to right (as the pass
    per rank merges them, which matters for "a a a"), and a merge's new pairs rank after it. An
    entry whose position has merged since is dropped when it comes out."""
    n = len(t)
    following = np.arange(1, n + 1, dtype=np.int32)  # the next live token; n: none
    preceding = np.arange(-1, n - 1, dtype=np.int32)  # the previous live token; -1: none
    heap = np.empty(max(2 * n, 1), dtype=np.int64)  # n - 1 pairs, and at most one more per merge
    size = 0
    for i in range(n - 1):
        r = _rank(table, t[i], t[i + 1])
        if r != _NO_RANK:
            heap[size] = r << _POSITION_BITS | i
            size += 1
    for i in range(size // 2 - 1, -1, -1):
        _sift_down(heap, size, i)
    while size > 0:
        top = heap[0]
        size -= 1
        heap[0] = heap[size]
        _sift_down(heap, size, 0)
        r, p = top >> _POSITION_BITS, top & _POSITION
        q = following[p]
        if t[p] < 0 or q >= n or _rank(table, t[p], t[q]) != r:
            continue  # merged since, or holds another pair now
        t[p] = 256 + r
        t[q] = -1
        after = following[q]
        following[p] = after
        if after < n:
            preceding[after] = p
            size = _push(heap, size, _rank(table, t[p], t[after]), p)
        before = preceding[p]
        if before >= 0:
            size = _push(heap, size, _rank(table, t[before], t[p]), before)
    j = 0
    p = 0
    while p < n:
        t[j] = t[p]
        j += 1
        p = following[p]
    return j


@njit(inline="always")
def _push(heap, size, rank, position):
    """Push the pair of `rank` at `position` unless it has no rank; returns the new size."""
    if rank == _NO_RANK:
        return size
    key = rank << _POSITION_BITS | position
    i = size
    while i > 0 and heap[(i - 1) >> 1] > key:
        heap[i] = heap[(i - 1) >> 1]
        i = (i - 1) >> 1
    heap[i] = key
    return size + 1


@njit(inline="always")
def _sift_down(heap, size, i):
    key = heap[i]
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and heap[child + 1] < heap[child]:
            child += 1
        if heap[child] >= key:
            break
        heap[i] = heap[child]
        i = child
    heap[i] = key

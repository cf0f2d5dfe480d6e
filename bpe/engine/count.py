"""Counting pre-tokens, the compiled part: unique words with their frequencies (`WordCounts`), and
a compiled hash table (`Tally`) that counts the pieces the scanners in `bpe.engine.scanner` cut
from UTF-8 text, or adds counts already made. `bpe.training.counting` feeds it documents.

>>> tally = Tally()
>>> tally.add(WordCounts.from_dict({b"the": 2, b" cat": 1}))
>>> tally.add(WordCounts.from_dict({b"the": 1}))
>>> sorted(tally.result().to_dict().items())
[(b' cat', 1), (b'the', 3)]
"""

from __future__ import annotations

import sys
from collections import Counter, namedtuple
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from numba import njit

from bpe.engine import kernel_cache  # noqa: F401  (sets where the kernels below are cached)
from bpe.engine.borrow import borrowed
from bpe.engine.copying import copy_into
from bpe.engine.errors import InputError, NotUtf8Error
from bpe.engine.hashing import hash_buckets
from bpe.engine.interrupts import holds_interrupts
from bpe.engine.prefetch import prefetch
from bpe.engine.resident import ReleasedBehind
from bpe.engine.scanner import (
    CL100K,
    GPT2,
    O200K,
    SCANNER_IDS,
    SUPERBPE,
    WHITESPACE,
    cl100k_end,
    decode_utf8,
    gpt2_end,
    is_split_space,
    never_a_gap,
    o200k_end,
    superbpe_end,
    whitespace_end,
)
from bpe.engine.unaligned import load_u64

# Counts are int64. Every pair count is at most the bytes of all word occurrences (the sum of count
# x length), and within a round a pair's count plus the occurrences that merges create can reach
# twice that: so the bytes in all must stay below 2**62, half of what int64 holds.
COUNT_LIMIT = 1 << 62


def check_count_limit(total: int, what: str) -> None:
    """Raise InputError, in one line, if `total` (`what` it counts) reaches COUNT_LIMIT."""
    if total >= COUNT_LIMIT:
        raise InputError(f"word counts: {what} come to {total:,}, past the {COUNT_LIMIT:,} (2**62, half of what "
                         "int64 holds) that the merge loop's pair counts can take")  # fmt: skip


def check_pair_counts(parts: Sequence[np.ndarray]) -> None:
    """Refuse the first pair counts of several word buckets (the Dask engine's) that int64 cannot
    hold: a negative one (a bucket's count wrapped), or more pair occurrences than COUNT_LIMIT in all."""
    if any(len(part) and int(part.min()) < 0 for part in parts):
        raise InputError("word counts: a word bucket gave a negative pair count (its counts wrapped past what int64 "
                         "holds)")  # fmt: skip
    if sum(float(part.astype(np.float64).sum()) for part in parts) >= COUNT_LIMIT / 2:
        check_count_limit(sum(sum(part.tolist()) for part in parts), "the pair occurrences of all words")


@dataclass
class WordCounts:
    """Unique words as concatenated UTF-8 bytes (`data`, `offsets`) with their `counts`. Counts
    summed by `sum_by_hash` hold their words grouped by hash: `hash_parts[k]` is the first word of
    part k, whose words all have FNV-1a(word) % (len(hash_parts) - 1) == k (None: in no order)."""

    data: np.ndarray  # uint8
    offsets: np.ndarray  # int64, len(counts) + 1
    counts: np.ndarray  # int64
    hash_parts: np.ndarray | None = None  # int64, parts + 1

    def __len__(self) -> int:
        return len(self.counts)

    def word(self, i: int) -> bytes:
        return self.data[self.offsets[i] : self.offsets[i + 1]].tobytes()

    def to_dict(self) -> dict[bytes, int]:
        return {self.word(i): int(self.counts[i]) for i in range(len(self))}

    def clear(self) -> None:
        """Let go of the words' memory (the counts are empty afterwards): for a caller done with
        them once the merge loop's word tables hold the words."""
        empty = WordCounts.empty()
        self.data, self.offsets, self.counts, self.hash_parts = empty.data, empty.offsets, empty.counts, None

    @property
    def total(self) -> int:
        """Number of pre-tokens counted (the sum of frequencies)."""
        return int(self.counts.sum())

    def occurrence_bytes_estimate(self) -> float:
        """The bytes of all word occurrences (count x length, summed) in float64: near enough to
        tell whether they are far from COUNT_LIMIT. Summed elementwise, not as a dot product: a
        float dot product runs on numpy's BLAS, whose threads then spin for a while on the cores
        that the merge loop's threads need (a tenth of a run's CPU samples on 2 cores)."""
        return float(np.multiply(self.counts, np.diff(self.offsets), dtype=np.float64).sum())

    def check_limit(self) -> None:
        """Refuse (InputError) counts the merge loop could not count exactly in int64: a negative
        count, or words whose bytes in all (count x length, summed) reach COUNT_LIMIT."""
        if len(self) and int(self.counts.min()) < 0:
            i = int(np.argmin(self.counts))
            raise InputError(f"word counts: word {self.word(i)!r} has count {int(self.counts[i])}, below 0")
        if self.occurrence_bytes_estimate() < COUNT_LIMIT / 2:
            return  # far from the limit, whatever the rounding
        lengths = np.diff(self.offsets)
        exact = sum(count * length for count, length in zip(self.counts.tolist(), lengths.tolist()))
        check_count_limit(exact, "the bytes of all word occurrences (count x length)")

    @classmethod
    def empty(cls) -> WordCounts:
        return cls(np.zeros(0, np.uint8), np.zeros(1, np.int64), np.zeros(0, np.int64))

    @classmethod
    def from_dict(cls, counts: dict[bytes, int] | Counter) -> WordCounts:
        words = list(counts)
        lengths = np.fromiter((len(w) for w in words), dtype=np.int64, count=len(words))
        offsets = np.zeros(len(words) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        data = np.frombuffer(b"".join(words), dtype=np.uint8).copy()
        try:
            values = np.fromiter((counts[w] for w in words), dtype=np.int64, count=len(words))
        except OverflowError:
            word = next(w for w in words if not -(1 << 63) <= counts[w] < 1 << 63)
            raise InputError(f"word counts: word {word!r} has count {counts[word]}, past what int64 holds") from None
        return cls(data, offsets, values)

    @staticmethod
    @holds_interrupts
    def combine(parts: Sequence[WordCounts]) -> WordCounts:
        """Sum several counts into one (words unique again)."""
        parts = [p for p in parts if len(p)]
        if not parts:
            return WordCounts.empty()
        if len(parts) == 1:
            return parts[0]
        # Sized for the largest part: the parts share most words, and the table grows if they do not.
        table = table_new(max(len(p) for p in parts), max(len(p.data) for p in parts))
        for part in parts:
            table = _table_add_words(table, part.data, part.offsets, part.counts, _EVERY_WORD, -1)
        return table_result(table)

    @staticmethod
    @holds_interrupts
    def sum_by_hash(sources: list[WordCounts], n: int, release: bool = False) -> WordCounts:
        """Sum several counts into one whose words are grouped in `n` hash parts (so that
        `split_by_hash(n)` costs no copy), each part summed on its own thread: what counting threads
        hand the merge loop's `n` slices. `sources` is emptied, each source let go once read;
        `release`: nothing else holds them, and their bytes are handed back as they are read.

        >>> summed = WordCounts.sum_by_hash([WordCounts.from_dict({b"a": 1, b"b": 2}),
        ...                                  WordCounts.from_dict({b"b": 1, b"c": 4})], 2)
        >>> sorted(summed.to_dict().items())
        [(b'a', 1), (b'b', 3), (b'c', 4)]
        >>> [sorted(part.to_dict()) for part in summed.split_by_hash(2)] == [
        ...     sorted(part.to_dict()) for part in WordCounts.from_dict(summed.to_dict()).split_by_hash(2)]
        True
        """
        with ThreadPoolExecutor(n) as pool:
            buckets = list(pool.map(lambda s: hash_buckets(s.data, s.offsets, n), sources))
            # Room for every word of every source in its part: no part's table grows, so each writes
            # its bytes into its own stretch of one array, and the parts end up one after another.
            entries = sum(np.bincount(b, minlength=n) for b in buckets)
            nbytes = sum(np.bincount(b, weights=np.diff(s.offsets), minlength=n).astype(np.int64)
                         for s, b in zip(sources, buckets))  # fmt: skip
            store = np.empty(max(int(nbytes.sum()), 1), dtype=np.uint8)
            first_byte = np.concatenate([[0], np.cumsum(nbytes)])
            tables = [_table_over(int(entries[k]), store[first_byte[k] : first_byte[k + 1]]) for k in range(n)]
            for j in range(len(sources)):
                source, mine = sources[j], buckets[j]
                behind = ReleasedBehind(source.data) if release else None
                for first in range(0, len(source), SUM_CHUNK):  # every part's words of a chunk, then the next
                    last = min(first + SUM_CHUNK, len(source))
                    chunk = (source.data, source.offsets[first : last + 1], source.counts[first:last], mine[first:last])
                    tables = list(pool.map(lambda table, k, chunk=chunk: _table_add_words(table, *chunk, k), tables,
                                           range(n)))  # fmt: skip
                    if behind is not None:
                        behind.passed(int(source.offsets[last]))
                sources[j] = buckets[j] = source = mine = chunk = behind = None  # its memory goes before the next
        sources.clear()
        return _joined(tables, store, first_byte)

    def split_by_hash(self, n: int) -> list[WordCounts]:
        """The words in `n` parts, word -> part FNV-1a(word) % n: the same split in every process
        and thread, so a word's bucket never depends on who counted it. Views of the words, not a
        copy, when they are grouped in `n` hash parts already (`sum_by_hash`)."""
        if n == 1:
            return [self]
        if self.hash_parts is not None and len(self.hash_parts) == n + 1:
            return [self._words(int(self.hash_parts[k]), int(self.hash_parts[k + 1])) for k in range(n)]
        buckets = hash_buckets(self.data, self.offsets, n)
        parts = []
        for b in range(n):
            keep = np.flatnonzero(buckets == b)
            lengths = np.diff(self.offsets)[keep]
            offsets = np.zeros(len(keep) + 1, np.int64)
            np.cumsum(lengths, out=offsets[1:])
            parts.append(WordCounts(_gather_words(self.data, self.offsets, keep, offsets), offsets, self.counts[keep]))
        return parts

    def _words(self, first: int, end: int) -> WordCounts:
        """Words first .. end - 1, their bytes a view of these."""
        start = self.offsets[first]
        return WordCounts(self.data[start : self.offsets[end]], self.offsets[first : end + 1] - start,
                          self.counts[first:end])  # fmt: skip


def _table_over(entries: int, store: np.ndarray) -> CountTable:
    """An empty table with room for `entries` entries, no more, whose bytes fit `store` (which it
    writes into): it never grows, so its offsets and counts are `entries` long, not half the
    slots, and up to three quarters of its slots may be used (not half: a table that is filled
    once, and read only to be let go)."""
    capacity = 1 << 10
    while 3 * capacity < 4 * entries:
        capacity *= 2
    starts = np.zeros(entries + 1, dtype=np.int64)
    meta = np.zeros(_META_SIZE, dtype=np.int64)
    return CountTable(np.zeros((capacity, 2), dtype=np.uint64), starts, np.empty(entries, np.int64), store, meta)


def _joined(tables: list[CountTable], store: np.ndarray, first_byte: np.ndarray) -> WordCounts:
    """The words of tables that each wrote into their stretch of `store` (from first_byte[k]), as
    one WordCounts of hash parts: each part's bytes moved down to follow the part before."""
    import ctypes

    offsets, counts, bounds, end = [np.zeros(1, np.int64)], [], [0], 0
    for k, table in enumerate(tables):
        n = int(table.meta[_ENTRIES])
        used = int(table.starts[n])
        grown = used and table.store.ctypes.data != store.ctypes.data + first_byte[k]  # an empty view points anywhere
        assert not grown, "a part's table outgrew its stretch"
        if end != first_byte[k] and used:
            ctypes.memmove(store.ctypes.data + end, store.ctypes.data + int(first_byte[k]), used)  # moves down
        offsets.append(table.starts[1 : n + 1] + end)
        counts.append(table.counts[:n])
        bounds.append(bounds[-1] + n)
        end += used
    return WordCounts(store[:end], np.concatenate(offsets), np.concatenate(counts), np.array(bounds, np.int64))


@njit(cache=True, nogil=True)
def _gather_words(data, offsets, keep, new_offsets):
    """The bytes of words `keep`, one after another (word i of the result at new_offsets[i])."""
    out = np.empty(new_offsets[-1], dtype=np.uint8)
    for i in range(len(keep)):
        start = offsets[keep[i]]
        copy_into(out[new_offsets[i] : new_offsets[i + 1]], data[start : start + new_offsets[i + 1] - new_offsets[i]])
    return out


class Tally:
    """Word counts in a compiled hash table that grows as needed: pieces the compiled scanner
    `scanner` (an id of `bpe.engine.scanner.SCANNER_IDS`) cuts from documents of UTF-8 bytes
    (`data`, `offsets` as in an Arrow string array), or counts already made (`add`)."""

    @holds_interrupts
    def __init__(self, expected_words: int = 1 << 12, expected_bytes: int = 1 << 16) -> None:
        self._table = table_new(expected_words, expected_bytes)

    @holds_interrupts
    def count_pieces(self, data: np.ndarray, offsets: np.ndarray, scanner: int, tables: tuple) -> int:
        """Count the pieces of each document data[offsets[i]:offsets[i + 1]]; returns how many.
        `tables`: the scanners' (classes, folds), `bpe.pretokenize.scanner_tables()`. A document
        that is not UTF-8 raises NotUtf8Error naming it, with the documents before it counted."""
        classes, folds = tables
        self._table, pieces, not_utf8 = _count_pieces(data, offsets, scanner, classes, folds, self._table)
        if not_utf8 >= 0:
            raise NotUtf8Error(not_utf8)
        return pieces

    @holds_interrupts
    def add(self, counts: WordCounts) -> None:
        self._table = _table_add_words(self._table, counts.data, counts.offsets, counts.counts, _EVERY_WORD, -1)

    @holds_interrupts
    def result(self) -> WordCounts:
        return table_result(self._table)

    def clear(self) -> None:
        """Let go of the table's memory (the tally is empty afterwards)."""
        self._table = table_new(1, 1)


# ---------------------------------------------------------------------------------------------
# A compiled hash table from byte strings to counts.
# Entries are numbered in the order of first insertion: entry e's bytes are
# store[starts[e]:starts[e + 1]], appended one after another (starts[entries] is the bytes used),
# and its count is counts[e]. Each slot is one row of two uint64, 0 when empty: [the hash's high 16
# bits << 48 | length << 32 | entry + 1, the first 8 bytes]; a length of _LONG or more is held as
# _LONG. A word of at most 8 bytes is found in its slot alone; the frequent words, seen first, have
# their counts together at the start of counts. At most half the slots are used (three quarters in
# the tables of `_table_over`). 16 bytes a slot (they were 32): a 2 GB superword stage counts 14
# million distinct pieces, and halving the slots took 585 MiB off that run's peak.

CountTable = namedtuple("CountTable", ["slots", "starts", "counts", "store", "meta"])

_KEY, _PREFIX = 0, 1  # columns of slots
_ENTRY_MASK = np.uint64(0xFFFFFFFF)  # the low bits of the _KEY column: entry + 1
_LENGTH_SHIFT, _LONG = np.uint64(32), 0xFFFF  # the length's bits in the _KEY column, and its cap
_TAG_SHIFT = np.uint64(48)  # where the hash's high bits start in the _KEY column
_ENTRIES = 0  # the entry of meta
_META_SIZE = _ENTRIES + 1


@njit(cache=True)
def table_new(expected_entries, expected_bytes):
    capacity = 1 << 10
    while capacity < 2 * expected_entries:
        capacity *= 2
    starts = np.empty(capacity // 2 + 1, dtype=np.int64)
    starts[0] = 0
    return CountTable(
        np.zeros((capacity, 2), dtype=np.uint64),
        starts,
        np.empty(capacity // 2, dtype=np.int64),
        np.empty(max(expected_bytes, 1024), dtype=np.uint8),
        np.zeros(_META_SIZE, dtype=np.int64),
    )


@njit
def borrowed_table(table):
    """The table as borrowed views (see `borrow.py`), for a kernel's loop; never returned."""
    return CountTable(
        borrowed(table.slots), borrowed(table.starts), borrowed(table.counts), borrowed(table.store),
        borrowed(table.meta),
    )  # fmt: skip


# The table's hash takes a word 8 bytes at a time (`load_u64`): one multiply a machine word rather
# than FNV-1a's one a byte, whose chain of multiplies was a fifth of counting's time on one thread.
# It need not be FNV-1a: nothing outside a table sees it (`hash_buckets` splits words by FNV-1a).
_SEED = np.uint64(0x9E3779B97F4A7C15)
_MIX = np.uint64(0xFF51AFD7ED558CCD)
_MIX_2 = np.uint64(0xC4CEB9FE1A85EC53)
_LOW_BYTES = np.array([(1 << (8 * n)) - 1 for n in range(8)], dtype=np.uint64)  # the first n bytes' bits
assert sys.byteorder == "little", "load_u64 reads words little-endian"


@njit(inline="always")
def hash_and_prefix(data, start, end):
    """A hash of data[start:end] and its first 8 bytes packed little-endian (fewer: zero above)."""
    length = end - start
    h = np.uint64(length) * _SEED
    i = start
    while i + 8 <= end:
        h = (h ^ load_u64(data, i)) * _MIX
        h ^= h >> np.uint64(32)
        i += 8
    if i < end:
        h = (h ^ _first_bytes(data, i, end - i)) * _MIX
    prefix = load_u64(data, start) if length >= 8 else _first_bytes(data, start, length)
    h ^= h >> np.uint64(33)  # the finish of MurmurHash3: every bit of h moves every bit of the hash
    h *= _MIX_2
    h ^= h >> np.uint64(29)
    return h, prefix


@njit(inline="always")
def _first_bytes(data, start, n):
    """data[start:start + n] packed little-endian, n < 8; read as a word where the array has room."""
    if start + 8 <= len(data):
        return load_u64(data, start) & _LOW_BYTES[n]
    word = np.uint64(0)
    for j in range(n):
        word |= np.uint64(data[start + j]) << np.uint64(8 * j)
    return word


@njit(inline="always")
def table_entry(table, data, start, end, weight):
    """Add `weight` to the count of data[start:end]; returns its entry (0, 1, ... in the order of
    first insertion), or -1, changing nothing, if the table is full."""
    h, prefix = hash_and_prefix(data, start, end)
    return hashed_entry(table, data, start, end, weight, h, prefix)


@njit(inline="always")
def table_has_room(table, entries, nbytes):
    """Whether `entries` more entries of `nbytes` bytes in all fit without growing."""
    n = table.meta[_ENTRIES]
    return n + entries <= len(table.counts) and table.starts[n] + nbytes <= len(table.store)


@njit(inline="always")
def _first_slot(table, h):
    """The slot where the search for a word of hash `h` starts."""
    return np.int64(h & np.uint64(len(table.slots) - 1))  # the low bits: the tag holds the high ones


@njit(inline="always")
def fetch_slot(table, h):
    """Ask the processor for the first slot a word of hash `h` is looked for in (`prefetch`): a
    loop that hashes its words a few ahead of adding them (`hashed_entry`) finds the slot in cache."""
    prefetch(table.slots, _first_slot(table, h))


@njit(inline="always")
def hashed_entry(table, data, start, end, weight, h, prefix):
    """`table_entry` given the word's hash and prefix (`hash_and_prefix`)."""
    slots, starts, counts, store = table.slots, table.starts, table.counts, table.store
    length = end - start
    entries = table.meta[_ENTRIES]
    used = starts[entries]
    if entries >= len(counts) or used + length > len(store):
        return -1
    tag = (h >> _TAG_SHIFT) << _TAG_SHIFT | np.uint64(min(length, _LONG)) << _LENGTH_SHIFT
    mask = np.uint64(len(slots) - 1)
    i = np.uint64(_first_slot(table, h))
    while True:
        key = slots[i, _KEY]
        if key == 0:
            break
        if key & ~_ENTRY_MASK == tag and slots[i, _PREFIX] == prefix:
            e = np.int64(key & _ENTRY_MASK) - 1
            same = True
            if length > 8:
                s = starts[e]
                if length >= _LONG and starts[e + 1] - s != length:  # below the cap, the tag held it
                    same = False
                else:
                    for j in range(8, length):
                        if store[s + j] != data[start + j]:
                            same = False
                            break
            if same:
                counts[e] += weight
                return e
        i = (i + np.uint64(1)) & mask
    copy_into(store[used : used + length], data[start:end])
    starts[entries + 1] = used + length
    counts[entries] = weight
    slots[i, _KEY] = tag | np.uint64(entries + 1)
    slots[i, _PREFIX] = prefix
    table.meta[_ENTRIES] = entries + 1
    return entries


@njit(cache=True)
def table_make_room(table, length):
    """A table with room for one more entry of `length` bytes (doubling what is short)."""
    slots, starts, counts, store, meta = table.slots, table.starts, table.counts, table.store, table.meta
    entries = meta[_ENTRIES]
    if entries >= len(counts):
        capacity = 2 * len(slots)
        slots = _rehashed(store, starts, entries, capacity)
        more_starts = np.empty(capacity // 2 + 1, dtype=np.int64)
        copy_into(more_starts[: entries + 1], starts[: entries + 1])
        starts = more_starts
        more_counts = np.empty(capacity // 2, dtype=np.int64)
        copy_into(more_counts[:entries], counts[:entries])
        counts = more_counts
    used = starts[entries]
    if used + length > len(store):
        more_store = np.empty(max(2 * len(store), used + length), dtype=np.uint8)
        copy_into(more_store[:used], store[:used])
        store = more_store
    return CountTable(slots, starts, counts, store, meta)


INSERTS_AHEAD = 8  # words hashed ahead of the one added (`_insert_until_full`)
REHASH_AHEAD = 16  # entries hashed ahead of the one placed, their slots fetched meanwhile


@njit(cache=True)
def _rehashed(store, starts, entries, capacity):
    """Slots of `capacity` rows holding entries 0, ..., entries - 1, placed in that order. The
    hashes come again from the store (cheaper than keeping them); each entry's slot is asked of
    the processor `REHASH_AHEAD` entries before it is placed: the slots of a table of millions of
    words are far larger than the caches, and placing them one miss at a time took most of the
    time of a 500 MB run's growth."""
    slots = np.zeros((capacity, 2), dtype=np.uint64)
    mask = np.uint64(capacity - 1)
    hashes = np.empty(REHASH_AHEAD, dtype=np.uint64)
    prefixes = np.empty(REHASH_AHEAD, dtype=np.uint64)
    for e in range(entries + REHASH_AHEAD):
        k = e % REHASH_AHEAD
        if e >= REHASH_AHEAD:
            placed = e - REHASH_AHEAD
            i = hashes[k] & mask
            while slots[i, _KEY] != 0:
                i = (i + np.uint64(1)) & mask
            held = np.uint64(min(starts[placed + 1] - starts[placed], _LONG))
            slots[i, _KEY] = (hashes[k] >> _TAG_SHIFT) << _TAG_SHIFT | held << _LENGTH_SHIFT | np.uint64(placed + 1)
            slots[i, _PREFIX] = prefixes[k]
        if e < entries:
            hashes[k], prefixes[k] = hash_and_prefix(store, starts[e], starts[e + 1])
            prefetch(slots, np.int64(hashes[k] & mask))
    return slots


SUM_CHUNK = 1 << 18  # `sum_by_hash`: words of a source added to the parts before its bytes are handed back
_EVERY_WORD = np.zeros(0, dtype=np.int64)  # the buckets of `_table_add_words` that adds every word


@njit(cache=True, nogil=True)
def _table_add_words(table, data, offsets, weights, buckets, part):
    """Add the words data[offsets[i]:offsets[i + 1]] with weights[i]: every word (part -1), or
    those whose buckets[i] is `part`."""
    i = np.int64(0)
    while i < len(weights):
        i = _insert_until_full(table, data, offsets, weights, buckets, part, i)
        if i < len(weights):
            table = table_make_room(table, offsets[i + 1] - offsets[i])
    return table


@njit(cache=True, nogil=True)
def _insert_until_full(table, data, offsets, weights, buckets, part, first):
    """Add words `first`, `first` + 1, ... (as `_table_add_words`); returns where it stopped (all
    done, or the table is full). The arrays stay fixed inside the loop, which keeps it fast. Each
    word is added `INSERTS_AHEAD` words after it is hashed and its slot asked of the processor, as
    the counting loop does with its pieces."""
    table, data, offsets, weights = borrowed_table(table), borrowed(data), borrowed(offsets), borrowed(weights)
    buckets = borrowed(buckets)
    waiting = np.empty(INSERTS_AHEAD, dtype=np.int64)  # the words hashed, not yet added
    hashes, prefixes = np.empty(INSERTS_AHEAD, dtype=np.uint64), np.empty(INSERTS_AHEAD, dtype=np.uint64)
    hashed = added = 0
    waiting_bytes = 0
    stopped = len(weights)
    for i in range(first, len(weights)):
        if part >= 0 and buckets[i] != part:
            continue
        length = offsets[i + 1] - offsets[i]
        if not table_has_room(table, hashed - added + 1, waiting_bytes + length):
            stopped = i
            break
        if hashed - added == INSERTS_AHEAD:
            k = added % INSERTS_AHEAD
            w = waiting[k]
            hashed_entry(table, data, offsets[w], offsets[w + 1], weights[w], hashes[k], prefixes[k])
            waiting_bytes -= offsets[w + 1] - offsets[w]
            added += 1
        k = hashed % INSERTS_AHEAD
        waiting[k] = i
        hashes[k], prefixes[k] = hash_and_prefix(data, offsets[i], offsets[i + 1])
        fetch_slot(table, hashes[k])
        waiting_bytes += length
        hashed += 1
    while added < hashed:  # room was set aside for the words waiting
        k = added % INSERTS_AHEAD
        w = waiting[k]
        hashed_entry(table, data, offsets[w], offsets[w + 1], weights[w], hashes[k], prefixes[k])
        added += 1
    return stopped


def _count_pieces(data, doc_offsets, scanner_id, classes, folds, table):
    """Scan every document with the named pattern's scanner and count its pieces, growing the
    table whenever it fills. Returns (table, pieces counted, the first document that is not UTF-8
    or -1), stopping at that document."""
    longest = int(np.diff(doc_offsets).max()) if len(doc_offsets) > 1 else 0
    cps = np.empty(longest + 1, dtype=np.int32)
    byte_pos = np.empty(longest + 2, dtype=np.int64)
    count_until_full = PIECE_COUNTERS[scanner_id]
    doc, position, pieces = 0, 0, 0
    while True:
        doc, position, more = count_until_full(table, data, doc_offsets, doc, position, classes, folds, cps, byte_pos)
        pieces += more
        if position < 0:
            return table, pieces, doc
        if doc == len(doc_offsets) - 1:
            return table, pieces, -1
        table = table_make_room(table, longest)


# The counting loop, one kernel for every pattern: it counts pieces from code point `position` of
# document `doc` on, and stops where the table is full, returning (doc, position, pieces counted),
# doc == number of documents when all are done, position -1 when document doc is not UTF-8. It
# works on borrowed views of its arrays (reference counts on every scanner call and table insert
# cost two thirds of the time otherwise). Each pattern's kernel passes its scanner (`piece_end`)
# and what it drops between pieces (`gap`) to the inlined loop, so that its scanner alone is
# compiled into it: a switch over the patterns at every piece cost half the time, and a switch on
# a constant compiled all five scanners into each kernel.
#
# A piece is counted `PIECES_AHEAD` pieces after it is cut: its hash is taken as it is cut and its
# slot asked of the processor (`prefetch`), so that the slot is in cache by the time the piece is
# counted, while the pieces between are cut. A big corpus's table is far larger than the caches
# (134 MB of slots at 500 MB), and waiting on each slot in turn was a sixth of counting's time.
# Room for the pieces waiting is set aside as they are cut, so that the loop stops, where the table
# is full, at a piece not yet cut: the one it resumes from.
PIECES_AHEAD = 8


@njit(inline="always")
def _count_until_full(piece_end, gap, table, data, doc_offsets, doc, position, classes, folds, cps, byte_pos):
    table, data, doc_offsets = borrowed_table(table), borrowed(data), borrowed(doc_offsets)
    classes, folds, cps, byte_pos = borrowed(classes), borrowed(folds), borrowed(cps), borrowed(byte_pos)
    start, end = np.empty(PIECES_AHEAD, dtype=np.int64), np.empty(PIECES_AHEAD, dtype=np.int64)
    hashes, prefixes = np.empty(PIECES_AHEAD, dtype=np.uint64), np.empty(PIECES_AHEAD, dtype=np.uint64)
    cut = counted = 0  # pieces cut, pieces counted: piece i waits in slot i % PIECES_AHEAD of the arrays above
    waiting_bytes = 0
    stopped, resume = len(doc_offsets) - 1, 0  # where the loop stopped: every document, unless the table filled
    for d in range(doc, len(doc_offsets) - 1):
        n = decode_utf8(data, doc_offsets[d], doc_offsets[d + 1], cps, byte_pos)
        if n < 0:  # not UTF-8: the loop stops before it, at position -1
            stopped, resume = d, -1
            break
        p = position if d == doc else 0
        while p < n:
            e = piece_end(cps, n, p, classes, folds)
            if gap(cps, p, classes):  # whitespace that str.split() drops
                p = e
                continue
            length = byte_pos[e] - byte_pos[p]
            if not table_has_room(table, cut - counted + 1, waiting_bytes + length):
                stopped, resume = d, p
                break
            if cut - counted == PIECES_AHEAD:
                k = counted % PIECES_AHEAD
                hashed_entry(table, data, start[k], end[k], 1, hashes[k], prefixes[k])
                waiting_bytes -= end[k] - start[k]
                counted += 1
            k = cut % PIECES_AHEAD
            start[k], end[k] = byte_pos[p], byte_pos[e]
            hashes[k], prefixes[k] = hash_and_prefix(data, start[k], end[k])
            fetch_slot(table, hashes[k])
            waiting_bytes += length
            cut += 1
            p = e
        if stopped == d:
            break
    while counted < cut:  # the pieces still waiting: room was set aside for them
        k = counted % PIECES_AHEAD
        hashed_entry(table, data, start[k], end[k], 1, hashes[k], prefixes[k])
        counted += 1
    return stopped, resume, counted


@njit(nogil=True, cache=True)
def _count_gpt2(table, data, doc_offsets, doc, position, classes, folds, cps, byte_pos):
    return _count_until_full(
        gpt2_end, never_a_gap, table, data, doc_offsets, doc, position, classes, folds, cps, byte_pos
    )


@njit(nogil=True, cache=True)
def _count_cl100k(table, data, doc_offsets, doc, position, classes, folds, cps, byte_pos):
    return _count_until_full(
        cl100k_end, never_a_gap, table, data, doc_offsets, doc, position, classes, folds, cps, byte_pos
    )


@njit(nogil=True, cache=True)
def _count_o200k(table, data, doc_offsets, doc, position, classes, folds, cps, byte_pos):
    return _count_until_full(
        o200k_end, never_a_gap, table, data, doc_offsets, doc, position, classes, folds, cps, byte_pos
    )


@njit(nogil=True, cache=True)
def _count_whitespace(table, data, doc_offsets, doc, position, classes, folds, cps, byte_pos):
    return _count_until_full(
        whitespace_end, is_split_space, table, data, doc_offsets, doc, position, classes, folds, cps, byte_pos
    )


@njit(nogil=True, cache=True)
def _count_superbpe(table, data, doc_offsets, doc, position, classes, folds, cps, byte_pos):
    return _count_until_full(
        superbpe_end, never_a_gap, table, data, doc_offsets, doc, position, classes, folds, cps, byte_pos
    )


PIECE_COUNTERS = {GPT2: _count_gpt2, CL100K: _count_cl100k, O200K: _count_o200k, WHITESPACE: _count_whitespace,
                  SUPERBPE: _count_superbpe}  # fmt: skip
assert set(PIECE_COUNTERS) == set(SCANNER_IDS.values()), "a pattern kind without its counting kernel"


def table_entries(table: CountTable) -> int:
    """How many entries (distinct words) the table holds."""
    return int(table.meta[_ENTRIES])


def table_result(table: CountTable) -> WordCounts:
    """The table's words and counts. Their bytes and offsets are the table's store and starts, not
    copies (a corpus's unique words, hundreds of MB, twice at the end of counting): entries are
    only ever appended, and a store that grows is a new array, so the words stay as they are."""
    n = int(table.meta[_ENTRIES])
    return WordCounts(table.store[: table.starts[n]], table.starts[: n + 1], table.counts[:n].copy())

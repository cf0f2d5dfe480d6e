"""Counting pre-tokens: the unique words of a corpus with their frequencies.

Memory grows with the number of unique words, not with the corpus: documents stream through a
`WordCounter` batch by batch. For the named patterns the counter scans UTF-8 bytes with the
compiled scanners in `bpe.engine.scanner` and counts in a compiled hash table; other patterns use the
`regex` module. Both give the counts of running the pattern over every document.

>>> counter = WordCounter(Pretokenizer("gpt2"))
>>> counter.add_texts(["the cat", "the hat"])
>>> sorted(counter.result().to_dict().items())
[(b' cat', 1), (b' hat', 1), (b'the', 2)]
"""

from __future__ import annotations

import queue
import threading
from collections import Counter, namedtuple
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit

from bpe.engine.borrow import borrowed
from bpe.engine.cores import available_cores
from bpe.engine.hashing import FNV_OFFSET_BASIS, fnv1a_step, hash_buckets
from bpe.engine.interrupts import holds_interrupts
from bpe.engine.scanner import (
    CL100K,
    GPT2,
    O200K,
    SCANNER_IDS,
    WHITESPACE,
    decode_utf8,
    is_split_space,
    next_cl100k,
    next_gpt2,
    next_o200k,
    next_whitespace,
    unicode_tables,
)
from bpe.errors import InputError
from bpe.inputs.documents import text_array
from bpe.inputs.formats import is_text_type
from bpe.inputs.read import read_batches
from bpe.inputs.shard import Shard
from bpe.pretokenize import Pretokenizer
from bpe.progress import estimate_text_bytes
from bpe.settings import check_setting

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
    """Refuse the first pair counts of several word shards (the Dask engine's) that int64 cannot
    hold: a negative one (a shard's count wrapped), or more pair occurrences than COUNT_LIMIT in all."""
    if any(len(part) and int(part.min()) < 0 for part in parts):
        raise InputError("word counts: a word shard gave a negative pair count (its counts wrapped past what int64 "
                         "holds)")  # fmt: skip
    if sum(float(part.astype(np.float64).sum()) for part in parts) >= COUNT_LIMIT / 2:
        check_count_limit(sum(sum(part.tolist()) for part in parts), "the pair occurrences of all words")


@dataclass
class WordCounts:
    """Unique words as concatenated UTF-8 bytes (`data`, `offsets`) with their `counts`."""

    data: np.ndarray  # uint8
    offsets: np.ndarray  # int64, len(counts) + 1
    counts: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.counts)

    def word(self, i: int) -> bytes:
        return self.data[self.offsets[i] : self.offsets[i + 1]].tobytes()

    def to_dict(self) -> dict[bytes, int]:
        return {self.word(i): int(self.counts[i]) for i in range(len(self))}

    @property
    def total(self) -> int:
        """Number of pre-tokens counted (the sum of frequencies)."""
        return int(self.counts.sum())

    def check_limit(self) -> None:
        """Refuse (InputError) counts the merge loop could not count exactly in int64: a negative
        count, or words whose bytes in all (count x length, summed) reach COUNT_LIMIT."""
        if len(self) and int(self.counts.min()) < 0:
            i = int(np.argmin(self.counts))
            raise InputError(f"word counts: word {self.word(i)!r} has count {int(self.counts[i])}, below 0")
        lengths = np.diff(self.offsets)
        if float(self.counts.astype(np.float64) @ lengths.astype(np.float64)) < COUNT_LIMIT / 2:
            return  # far from the limit, whatever the rounding
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

    def to_arrow(self) -> pa.Table:
        """A two-column table (`word` binary, `count` int64), for Parquet and for moving between workers."""
        words = pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), len(self), [None, pa.py_buffer(self.offsets), pa.py_buffer(self.data)]
        )
        return pa.table({"word": words, "count": pa.array(self.counts, pa.int64())})

    @classmethod
    def from_arrow(cls, table: pa.Table) -> WordCounts:
        words = table.column("word").combine_chunks().cast(pa.large_binary())
        _, offsets_buf, data_buf = words.buffers()
        offsets = np.frombuffer(offsets_buf, dtype=np.int64)[words.offset : words.offset + len(words) + 1]
        data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
        data = data[offsets[0] : offsets[-1]].copy()
        offsets = offsets - offsets[0]
        counts = table.column("count").to_numpy().astype(np.int64, copy=True)
        return cls(data, offsets.copy(), counts)

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
        table = _table_new(max(len(p) for p in parts), max(len(p.data) for p in parts))
        for part in parts:
            table = _table_add_words(table, part.data, part.offsets, part.counts)
        return _table_result(table)

    def split_by_hash(self, n: int) -> list[WordCounts]:
        """The words in `n` parts, word -> part FNV-1a(word) % n: the same split in every process
        and thread, so a word's shard never depends on who counted it."""
        if n == 1:
            return [self]
        buckets = hash_buckets(self.data, self.offsets, n)
        parts = []
        for b in range(n):
            keep = np.flatnonzero(buckets == b)
            lengths = np.diff(self.offsets)[keep]
            offsets = np.zeros(len(keep) + 1, np.int64)
            np.cumsum(lengths, out=offsets[1:])
            parts.append(WordCounts(_gather_words(self.data, self.offsets, keep, offsets), offsets, self.counts[keep]))
        return parts


@njit(cache=True, nogil=True)
def _gather_words(data, offsets, keep, new_offsets):
    """The bytes of words `keep`, one after another (word i of the result at new_offsets[i])."""
    out = np.empty(new_offsets[-1], dtype=np.uint8)
    for i in range(len(keep)):
        start = offsets[keep[i]]
        out[new_offsets[i] : new_offsets[i + 1]] = data[start : start + new_offsets[i + 1] - new_offsets[i]]
    return out


@dataclass
class CountStats:
    """What a counter has seen: documents and bytes read, null rows skipped, special tokens met."""

    documents: int = 0
    bytes: int = 0
    null_rows: int = 0
    pretokens: int = 0
    special_tokens: dict[str, int] = field(default_factory=dict)
    held_out_rows: int = 0  # rows set aside for evaluation (not counted above)

    def add(self, other: CountStats) -> None:
        self.documents += other.documents
        self.bytes += other.bytes
        self.null_rows += other.null_rows
        self.pretokens += other.pretokens
        self.held_out_rows += other.held_out_rows
        for token, n in other.special_tokens.items():
            self.special_tokens[token] = self.special_tokens.get(token, 0) + n


class WordCounter:
    """Accumulates word counts over batches of documents (lists of str or Arrow string arrays).

    With `holdout` > 0, that fraction of rows (chosen by a hash of each row's text, so the same
    row is always on the same side) is not counted; up to `sample_bytes` of them are kept in
    `held_out` for evaluation.
    """

    @holds_interrupts
    def __init__(self, pretokenizer: Pretokenizer, holdout: float = 0.0, sample_bytes: int = 1 << 20) -> None:
        self.pretokenizer = pretokenizer
        self.stats = CountStats()
        self.holdout = holdout
        self.sample_bytes = sample_bytes
        self.held_out: list[str] = []
        self._held_out_bytes = 0
        self._scanner = SCANNER_IDS.get(pretokenizer.name)
        self._table = _table_new(1 << 12, 1 << 16)
        self._python_counts: Counter[str] = Counter()

    def add_texts(self, texts: Iterable[str | None], first_row: int = 0) -> None:
        """Count a batch of documents; a lone surrogate raises InvalidTextError naming its row
        (`first_row` is the row of the first document)."""
        self.add_arrow(text_array(list(texts), first_row))

    def add_stream(self, texts: Iterable[str | None], batch_size: int = 8192) -> None:
        """Count documents from any iterable (a generator too), `batch_size` at a time."""
        batch: list[str | None] = []
        first_row = 0
        for text in texts:
            batch.append(text)
            if len(batch) >= batch_size:
                self.add_texts(batch, first_row)
                first_row += len(batch)
                batch = []
        if batch:
            self.add_texts(batch, first_row)

    @holds_interrupts
    def add_arrow(self, array: pa.Array | pa.ChunkedArray) -> None:
        """Count a batch of documents: strings of any Arrow layout, dictionary-encoded ones too (see
        `is_text_type`); nulls are skipped (and counted in `stats.null_rows`)."""
        if isinstance(array, pa.ChunkedArray):
            for chunk in array.chunks:
                self.add_arrow(chunk)
            return
        if not pa.types.is_large_string(array.type):
            if not is_text_type(array.type):  # a cast would turn numbers into text
                raise TypeError(f"expected an Arrow array of strings, got {array.type}")
            array = array.cast(pa.large_string())  # first: a dictionary's nulls may sit in its values
        self.stats.null_rows += array.null_count
        if array.null_count:
            array = array.drop_null()
        if self.holdout > 0:
            array = self._set_aside(array)
        self.stats.documents += len(array)
        ordinary = self._cut_special_tokens(array)
        if self._scanner is None:
            split = self.pretokenizer.split_ordinary
            before = self._python_counts.total()
            for text in ordinary.to_pylist():
                self._python_counts.update(split(text))
            self.stats.pretokens += self._python_counts.total() - before
            return
        _, offsets_buf, data_buf = ordinary.buffers()
        offsets = np.frombuffer(offsets_buf, dtype=np.int64)[ordinary.offset : ordinary.offset + len(ordinary) + 1]
        data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(1, np.uint8)
        classes, folds = unicode_tables()
        self._table, pieces = _count_pieces(data, offsets, self._scanner, classes, folds, self._table)
        self.stats.pretokens += pieces

    def _set_aside(self, array: pa.LargeStringArray) -> pa.LargeStringArray:
        mask = pa.array(holdout_mask(array, self.holdout))
        held = array.filter(mask)
        self.stats.held_out_rows += len(held)
        for text in held.to_pylist() if self._held_out_bytes < self.sample_bytes else ():
            if self._held_out_bytes >= self.sample_bytes:
                break
            self.held_out.append(text)
            self._held_out_bytes += len(text.encode("utf-8"))
        return array.filter(pc.invert(mask))

    def _cut_special_tokens(self, array: pa.LargeStringArray) -> pa.LargeStringArray:
        """Count the bytes, and replace documents holding special tokens by their ordinary segments."""
        self.stats.bytes += int(pc.sum(pc.binary_length(array)).as_py() or 0)
        if not self.pretokenizer.special_tokens:
            return array
        has_special = pc.match_substring(array, self.pretokenizer.special_tokens[0])
        for token in self.pretokenizer.special_tokens[1:]:
            has_special = pc.or_(has_special, pc.match_substring(array, token))
        if not pc.any(has_special).as_py():
            return array
        plain = array.filter(pc.invert(has_special))
        segments: list[str] = []
        for text in array.filter(has_special).to_pylist():
            for segment, is_special in self.pretokenizer.segments(text):
                if is_special:
                    self.stats.special_tokens[segment] = self.stats.special_tokens.get(segment, 0) + 1
                else:
                    segments.append(segment)
        return pa.concat_arrays([plain, pa.array(segments, pa.large_string())])

    @holds_interrupts
    def absorb(self, other: WordCounter) -> None:
        """Add another counter's counts, stats and held-out rows into this one (and empty the other)."""
        part = other.result()
        other._table = _table_new(1, 1)
        self._table = _table_add_words(self._table, part.data, part.offsets, part.counts)
        self.stats.add(other.stats)
        self.held_out.extend(other.held_out)

    @holds_interrupts
    def result(self) -> WordCounts:
        counts = _table_result(self._table)
        if self._python_counts:
            counts = WordCounts.combine(
                [counts, WordCounts.from_dict({w.encode(): n for w, n in self._python_counts.items()})]
            )
        return counts


HOLDOUT_BUCKETS = 1_000_000


def holdout_mask(array: pa.LargeStringArray, fraction: float) -> np.ndarray:
    """Which rows are held out: FNV-1a of the row's UTF-8 bytes, modulo a million, below
    fraction x a million. Deterministic, and independent of where the row sits."""
    _, offsets_buf, data_buf = array.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)[array.offset : array.offset + len(array) + 1]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(1, np.uint8)
    return hash_buckets(data, offsets, HOLDOUT_BUCKETS) < int(round(fraction * HOLDOUT_BUCKETS))


# The modules whose code decides counts, relative to the `bpe` package folder: of bpe/inputs/, those
# that decide which text of a shard is counted (finding the shards and in-memory documents do not:
# cached counts are a shard's, keyed by its content).
COUNTING_MODULES = (
    "engine/count.py",
    "engine/hashing.py",
    "engine/scanner.py",
    "pretokenize.py",
    "inputs/shard.py",
    "inputs/formats.py",
    "inputs/selection.py",
    "inputs/read.py",
    "distributed/counting.py",
)


def counting_code_version() -> str:
    """A hash of the code that decides counts: cached counts are reused only while it is unchanged."""
    import hashlib
    from pathlib import Path

    package = Path(__file__).parents[1]
    digest = hashlib.sha256()
    for name in COUNTING_MODULES:
        digest.update(name.encode() + (package / name).read_bytes())
    return digest.hexdigest()[:16]


def release_memory() -> None:
    """Hand freed memory back to the operating system (glibc keeps it otherwise), so that peak
    memory is the largest phase, not the sum of phases."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def use_system_allocator() -> None:
    """Arrow's default pool (jemalloc) keeps freed batches around; the system pool returns them."""
    pa.set_memory_pool(pa.system_memory_pool())


def count_words(texts: Iterable[str], pattern: str = "gpt2", special_tokens: Sequence[str] = ()) -> WordCounts:
    """Word counts of an iterable of documents (convenience for small inputs)."""
    counter = WordCounter(Pretokenizer(pattern, special_tokens))
    counter.add_stream(texts)
    return counter.result()


def count_shards(
    shards: Sequence[Shard],
    pretokenizer: Pretokenizer,
    text_column: str = "text",
    threads: int | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> tuple[WordCounts, CountStats, list[dict]]:
    """Count every shard: one thread reads batches, `threads` threads count them (the compiled
    scanner releases the GIL). Returns the counts, what was seen, and each shard's fingerprint."""
    if threads is None:
        threads = min(available_cores(), 8)
    check_setting("threads", threads)  # 0 or -5 would count nothing, or all on one thread unasked
    batches: queue.Queue = queue.Queue(maxsize=2 * threads)
    fingerprints: list[dict] = []
    failures: list[BaseException] = []
    done_bytes = [0, 0]  # progress: file bytes read, text bytes counted (the summary's bytes)
    total_bytes = sum(s.size for s in shards)
    lock = threading.Lock()
    stop = threading.Event()
    finished = object()

    def read() -> None:
        try:
            for shard in shards:
                fingerprints.append(shard.fingerprint())
                for batch in read_batches(shard, text_column, pretokenizer):
                    if stop.is_set():
                        return
                    batches.put(batch)
        except BaseException as exc:  # handed to the caller below
            failures.append(exc)
            stop.set()
        finally:
            for _ in range(threads):
                batches.put(finished)

    def count(counter: WordCounter) -> None:
        while True:  # keeps draining after a failure so that the reader never blocks
            item = batches.get()
            if item is finished:
                return
            if stop.is_set():
                continue
            try:
                array, share = item
                before = counter.stats.bytes
                counter.add_arrow(array)
                with lock:
                    done_bytes[0] += share
                    done_bytes[1] += counter.stats.bytes - before
                    if progress is not None:
                        progress("count", done_bytes[1], estimate_text_bytes(done_bytes[1], done_bytes[0], total_bytes))
            except BaseException as exc:
                failures.append(exc)
                stop.set()

    counters = [WordCounter(pretokenizer) for _ in range(threads)]
    workers = [threading.Thread(target=read, daemon=True)]
    workers += [threading.Thread(target=count, args=(c,), daemon=True) for c in counters]
    if progress is not None:
        progress("count", 0, total_bytes)
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if failures:
        raise failures[0]
    for other in counters[1:]:
        counters[0].absorb(other)
    if progress is not None:
        progress("count", counters[0].stats.bytes, counters[0].stats.bytes)
    return counters[0].result(), counters[0].stats, fingerprints


# ---------------------------------------------------------------------------------------------
# A compiled hash table from byte strings to counts.
# Each slot is one row of four uint64: [hash, first 8 bytes, (entry + 1) | length << 32, count], so
# a lookup of a short word touches a single cache line. Entry e's bytes are
# store[starts[e]:starts[e] + length], appended in insertion order; meta = [entries, bytes used].

CountTable = namedtuple("CountTable", ["slots", "starts", "store", "meta"])

_HASH, _PREFIX, _ENTRY, _COUNT = 0, 1, 2, 3  # columns of slots
_ENTRY_MASK = np.uint64(0xFFFFFFFF)  # the low bits of the _ENTRY column: entry + 1
_LENGTH_SHIFT = np.uint64(32)  # where the length starts in the _ENTRY column
_ENTRIES, _BYTES_USED = 0, 1  # entries of meta
_META_SIZE = _BYTES_USED + 1


@njit(cache=True)
def _table_new(expected_entries, expected_bytes):
    capacity = 1 << 10
    while capacity < 2 * expected_entries:
        capacity *= 2
    return CountTable(
        np.zeros((capacity, 4), dtype=np.uint64),
        np.empty(capacity // 2 + 1, dtype=np.int64),
        np.empty(max(expected_bytes, 1024), dtype=np.uint8),
        np.zeros(_META_SIZE, dtype=np.int64),
    )


@njit
def _borrowed_table(table):
    """The table as borrowed views (see `borrow.py`), for a kernel's loop; never returned."""
    return CountTable(borrowed(table.slots), borrowed(table.starts), borrowed(table.store), borrowed(table.meta))


@njit(inline="always")
def _hash_and_prefix(data, start, end):
    """FNV-1a hash of data[start:end] and its first 8 bytes packed little-endian."""
    h = FNV_OFFSET_BASIS
    prefix = np.uint64(0)
    for i in range(start, end):
        b = np.uint64(data[i])
        h = fnv1a_step(h, b)
        if i - start < 8:
            prefix |= b << np.uint64(8 * (i - start))
    return h, prefix


@njit(inline="always")
def _table_insert(table, data, start, end, weight):
    """Add `weight` to the count of data[start:end]. Returns False, changing nothing, if the table is full."""
    slots, starts, store, meta = table.slots, table.starts, table.store, table.meta
    length = end - start
    entries = meta[_ENTRIES]
    used = meta[_BYTES_USED]
    if entries >= len(starts) - 1 or used + length > len(store):
        return False
    h, prefix = _hash_and_prefix(data, start, end)
    tag = np.uint64(length) << _LENGTH_SHIFT
    mask = np.uint64(len(slots) - 1)
    i = h & mask
    while True:
        m = slots[i, _ENTRY]
        if m == 0:
            break
        if slots[i, _HASH] == h and slots[i, _PREFIX] == prefix and (m & ~_ENTRY_MASK) == tag:
            same = True
            if length > 8:
                s = starts[np.int64(m & _ENTRY_MASK) - 1]
                for j in range(8, length):
                    if store[s + j] != data[start + j]:
                        same = False
                        break
            if same:
                slots[i, _COUNT] += np.uint64(weight)
                return True
        i = (i + np.uint64(1)) & mask
    store[used : used + length] = data[start:end]
    starts[entries] = used
    slots[i, _HASH] = h
    slots[i, _PREFIX] = prefix
    slots[i, _ENTRY] = np.uint64(entries + 1) | tag
    slots[i, _COUNT] = np.uint64(weight)
    meta[_ENTRIES] = entries + 1
    meta[_BYTES_USED] = used + length
    return True


@njit(cache=True)
def _table_make_room(table, length):
    """A table with room for one more entry of `length` bytes (doubling what is short)."""
    slots, starts, store, meta = table.slots, table.starts, table.store, table.meta
    entries = meta[_ENTRIES]
    if entries >= len(starts) - 1:
        capacity = 2 * len(slots)
        bigger = np.zeros((capacity, 4), dtype=np.uint64)
        mask = np.uint64(capacity - 1)
        for r in range(len(slots)):
            if slots[r, _ENTRY] != 0:
                i = slots[r, _HASH] & mask
                while bigger[i, _ENTRY] != 0:
                    i = (i + np.uint64(1)) & mask
                bigger[i] = slots[r]
        slots = bigger
        more_starts = np.empty(capacity // 2 + 1, dtype=np.int64)
        more_starts[:entries] = starts[:entries]
        starts = more_starts
    used = meta[_BYTES_USED]
    if used + length > len(store):
        more_store = np.empty(max(2 * len(store), used + length), dtype=np.uint8)
        more_store[:used] = store[:used]
        store = more_store
    return CountTable(slots, starts, store, meta)


@njit(cache=True)
def _table_add_words(table, data, offsets, weights):
    i = 0
    while i < len(weights):
        i = _insert_until_full(table, data, offsets, weights, i)
        if i < len(weights):
            table = _table_make_room(table, offsets[i + 1] - offsets[i])
    return table


@njit(cache=True)
def _insert_until_full(table, data, offsets, weights, first):
    """Add words `first`, `first` + 1, ...; returns where it stopped (all done, or the table is full).
    The arrays stay fixed inside the loop, which keeps it fast."""
    table, data, offsets, weights = _borrowed_table(table), borrowed(data), borrowed(offsets), borrowed(weights)
    for i in range(first, len(weights)):
        if not _table_insert(table, data, offsets[i], offsets[i + 1], weights[i]):
            return i
    return len(weights)


def _count_pieces(data, doc_offsets, scanner_id, classes, folds, table):
    """Scan every document with the named pattern's scanner and count its pieces, growing the
    table whenever it fills. Returns (table, pieces counted)."""
    longest = int(np.diff(doc_offsets).max()) if len(doc_offsets) > 1 else 0
    cps = np.empty(longest + 1, dtype=np.int32)
    byte_pos = np.empty(longest + 2, dtype=np.int64)
    count_until_full = PIECE_COUNTERS[scanner_id]
    doc, position, pieces = 0, 0, 0
    while True:
        doc, position, more = count_until_full(table, data, doc_offsets, doc, position, classes, folds, cps, byte_pos)
        pieces += more
        if doc == len(doc_offsets) - 1:
            return table, pieces
        table = _table_make_room(table, longest)


# One counting kernel per pattern, each with its scanner compiled into its loop (a call per piece
# through a switch over the patterns cost half the counting time), over borrowed views of its arrays
# (reference counts on every scanner call and table insert cost two thirds of the rest). Each counts
# pieces from code point `position` of document `doc` on, and stops where the table is full: it
# returns (doc, position, pieces counted), doc == number of documents when all are done.


@njit(nogil=True, cache=True)
def _count_gpt2(table, data, doc_offsets, doc, position, classes, folds, cps, byte_pos):
    table, data, doc_offsets = _borrowed_table(table), borrowed(data), borrowed(doc_offsets)
    classes, folds, cps, byte_pos = borrowed(classes), borrowed(folds), borrowed(cps), borrowed(byte_pos)
    pieces = 0
    for d in range(doc, len(doc_offsets) - 1):
        n = decode_utf8(data, doc_offsets[d], doc_offsets[d + 1], cps, byte_pos)
        p = position if d == doc else 0
        while p < n:
            e = next_gpt2(cps, n, p, classes)
            if not _table_insert(table, data, byte_pos[p], byte_pos[e], 1):
                return d, p, pieces
            pieces += 1
            p = e
    return len(doc_offsets) - 1, 0, pieces


@njit(nogil=True, cache=True)
def _count_cl100k(table, data, doc_offsets, doc, position, classes, folds, cps, byte_pos):
    table, data, doc_offsets = _borrowed_table(table), borrowed(data), borrowed(doc_offsets)
    classes, folds, cps, byte_pos = borrowed(classes), borrowed(folds), borrowed(cps), borrowed(byte_pos)
    pieces = 0
    for d in range(doc, len(doc_offsets) - 1):
        n = decode_utf8(data, doc_offsets[d], doc_offsets[d + 1], cps, byte_pos)
        p = position if d == doc else 0
        while p < n:
            e = next_cl100k(cps, n, p, classes, folds)
            if not _table_insert(table, data, byte_pos[p], byte_pos[e], 1):
                return d, p, pieces
            pieces += 1
            p = e
    return len(doc_offsets) - 1, 0, pieces


@njit(nogil=True, cache=True)
def _count_o200k(table, data, doc_offsets, doc, position, classes, folds, cps, byte_pos):
    table, data, doc_offsets = _borrowed_table(table), borrowed(data), borrowed(doc_offsets)
    classes, folds, cps, byte_pos = borrowed(classes), borrowed(folds), borrowed(cps), borrowed(byte_pos)
    pieces = 0
    for d in range(doc, len(doc_offsets) - 1):
        n = decode_utf8(data, doc_offsets[d], doc_offsets[d + 1], cps, byte_pos)
        p = position if d == doc else 0
        while p < n:
            e = next_o200k(cps, n, p, classes, folds)
            if not _table_insert(table, data, byte_pos[p], byte_pos[e], 1):
                return d, p, pieces
            pieces += 1
            p = e
    return len(doc_offsets) - 1, 0, pieces


@njit(nogil=True, cache=True)
def _count_whitespace(table, data, doc_offsets, doc, position, classes, folds, cps, byte_pos):
    table, data, doc_offsets = _borrowed_table(table), borrowed(data), borrowed(doc_offsets)
    classes, folds, cps, byte_pos = borrowed(classes), borrowed(folds), borrowed(cps), borrowed(byte_pos)
    pieces = 0
    for d in range(doc, len(doc_offsets) - 1):
        n = decode_utf8(data, doc_offsets[d], doc_offsets[d + 1], cps, byte_pos)
        p = position if d == doc else 0
        while p < n:
            e = next_whitespace(cps, n, p, classes)
            if is_split_space(cps, p, classes):  # a gap: str.split() drops it
                p = e
                continue
            if not _table_insert(table, data, byte_pos[p], byte_pos[e], 1):
                return d, p, pieces
            pieces += 1
            p = e
    return len(doc_offsets) - 1, 0, pieces


PIECE_COUNTERS = {GPT2: _count_gpt2, CL100K: _count_cl100k, O200K: _count_o200k, WHITESPACE: _count_whitespace}


@njit(cache=True)
def _table_counts(slots, entries):
    counts = np.zeros(entries, dtype=np.int64)
    for r in range(len(slots)):
        m = slots[r, _ENTRY]
        if m != 0:
            counts[np.int64(m & _ENTRY_MASK) - 1] = np.int64(slots[r, _COUNT])
    return counts


def _table_result(table: CountTable) -> WordCounts:
    n, used = int(table.meta[_ENTRIES]), int(table.meta[_BYTES_USED])
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[:n] = table.starts[:n]
    offsets[n] = used
    return WordCounts(table.store[:used].copy(), offsets, _table_counts(table.slots, n))

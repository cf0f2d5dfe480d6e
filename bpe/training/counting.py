"""Counting pre-tokens: the unique words of a corpus with their frequencies.

Memory grows with the number of unique words, not with the corpus: documents stream through a
`WordCounter` batch by batch. For the named patterns the counter scans UTF-8 bytes with the
compiled scanners and counts in the compiled `bpe.engine.count.Tally`; other patterns use the
`regex` module. Both give the counts of running the pattern over every document. `count_shards`
runs a reader thread (`ShardReader`) and counter threads over input files; `holdout_mask` picks
the rows kept apart for evaluation.

>>> counter = WordCounter(Pretokenizer("gpt2"))
>>> counter.add_texts(["the cat", "the hat"])
>>> sorted(counter.result().to_dict().items())
[(b' cat', 1), (b' hat', 1), (b'the', 2)]
"""

from __future__ import annotations

import queue
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from bpe.engine.cores import BusyCores, available_cores
from bpe.engine.errors import InputError, NotUtf8Error
from bpe.engine.interrupts import holds_interrupts
from bpe.engine.resident import release_compiler
from bpe.inputs.shard import Shard
from bpe.pretokenize import PATTERNS, Pretokenizer, scanner_tables
from bpe.progress import estimate_text_bytes
from bpe.schema import check

if TYPE_CHECKING:  # pyarrow and the engine load where they are used: a small run needs neither
    import pyarrow as pa

    from bpe.engine.count import WordCounts


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

    @classmethod
    def summed(cls, parts: Iterable[CountStats]) -> CountStats:
        """What `parts` (shards, languages) saw together."""
        total = cls()
        for part in parts:
            total.add(part)
        return total


class WordCounter:
    """Accumulates word counts over batches of documents (lists of str or Arrow string arrays).

    With `holdout` > 0, that fraction of rows (chosen by a hash of each row's text, so the same
    row is always on the same side) is not counted; up to `sample_bytes` of them are kept in
    `held_out` for evaluation. `compiled=False` counts with the `regex` module only and never
    imports numba (`bpe.training.small_corpus`); its words are `word_counts()`.
    """

    @holds_interrupts
    def __init__(
        self, pretokenizer: Pretokenizer, holdout: float = 0.0, sample_bytes: int = 1 << 20, compiled: bool = True
    ) -> None:
        self.pretokenizer = pretokenizer
        self.stats = CountStats()
        self.holdout = holdout
        self.sample_bytes = sample_bytes
        self.held_out: list[str] = []
        self._held_out_bytes = 0
        self._scanner = None
        self._tally = None
        if compiled:
            from bpe.engine.count import Tally
            from bpe.engine.scanner import SCANNER_IDS

            self._scanner = SCANNER_IDS.get(pretokenizer.name)
            self._tally = Tally()
        self._python_counts: Counter[str] = Counter()

    def add_texts(self, texts: Iterable[str | None], first_row: int = 0) -> None:
        """Count a batch of documents; a lone surrogate raises InvalidTextError naming its row
        (`first_row` is the row of the first document)."""
        from bpe.inputs.documents import text_array

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

    def add_strings(self, texts: Sequence[str]) -> None:
        """Count documents (no nulls) as `add_arrow` counts them, without Arrow: for a counter
        with `compiled=False` and no holdout (the path for small corpora, which loads no pyarrow)."""
        if self._tally is not None or self.holdout > 0:
            raise ValueError("add_strings counts with the regex module only, and holds nothing out")
        self.stats.documents += len(texts)
        self.stats.bytes += sum(len(text.encode("utf-8")) for text in texts)
        special, split = self.pretokenizer.special_tokens, self.pretokenizer.split_ordinary
        before = self._python_counts.total()
        for text in texts:
            holds_special = special and any(token in text for token in special)
            for segment in self._ordinary(text) if holds_special else (text,):
                self._python_counts.update(split(segment))
        self.stats.pretokens += self._python_counts.total() - before

    @holds_interrupts
    def add_arrow(self, array: pa.Array | pa.ChunkedArray) -> None:
        """Count a batch of documents: strings of any Arrow layout, dictionary-encoded ones too (see
        `is_text_type`); nulls are skipped (and counted in `stats.null_rows`). Strings whose bytes
        are not UTF-8 (Arrow does not check what it is handed) raise NotUtf8Error naming the
        first one's row in `array`; the documents counted before it stay counted."""
        import pyarrow as pa

        from bpe.inputs.readers import is_text_type
        from bpe.inputs.strings import first_not_utf8

        if isinstance(array, pa.ChunkedArray):
            for chunk in array.chunks:
                self.add_arrow(chunk)
            return
        if not pa.types.is_large_string(array.type):
            if not is_text_type(array.type):  # a cast would turn numbers into text
                raise TypeError(f"expected an Arrow array of strings, got {array.type}")
            array = array.cast(pa.large_string())  # first: a dictionary's nulls may sit in its values
        try:
            self._add_strings(array)
        except (NotUtf8Error, UnicodeDecodeError):  # from the scanner, or from Arrow making str
            row = first_not_utf8(array)
            if row is None:
                raise
            raise NotUtf8Error(row, "a batch of documents") from None

    def _add_strings(self, array: pa.LargeStringArray) -> None:
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
        # Read-only whatever holds the text (Arrow's buffers of a file's batch are writable, of
        # Python strings read-only): the counting kernels then have one compiled variant per
        # pattern, the one `bpe warm` and the install compile, not a second on a machine's first run.
        data.flags.writeable = offsets.flags.writeable = False
        self.stats.pretokens += self._tally.count_pieces(data, offsets, self._scanner, scanner_tables())

    def _set_aside(self, array: pa.LargeStringArray) -> pa.LargeStringArray:
        import pyarrow.compute as pc

        from bpe.inputs.strings import booleans

        mask = booleans(holdout_mask(array, self.holdout))
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
        import pyarrow as pa
        import pyarrow.compute as pc

        from bpe.inputs.strings import large_strings

        self.stats.bytes += int(pc.sum(pc.binary_length(array)).as_py() or 0)
        if not self.pretokenizer.special_tokens:
            return array
        has_special = pc.match_substring(array, self.pretokenizer.special_tokens[0])
        for token in self.pretokenizer.special_tokens[1:]:
            has_special = pc.or_(has_special, pc.match_substring(array, token))
        if not pc.any(has_special).as_py():
            return array
        plain = array.filter(pc.invert(has_special))
        segments = [segment for text in array.filter(has_special).to_pylist() for segment in self._ordinary(text)]
        return pa.concat_arrays([plain, large_strings(segments)])

    def _ordinary(self, text: str) -> list[str]:
        """The segments of `text` between its special tokens, which are counted in `stats`."""
        ordinary = []
        for segment, is_special in self.pretokenizer.segments(text):
            if is_special:
                self.stats.special_tokens[segment] = self.stats.special_tokens.get(segment, 0) + 1
            else:
                ordinary.append(segment)
        return ordinary

    @staticmethod
    def summed(counters: Sequence[WordCounter]) -> WordCounts:
        """The words several compiled counters counted, summed in a hash part per counter, each
        part on its own thread (`WordCounts.sum_by_hash`): the merge loop's slices as they stand.
        The counters are emptied."""
        from bpe.engine.count import WordCounts

        if len(counters) == 1:
            return counters[0].result()
        sources = []
        for counter in counters:
            sources.append(counter.result())
            counter._tally.clear()  # its slots: the words are in `sources`
        sources.sort(key=lambda source: len(source.data), reverse=True)  # the others wait whole while one is read
        return WordCounts.sum_by_hash(sources, len(counters), release=True)

    def word_counts(self) -> dict[bytes, int]:
        """The words counted without the compiled tally (`compiled=False`), as UTF-8 bytes."""
        return {word.encode(): n for word, n in self._python_counts.items()}

    @holds_interrupts
    def result(self) -> WordCounts:
        from bpe.engine.count import Tally, WordCounts

        counts = (self._tally or Tally()).result()
        if self._python_counts:
            counts = WordCounts.combine([counts, WordCounts.from_dict(self.word_counts())])
        return counts


def checks_utf8(pretokenizer: Pretokenizer, compiled: bool = True) -> bool:
    """Whether a `WordCounter` counts with a compiled scanner, whose decoder refuses bytes that are
    not UTF-8 (`NotUtf8Error`): its readers may then leave Parquet's strings unchecked
    (`read_batches(check_utf8=False)`), a pass over the text saved."""
    return compiled and pretokenizer.name in PATTERNS


HOLDOUT_BUCKETS = 1_000_000


def shard_holdout(shard: Shard, fraction: float) -> float:
    """The fraction of `shard`'s rows held out: `fraction`, but none of a text file read as one
    document. Such a file is a single row (or pieces of one, for a large file), so holding it out
    would take a whole file from training, and a language given as one file would have nothing
    left. Decided by the shard's format, the same in every process."""
    return 0.0 if shard.kind == "txt" and shard.text_format == "doc" else fraction


def holdout_mask(array: pa.LargeStringArray, fraction: float) -> np.ndarray:
    """Which rows are held out: FNV-1a of the row's UTF-8 bytes, modulo a million, below
    fraction x a million. Deterministic, and independent of where the row sits."""
    _, offsets_buf, data_buf = array.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)[array.offset : array.offset + len(array) + 1]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(1, np.uint8)
    from bpe.engine.hashing import hash_buckets

    return hash_buckets(data, offsets, HOLDOUT_BUCKETS) < int(round(fraction * HOLDOUT_BUCKETS))


# The modules whose code decides counts, relative to the `bpe` package folder: of bpe/inputs/, those
# that decide which text of a shard is counted (finding the shards and in-memory documents do not:
# cached counts are a shard's, keyed by its content).
COUNTING_MODULES = (
    "training/counting.py",
    "engine/count.py",
    "engine/hashing.py",
    "engine/scanner.py",
    "pretokenize.py",
    "inputs/shard.py",
    "inputs/readers.py",
    "inputs/selection.py",
    "inputs/read.py",
    "inputs/strings.py",
    "inputs/plain_text.py",
    "distributed/count_tasks.py",
)


def counting_code_version() -> str:
    """A hash of the code that decides counts: cached counts are reused only while it is unchanged."""
    import hashlib
    from pathlib import Path

    package = Path(__file__).parent.parent
    digest = hashlib.sha256()
    for name in COUNTING_MODULES:
        digest.update(name.encode() + (package / name).read_bytes())
    return digest.hexdigest()[:16]


def counts_to_arrow(counts: WordCounts) -> pa.Table:
    """A two-column table (`word` binary, `count` int64), for Parquet and for moving between workers."""
    import pyarrow as pa

    from bpe.inputs.strings import int64s

    words = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), len(counts), [None, pa.py_buffer(counts.offsets), pa.py_buffer(counts.data)]
    )
    return pa.table({"word": words, "count": int64s(counts.counts)})


def write_counts_parquet(counts: WordCounts, path) -> None:
    """Write counts as Parquet (`counts_to_arrow`'s columns). The words are unique, so they get no
    dictionary: building one costs a hash table of every word (12 MB more for 550,000 words) to
    find that none repeats."""
    import pyarrow.parquet as pq

    pq.write_table(counts_to_arrow(counts), path, use_dictionary=["count"])


def counts_from_arrow(table: pa.Table) -> WordCounts:
    """The counts `counts_to_arrow` wrote."""
    import pyarrow as pa

    from bpe.engine.count import WordCounts

    words = table.column("word").combine_chunks().cast(pa.large_binary())
    _, offsets_buf, data_buf = words.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)[words.offset : words.offset + len(words) + 1]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    data = data[offsets[0] : offsets[-1]].copy()
    offsets = offsets - offsets[0]
    counts = table.column("count").to_numpy().astype(np.int64, copy=True)
    return WordCounts(data, offsets.copy(), counts)


def use_system_allocator() -> None:
    """Arrow's default pool (jemalloc) keeps freed batches around; the system pool returns them.
    Set before pyarrow loads (Arrow reads ARROW_DEFAULT_MEMORY_POOL then), so that a run that never
    reads Arrow data does not load it for this."""
    import os
    import sys

    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    if "pyarrow" in sys.modules:
        import pyarrow as pa

        pa.set_memory_pool(pa.system_memory_pool())


def count_words(texts: Iterable[str], pattern: str = "gpt2", special_tokens: Sequence[str] = ()) -> WordCounts:
    """Word counts of an iterable of documents (convenience for small inputs)."""
    counter = WordCounter(Pretokenizer(pattern, special_tokens))
    counter.add_stream(texts)
    return counter.result()


READ_AHEAD_BYTES = 64 << 20


class ReadAhead:
    """How far a `ShardReader` may run ahead of its counters: `READ_AHEAD_BYTES` of text
    while the counters load the compiled engine (a third of a second, a core otherwise idle), then
    a few batches (`counting`). A batch always fits when nothing is waiting."""

    def __init__(self) -> None:
        self._room = threading.Condition()
        self._waiting_bytes = 0
        self._waiting_batches = 0
        self._most_batches: int | None = None  # None: limited by bytes, until counting starts
        self._released = False

    def wait_for_room(self, nbytes: int, stop: threading.Event) -> None:
        with self._room:
            while not (self._released or stop.is_set() or self._has_room(nbytes)):
                self._room.wait(0.1)
            self._waiting_bytes += nbytes
            self._waiting_batches += 1

    def _has_room(self, nbytes: int) -> bool:
        if self._waiting_batches == 0:
            return True
        if self._most_batches is None:
            return self._waiting_bytes + nbytes <= READ_AHEAD_BYTES
        return self._waiting_batches < self._most_batches

    def taken(self, nbytes: int) -> None:
        with self._room:
            self._waiting_bytes -= nbytes
            self._waiting_batches -= 1
            self._room.notify_all()

    def counting(self, batches: int) -> None:
        with self._room:
            self._most_batches = batches
            self._room.notify_all()

    def release(self) -> None:
        """Never block again (the counters failed to start)."""
        with self._room:
            self._released = True
            self._room.notify_all()


def counting_threads(busy: BusyCores | None = None) -> int:
    """Counting threads when the caller did not choose: the cores free of other work (measured over
    50 ms, or over the window `busy` opened), at most 8; counting threads on a busy core only slow
    it down. A run that counts several times (a language at a time) asks once."""
    return max(1, min(available_cores() - round((busy or BusyCores()).measured()), 8))


class ShardReader:
    """The shards' documents, read in batches on a thread of its own, `READ_AHEAD_BYTES` ahead of
    the counters until they start (`ReadAhead`). A run starts it before it loads the compiled
    engine, which takes one core for a third of a second while the other would idle. With `busy`,
    the reader starts once that window is read (50 ms from its opening): the window must see this
    process on one thread. Each shard's fingerprint is taken as it is read; a failure is kept in
    `failures` for the counters' caller."""

    finished = object()  # the end of the batches, put back by each counter that takes it

    def __init__(
        self,
        shards: Sequence[Shard],
        text_column: str,
        pretokenizer: Pretokenizer,
        busy: BusyCores | None = None,
        compiled: bool = True,
    ) -> None:
        self.shards = list(shards)
        self.text_column = text_column
        self.pretokenizer = pretokenizer
        # Counted by a compiled scanner, Parquet's strings are not checked on the way: a counter
        # that finds some that are not UTF-8 has them found again, with their file and rows, by
        # `not_utf8_error`.
        self.check_utf8 = not checks_utf8(pretokenizer, compiled)
        self.batches: queue.Queue = queue.Queue()
        self.unread = ReadAhead()
        self.fingerprints: list[dict] = []
        self.failures: list[BaseException] = []
        self.stop = threading.Event()
        self._busy = busy
        self._thread = threading.Thread(target=self._read, daemon=True, name="bpe-reader")
        self._thread.start()

    def _read(self) -> None:
        from bpe.inputs.read import read_batches

        try:
            if self._busy is not None:
                self._busy.measured()
            for shard in self.shards:
                self.fingerprints.append(shard.fingerprint())
                for batch in read_batches(shard, self.text_column, self.pretokenizer, check_utf8=self.check_utf8):
                    if self.stop.is_set():
                        return
                    self.unread.wait_for_room(batch[0].nbytes, self.stop)
                    self.batches.put(batch)
        except BaseException as exc:  # handed to the caller of the counters
            self.failures.append(exc)
            self.stop.set()
        finally:
            self.batches.put(self.finished)

    def next_batch(self) -> tuple | None:
        """The next batch (documents, share of the file's size) for a counter; None at the end."""
        item = self.batches.get()
        if item is self.finished:
            self.batches.put(item)  # for the other counters
            return None
        self.unread.taken(item[0].nbytes)
        return item

    def close(self) -> None:
        """Stop reading (the counters failed, or never started) and wait for the thread."""
        self.stop.set()
        self.unread.release()
        self._thread.join()

    def join(self) -> None:
        self._thread.join()


def count_shards(
    shards: Sequence[Shard],
    pretokenizer: Pretokenizer,
    text_column: str = "text",
    threads: int | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    compiled: bool = True,
    busy: BusyCores | None = None,
    reader: ShardReader | None = None,
) -> tuple[WordCounts | dict[bytes, int], CountStats, list[dict]]:
    """Count every shard: one thread reads batches (`reader`, if the caller started it ahead),
    `threads` threads count them (the compiled scanner releases the GIL; None:
    `counting_threads(busy)`). Returns the counts, what was seen, and each shard's fingerprint.
    `compiled=False`: one thread counts with the `regex` module, and the counts are a dict."""
    if not compiled:
        threads = 1
    try:
        if threads is None:
            threads = counting_threads(busy)
        check("threads", threads)  # 0 or -5 would count nothing, or all on one thread unasked
        if reader is None:  # it reads ahead while the counters load the engine
            reader = ShardReader(shards, text_column, pretokenizer, compiled=compiled)
        counters = [WordCounter(pretokenizer, compiled=compiled) for _ in range(threads)]
    except BaseException:
        if reader is not None:
            reader.close()
        raise
    failures = reader.failures
    done_bytes = [0, 0]  # progress: file bytes read, text bytes counted (the summary's bytes)
    total_bytes = sum(s.size for s in shards)
    lock = threading.Lock()

    def count(counter: WordCounter) -> None:
        while (item := reader.next_batch()) is not None:  # drains after a failure: the reader never blocks
            if reader.stop.is_set():
                continue
            try:
                array, share = item
                before = counter.stats.bytes
                counter.add_arrow(array)
                release_compiler()  # what loading its kernels (a table's first growth too) mapped of LLVM
                with lock:
                    done_bytes[0] += share
                    done_bytes[1] += counter.stats.bytes - before
                    if progress is not None:
                        progress("count", done_bytes[1], estimate_text_bytes(done_bytes[1], done_bytes[0], total_bytes))
            except BaseException as exc:
                failures.append(exc)
                reader.stop.set()

    if progress is not None:
        progress("count", 0, total_bytes)
    reader.unread.counting(2 * threads)
    workers = [threading.Thread(target=count, args=(c,), daemon=True) for c in counters]
    for w in workers:
        w.start()
    reader.join()
    for w in workers:
        w.join()
    if failures:
        raise not_utf8_error(reader, failures[0]) if isinstance(failures[0], NotUtf8Error) else failures[0]
    stats = CountStats.summed(counter.stats for counter in counters)
    if progress is not None:
        progress("count", stats.bytes, stats.bytes)
    if not compiled:
        return counters[0].word_counts(), stats, reader.fingerprints
    return WordCounter.summed(counters), stats, reader.fingerprints


def not_utf8_error(reader: ShardReader, found: NotUtf8Error) -> BaseException:
    """The error for text a counter found not to be UTF-8, naming its file and rows: the shards
    read again, checked as `read_batches` checks them, up to the first batch that fails (the
    file and rows the reader would have named, had it checked them); `found` if none does."""
    from bpe.inputs.read import read_batches

    if not reader.check_utf8:
        for shard in reader.shards:
            try:
                for _ in read_batches(shard, reader.text_column, reader.pretokenizer):
                    pass
            except InputError as exc:
                return exc
    return found

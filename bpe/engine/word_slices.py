"""Words of one process split into slices, each on its own thread: `WordTable`'s interface over
several word tables, so that one process applies each round's merges on all its cores.

Each round every slice applies the merges at once (the kernels release the GIL) and takes its
pair-count deltas; the deltas of all slices, summed, are exactly one table's. The local engine's
merge loop and a Dask bucket holder on a worker with several threads both use it.

>>> from bpe.engine.count import WordCounts
>>> with ThreadedWordTable(WordCounts.from_dict({b"aaab": 1, b"aab": 1, b"ab": 1}), threads=2) as table:
...     keys, deltas = table.take_deltas()
...     int(deltas.sum())   # pairs: aa aa ab, aa ab, ab
6
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from bpe.engine.count import WordCounts
from bpe.engine.pair_queue import PairQueue, queue_add_deltas, queue_next_round
from bpe.engine.replay import BaseMerges
from bpe.engine.word_table import WordTable

Deltas = tuple[np.ndarray, np.ndarray]


class ThreadedWordTable:
    """`threads` word tables, words split by their stable hash; `apply` runs on all at once."""

    def __init__(
        self,
        counts: WordCounts | None,
        threads: int,
        tables: list[WordTable] | None = None,
        base: BaseMerges | None = None,
    ) -> None:
        self.tables = split_tables(counts, threads, base) if tables is None else tables
        self._pending: list[Deltas] = [table.take_deltas() for table in self.tables]
        self._threads = SliceThreads(self.tables[1:])

    @classmethod
    def from_words(cls, tokens: np.ndarray, lengths: np.ndarray, freqs: np.ndarray, threads: int) -> ThreadedWordTable:
        """Tables over words given as token ids (a checkpoint), dealt round-robin: any split gives
        the same summed deltas."""
        starts = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=starts[1:])
        tables = []
        for k in range(threads):
            mine = np.arange(k, len(lengths), threads)
            index = np.concatenate([np.arange(starts[w], starts[w + 1]) for w in mine]) if len(mine) else mine
            tables.append(WordTable.from_words(tokens[index], lengths[mine], freqs[mine]))
        return cls(None, threads, tables)

    def apply_and_take(self, merges: np.ndarray) -> list[Deltas]:
        """Apply merges ((n, 3) int64: a, b, new id) on every slice at once; each slice's deltas."""
        merges = np.ascontiguousarray(merges, dtype=np.int64)
        self._threads.start(merges)
        first = self.tables[0].apply_and_take(merges)
        return [first, *self._threads.wait()]

    def apply(self, merges: np.ndarray) -> None:
        self._pending += self.apply_and_take(merges)

    def run_rounds(
        self, queue: PairQueue, budget: int, min_frequency: int, one_per_round: bool
    ) -> tuple[np.ndarray, int]:
        """Rounds chosen by `queue` until `budget` merges are made or none is left, each applied on
        every slice at once, the threads sleeping between rounds (`SpinningSlices.run_rounds` with
        threads that spin): (merges made as (a, b, new id, count) rows, rounds)."""

        def on_queue(state, budget: int) -> tuple:
            made: list[np.ndarray] = []
            n = 0
            while n < budget:
                state, batch = queue_next_round(state, 1 if one_per_round else budget - n, min_frequency)
                if not len(batch):
                    break
                for keys, deltas in self.apply_and_take(batch[:, :3]):
                    state = queue_add_deltas(state, keys, deltas)
                made.append(batch)
                n += len(batch)
            return state, (np.concatenate(made) if made else np.zeros((0, 4), np.int64)), len(made)

        return queue.lend(on_queue, budget)

    def take_deltas(self) -> Deltas:
        """(pair keys, count deltas) since the last call, of all slices (a key may come once per slice)."""
        keys = np.concatenate([k for k, _ in self._pending]) if self._pending else np.zeros(0, np.int64)
        deltas = np.concatenate([d for _, d in self._pending]) if self._pending else np.zeros(0, np.int64)
        self._pending = []
        return keys, deltas

    def to_words(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        parts = [table.to_words() for table in self.tables]
        return tuple(np.concatenate([p[i] for p in parts]) for i in range(3))

    @property
    def n_words(self) -> int:
        return sum(table.n_words for table in self.tables)

    def token_count(self) -> int:
        return sum(table.token_count() for table in self.tables)

    @property
    def nbytes(self) -> int:
        return sum(table.nbytes for table in self.tables)

    def close(self) -> None:
        """Stop the threads (the tables stay readable)."""
        self._threads.stop()

    def __enter__(self) -> ThreadedWordTable:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def split_tables(
    counts: WordCounts,
    threads: int,
    base: BaseMerges | None = None,
    progress: Callable[[int], None] | None = None,
    indexed: bool = True,
    release_counts: bool = False,
) -> list[WordTable]:
    """`threads` word tables over `counts` (after the `base` merges), words split by their stable
    hash, built on threads (each calling `progress` and taking `indexed` as `WordTable` does).
    `release_counts`: empty `counts` once split, each part's words freed once its table holds them
    (as they are replayed, with a base)."""
    parts = counts.split_by_hash(threads)
    if release_counts and threads > 1:
        counts.clear()

    def table(k: int) -> WordTable:
        built = WordTable(parts[k], base, progress, indexed, release_words=release_counts)
        parts[k] = None
        return built

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(table, range(threads)))


def word_table(counts: WordCounts, threads: int = 1, base: BaseMerges | None = None) -> WordTable | ThreadedWordTable:
    """One table, or slices on `threads` threads when there are words enough to split."""
    if threads > 1 and len(counts) >= threads:
        return ThreadedWordTable(counts, threads, base=base)
    return WordTable(counts, base)


class SliceThreads:
    """One long-lived thread per word table, woken once per round. Plain locks used as signals
    cost less than a thread pool's futures, which matters at thousands of rounds a second."""

    def __init__(self, tables: list[WordTable]) -> None:
        self.tables = tables
        self.merges: np.ndarray | None = None
        self.results: list = [None] * len(tables)
        self.go = [threading.Lock() for _ in tables]
        self.done = [threading.Lock() for _ in tables]
        for lock in self.go + self.done:
            lock.acquire()
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True, name=f"bpe-words-{i + 1}")
                        for i in range(len(tables))]  # fmt: skip
        for thread in self.threads:
            thread.start()

    def _run(self, i: int) -> None:
        while True:
            self.go[i].acquire()
            if self.merges is None:
                return
            try:
                self.results[i] = self.tables[i].apply_and_take(self.merges)
            except BaseException as exc:  # handed to `wait`, which raises it
                self.results[i] = exc
            self.done[i].release()

    def start(self, merges: np.ndarray) -> None:
        self.merges = merges
        for go in self.go:
            go.release()

    def wait(self) -> list[Deltas]:
        for done in self.done:
            done.acquire()
        for result in self.results:
            if isinstance(result, BaseException):
                raise result
        return list(self.results)

    def stop(self) -> None:
        if self.threads and any(t.is_alive() for t in self.threads):
            self.merges = None
            for go in self.go:
                go.release()
            for thread in self.threads:
                thread.join()
        self.threads = []

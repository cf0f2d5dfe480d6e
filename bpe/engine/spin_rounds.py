"""The threaded merge loop, with each round handed between threads through shared arrays.

Each worker thread makes one compiled call for the whole loop (`_serve`): it waits, spinning, for
the next round's merges, applies them to its word slice and hands back its pair-count deltas, in
chunks through a fixed buffer. The main thread's compiled call (`_run_rounds`) picks each round's
merges, applies them to its own slice, and adds every slice's deltas to the one pair queue. No
thread goes back to Python between rounds, so a round costs no lock, no GIL hand-over and no
sleeping thread's wake-up (about 50 µs each on a VM): what lets the loop gain from threads even
at ten thousand rounds a second, where a round's work is a hundred microseconds.

A spinning thread keeps its core busy while it waits, so this runs with no more threads than cores
(`merge.py` falls back to `SliceThreads`, which sleep, otherwise), and a wait that lasts yields
the core after a few spins (`backoff`), for when other processes want it too.

Message passing, per worker line of `control`: main writes the merges, then `store_release`s
ROUND; the worker, seeing it (`load_acquire`), applies them, writes a chunk of deltas, and
releases SENT = 2 * chunk number + (1 if it is the round's last chunk); main adds the chunk and,
unless it was the last, releases ACKED = chunk number so the worker may write the next one.
"""

from __future__ import annotations

import threading

import numpy as np
from numba import njit

from bpe.engine import kernel_cache  # noqa: F401  (sets where the kernels below are cached)
from bpe.engine.atomics import backoff, load_acquire, store_release
from bpe.engine.copying import copy_into, copy_rows_into
from bpe.engine.pair_queue import PairQueue, queue_add_deltas, queue_next_round
from bpe.engine.word_table import WordTable, words_apply_merges, words_take_deltas

# control: one line of 8 int64 (64 bytes, a cache line) for the main thread, then one per worker,
# so that no two threads write the same line.
_LINE = 8
_ROUND, _N_MERGES, _STOP = 0, 1, 2  # main's line
_SENT, _COUNT, _ACKED, _FAILED = 0, 1, 2, 3  # a worker's line, after main's

MAX_ROUND_MERGES = 4096  # a round takes at most this many merges (fewer is always exact)
CHUNK = 1 << 16  # deltas handed over at a time


class SpinningSlices:
    """Word tables on threads: `tables[0]` on the calling thread, each other on a worker thread
    that spins between rounds until `close`."""

    def __init__(self, tables: list[WordTable]) -> None:
        self.tables = tables
        workers = len(tables) - 1
        self.control = np.zeros(_LINE * (workers + 1), dtype=np.int64)
        self.merges = np.zeros((MAX_ROUND_MERGES, 4), dtype=np.int64)
        self.out_keys = np.zeros((max(workers, 1), CHUNK), dtype=np.int64)
        self.out_deltas = np.zeros((max(workers, 1), CHUNK), dtype=np.int64)
        self.sent_seen = np.zeros(max(workers, 1), dtype=np.int64)
        self.errors: list[BaseException | None] = [None] * workers
        self.threads = [threading.Thread(target=self._serve, args=(i,), daemon=True, name=f"bpe-words-{i + 1}")
                        for i in range(workers)]  # fmt: skip
        for thread in self.threads:
            thread.start()

    def _serve(self, worker: int) -> None:
        table = self.tables[worker + 1]
        try:
            table.lend(_serve, self.control, self.merges, self.out_keys, self.out_deltas, worker)
        except BaseException as exc:  # reported to the main thread, which raises it
            self.errors[worker] = exc
            self.control[_LINE * (worker + 1) + _FAILED] = 1

    def run_rounds(
        self, queue: PairQueue, budget: int, min_frequency: int, one_per_round: bool
    ) -> tuple[np.ndarray, int]:
        """Rounds chosen by `queue` until `budget` merges are made or none is left, in one compiled
        call given the queue's and the first table's states: (merges made as (a, b, new id, count)
        rows, rounds)."""
        made, rounds, failed = queue.lend(
            lambda queue_state: self.tables[0].lend(
                _run_rounds, queue_state, self.control, self.merges, self.out_keys, self.out_deltas, self.sent_seen,
                len(self.threads), budget, min_frequency, one_per_round,
            )
        )  # fmt: skip
        if failed >= 0:
            self.close()
            raise self.errors[failed] or RuntimeError(f"word slice {failed + 1} stopped")
        return made, rounds

    def close(self) -> None:
        """Stop the workers; their tables hold the words as merged."""
        self.control[_STOP] = 1
        for thread in self.threads:
            thread.join()
        self.threads = []

    def __enter__(self) -> SpinningSlices:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@njit(cache=True, nogil=True)
def _serve(words, control, merges, out_keys, out_deltas, me):
    """A worker's whole part of the loop: each round, apply the merges to its words and hand the
    deltas over; returns the words and the rounds it applied when main says stop."""
    line = _LINE * (me + 1)
    seen = 0
    chunks = 0
    spins = np.int64(0)
    while True:
        posted = load_acquire(control, _ROUND)
        if posted == seen:
            if load_acquire(control, _STOP) != 0:
                return words, seen
            spins = backoff(spins)
            continue
        seen = posted
        spins = np.int64(0)
        words = words_apply_merges(words, merges[: control[_N_MERGES]])
        keys, deltas = words_take_deltas(words)
        sent = 0
        while True:
            m = min(out_keys.shape[1], len(keys) - sent)
            copy_into(out_keys[me, :m], keys[sent : sent + m])
            copy_into(out_deltas[me, :m], deltas[sent : sent + m])
            control[line + _COUNT] = m
            sent += m
            chunks += 1
            last = sent == len(keys)
            store_release(control, line + _SENT, 2 * chunks + (1 if last else 0))
            if last:
                break
            spins = np.int64(0)
            while load_acquire(control, line + _ACKED) != chunks:
                if load_acquire(control, _STOP) != 0:
                    return words, seen
                spins = backoff(spins)


@njit(cache=True)
def _collect(queue, control, out_keys, out_deltas, sent_seen, worker):
    """Add worker `worker`'s deltas of this round to the queue; False if the worker failed."""
    line = _LINE * (worker + 1)
    spins = np.int64(0)
    while True:
        sent = load_acquire(control, line + _SENT)
        if sent == sent_seen[worker]:
            if load_acquire(control, line + _FAILED) != 0:
                return queue, False
            spins = backoff(spins)
            continue
        spins = np.int64(0)
        sent_seen[worker] = sent
        m = control[line + _COUNT]
        queue = queue_add_deltas(queue, out_keys[worker, :m], out_deltas[worker, :m])
        if sent & 1:
            return queue, True
        store_release(control, line + _ACKED, sent >> 1)


@njit(cache=True, nogil=True)
def _run_rounds(words, queue, control, merges, out_keys, out_deltas, sent_seen, workers, budget, min_frequency,
                one_per_round):  # fmt: skip
    """Select, hand out, apply and count rounds until `budget` merges are made or none is left.
    Returns the main slice's words, the queue, the merges, the rounds, and -1 or a failed worker."""
    made = np.empty((budget, 4), dtype=np.int64)
    n = 0
    rounds = 0
    failed = -1
    while n < budget and failed < 0:
        wanted = min(1 if one_per_round else budget - n, len(merges))
        queue, batch = queue_next_round(queue, wanted, min_frequency)
        k = len(batch)
        if k == 0:
            break
        copy_rows_into(merges[:k], batch)
        control[_N_MERGES] = k
        store_release(control, _ROUND, control[_ROUND] + 1)
        words = words_apply_merges(words, batch)
        keys, deltas = words_take_deltas(words)
        queue = queue_add_deltas(queue, keys, deltas)
        for worker in range(workers):
            queue, ok = _collect(queue, control, out_keys, out_deltas, sent_seen, worker)
            if not ok:
                failed = worker
                break
        copy_rows_into(made[n : n + k], batch)
        n += k
        rounds += 1
    return words, queue, made[:n].copy(), rounds, failed

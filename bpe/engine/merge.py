"""Learning merges from word counts: the local (in-process) engine.

`WordTable`s (the words) and one `PairQueue` (the counts) exchange pair-count deltas each round,
exactly as the Dask engine does across workers, so both engines share every kernel. On one thread
the whole loop is one compiled call; on several, the words are split by the Dask engine's stable
hash and each slice applies every round on its own thread (the kernels release the GIL): the Dask
engine's protocol without the sockets, so the merges are the same for any number of threads.

>>> from bpe.engine.count import WordCounts
>>> from bpe.engine.rules import MergeRules
>>> rules = MergeRules(tie_break="bytes", min_frequency=1, max_token_length=None, superwords=None)
>>> result = learn_merges(WordCounts.from_dict({b"aaab": 1, b"aab": 1}), 2, rules)
>>> result.merges.tolist()
[[97, 97], [256, 98]]
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np
from numba import njit

from bpe.engine import kernel_cache  # noqa: F401  (sets where the kernels below are cached)
from bpe.engine.copying import copy_rows_into
from bpe.engine.cores import available_cores
from bpe.engine.count import WordCounts
from bpe.engine.interrupts import interrupts_held
from bpe.engine.merge_result import MergeResult
from bpe.engine.pair_queue import PairQueue, queue_add_deltas, queue_next_round
from bpe.engine.replay import BaseMerges
from bpe.engine.rules import MergeRules
from bpe.engine.spin_rounds import SpinningSlices
from bpe.engine.tracked_pairs import TrackedPairs
from bpe.engine.word_slices import ThreadedWordTable, split_tables
from bpe.engine.word_table import WordTable, words_apply_merges, words_take_deltas

ProgressCallback = Callable[[int], None]
MERGES_PER_CALL = 1024  # merges between two reports of progress (and chances to take Ctrl-C)
# The first call makes this many merges, each next one twice as many up to MERGES_PER_CALL: the
# tables are looked at between calls (`TrackedPairs.due`), and the first merges of a superword stage
# add the most pairs. At 125 MB, a first call of 1,024 merges took that stage's loop to 715 MiB,
# above every other phase of the run; with this one it stays below them.
FIRST_CALL_MERGES = 64


def stop_reason(queue: PairQueue, done: int, wanted: int, min_frequency: int) -> str:
    if done >= wanted:
        return "vocab_size"
    if queue.best_count() > 0:
        return "min_frequency"
    if not queue.any_pair_left():
        return "no_pairs"
    return "superword_rules" if queue.superwords is not None else "max_token_length"  # only refused pairs are left


def learn_merges(
    counts: WordCounts,
    n_merges: int,
    rules: MergeRules,
    *,
    one_per_round: bool = False,
    progress: ProgressCallback | None = None,
    threads: int = 1,
    base: BaseMerges | None = None,
    release_counts: bool = False,
    on_index: Callable[[int, int], None] | None = None,
) -> MergeResult:
    """Up to `n_merges` merges of byte-level BPE over `counts` by `rules` (tie-break, minimum
    count, token length, superword rules), in one process, on `threads` threads (the same merges
    for any number). Counts past what int64 can count exactly raise InputError.
    `base`: a tokenizer's merges, replayed on the words first; the merges learnt then continue
    from them (ids from `base.first_new_id`), and the result holds only those. `release_counts`:
    empty `counts` (`WordCounts.clear`) once the word tables hold the words, for a caller that is
    done with them: their memory is not held through the loop. `on_index(done, words)`: the words
    put into the word tables so far (see `index_steps`), from 0 to all of them, before the loop."""
    counts.check_limit()
    steps = index_steps(on_index, len(counts), base)
    if threads > 1 and len(counts) >= threads:
        return _learn_on_threads(counts, n_merges, threads, rules, one_per_round, progress, base, release_counts, steps)
    start = time.perf_counter()
    table = WordTable(counts, base, steps, indexed=False, release_words=release_counts)
    if release_counts:
        counts.clear()
    tracked = TrackedPairs([table], rules, base, n_merges, steps)

    def run_rounds(budget: int) -> tuple[np.ndarray, int]:
        # One compiled call given both states: the queue's, then the table's (`lend`).
        while True:
            batch, n_rounds = tracked.queue.lend(
                lambda state: table.lend(_run_rounds, state, budget, tracked.floor, one_per_round)
            )
            step = tracked.due(batch)
            if step is not None:
                step()
            if len(batch) or step is None:
                return batch, n_rounds

    batches, done, rounds = drive(run_rounds, n_merges, progress)
    reason = stop_reason(tracked.queue, done, n_merges, rules.min_frequency)
    result = finish(batches, rounds, reason, start, first_id(base))
    result.tokens_after = table.token_count()
    return result


def index_steps(
    on_index: Callable[[int, int], None] | None, words: int, base: BaseMerges | None
) -> Callable[[int], None] | None:
    """The word tables' progress (`WordTable`: n more words replayed, n more gone through by each
    pass of the index; from any thread) as `on_index(words done, words)`: a word is done once
    replayed (with a base) and through both passes."""
    if on_index is None:
        return None
    per_word = 3 if base is not None else 2
    done = [0]
    lock = threading.Lock()
    on_index(0, words)

    def step(n: int) -> None:
        with lock:
            done[0] += n
            on_index(min(done[0] // per_word, words), words)

    return step


def drive(
    run_rounds: Callable[[int], tuple[np.ndarray, int]], n_merges: int, progress: ProgressCallback | None
) -> tuple[list[np.ndarray], int, int]:
    """Call `run_rounds(budget)` (rounds in a compiled call: the merges made, the rounds) until
    `n_merges` merges are made or none is left, coming back every `MERGES_PER_CALL` merges (fewer in
    the first calls, `FIRST_CALL_MERGES`) to report progress and take Ctrl-C. Returns the batches of
    merges, the merges made and the rounds."""
    batches: list[np.ndarray] = []
    done = rounds = 0
    if progress is not None:
        progress(0)  # the loop starts: its progress and its rate are timed from here
    while done < n_merges:
        budget = min(n_merges - done, MERGES_PER_CALL, FIRST_CALL_MERGES << min(len(batches), 16))
        with interrupts_held():
            batch, n_rounds = run_rounds(budget)
        if not len(batch):
            break
        batches.append(batch)
        done += len(batch)
        rounds += n_rounds
        if progress is not None:
            progress(len(batch))
    return batches, done, rounds


@njit(cache=True)
def _run_rounds(words, queue, budget, min_frequency, one_per_round):
    """Select, apply and count rounds until `budget` merges are made or none is left.
    `words` is a word table's state (a WordState), `queue` a pair queue's (a QueueState)."""
    made = np.empty((budget, 4), dtype=np.int64)
    n = 0
    rounds = 0
    while n < budget:
        queue, batch = queue_next_round(queue, 1 if one_per_round else budget - n, min_frequency)
        if len(batch) == 0:
            break
        words = words_apply_merges(words, batch)
        keys, deltas = words_take_deltas(words)
        queue = queue_add_deltas(queue, keys, deltas)
        copy_rows_into(made[n : n + len(batch)], batch)
        n += len(batch)
        rounds += 1
    return words, queue, made[:n].copy(), rounds


def _learn_on_threads(
    counts: WordCounts,
    n_merges: int,
    threads: int,
    rules: MergeRules,
    one_per_round: bool,
    progress: ProgressCallback | None,
    base: BaseMerges | None = None,
    release_counts: bool = False,
    steps: Callable[[int], None] | None = None,
) -> MergeResult:
    """The loop over `threads` word slices: each round the queue picks merges, every slice applies
    them at once and hands back its pair-count deltas, and all the deltas go into the one queue
    before the next round. With no more threads than cores the threads spin between rounds
    (`SpinningSlices`); otherwise they sleep (`ThreadedWordTable`)."""
    start = time.perf_counter()
    with interrupts_held():
        tables = split_tables(counts, threads, base, steps, indexed=False, release_counts=release_counts)
        tracked = TrackedPairs(tables, rules, base, n_merges, steps)

    def on_threads() -> SpinningSlices | ThreadedWordTable:
        return SpinningSlices(tables) if threads <= available_cores() else ThreadedWordTable(None, threads, tables)

    slices = [on_threads()]
    try:

        def run_rounds(budget: int) -> tuple[np.ndarray, int]:
            while True:
                batch, n_rounds = slices[0].run_rounds(tracked.queue, budget, tracked.floor, one_per_round)
                step = tracked.due(batch)
                if step is not None:
                    slices[0].close()  # the tables come back to this thread, then go out again
                    step()
                    slices[0] = on_threads()
                if len(batch) or step is None:
                    return batch, n_rounds

        batches, done, rounds = drive(run_rounds, n_merges, progress)
    finally:
        slices[0].close()
    reason = stop_reason(tracked.queue, done, n_merges, rules.min_frequency)
    result = finish(batches, rounds, reason, start, first_id(base))
    result.tokens_after = sum(table.token_count() for table in tables)
    return result


def first_id(base: BaseMerges | None) -> int:
    """The id of the first merge learnt: 256, or the one after a base tokenizer's merges."""
    return 256 if base is None else base.first_new_id


def finish(batches: list[np.ndarray], rounds: int, reason: str, start: float, first: int = 256) -> MergeResult:
    """Collect the rounds' (a, b, new id, count) rows into a MergeResult."""
    rows = np.concatenate(batches) if batches else np.zeros((0, 4), np.int64)
    assert (rows[:, 2] == first + np.arange(len(rows))).all(), "merge ids must be consecutive"
    return MergeResult(rows[:, :2].copy(), rows[:, 3].copy(), rounds, reason, time.perf_counter() - start)

"""Learning merges from word counts: the local (in-process) engine.

One `WordTable` (the words) and one `PairQueue` (the counts) exchange pair-count deltas each
round, exactly as the Dask engine does across workers, so both engines share every kernel.

>>> from bpe.engine.count import count_words
>>> result = learn_merges(count_words(["aaab aab"], "whitespace"), n_merges=2)
>>> result.merges.tolist()
[[97, 97], [256, 98]]
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numba import njit

from bpe.engine.count import WordCounts
from bpe.engine.interrupts import interrupts_held
from bpe.engine.pair_queue import PairQueue, _add, _next_round
from bpe.engine.word_table import WordTable, _apply_merges, _take_deltas

ProgressCallback = Callable[[int], None]


@dataclass
class MergeResult:
    """Merges in order as an (n, 2) array of token ids (merge i makes token 256 + i)."""

    merges: np.ndarray
    counts: np.ndarray  # how often each merged pair occurred when it was chosen
    rounds: int
    stop_reason: str  # "vocab_size", "min_frequency" or "no_pairs"
    seconds: float
    tokens_after: int = 0  # pre-token occurrences encode to this many tokens with all merges

    def __len__(self) -> int:
        return len(self.merges)


def stop_reason(queue: PairQueue, done: int, wanted: int, min_frequency: int) -> str:
    if done >= wanted:
        return "vocab_size"
    return "min_frequency" if queue.best_count() > 0 else "no_pairs"


def learn_merges(
    counts: WordCounts,
    n_merges: int,
    *,
    tie_break: str = "bytes",
    min_frequency: int = 1,
    one_per_round: bool = False,
    progress: ProgressCallback | None = None,
) -> MergeResult:
    """Up to `n_merges` merges of byte-level BPE over `counts`, in one process."""
    start = time.perf_counter()
    queue = PairQueue(tie_break)
    table = WordTable(counts)
    queue.add(*table.take_deltas())
    batches: list[np.ndarray] = []
    done = rounds = 0
    while done < n_merges:
        # Many rounds per compiled call; come back now and then to report progress.
        budget = min(n_merges - done, 1024)
        with interrupts_held():
            table._state, queue._state, batch, n_rounds = _run_rounds(
                table._state, queue._state, budget, min_frequency, one_per_round
            )
        if not len(batch):
            break
        batches.append(batch)
        done += len(batch)
        rounds += n_rounds
        if progress is not None:
            progress(len(batch))
    result = finish(batches, rounds, stop_reason(queue, done, n_merges, min_frequency), start)
    result.tokens_after = table.token_count()
    return result


@njit(cache=True)
def _run_rounds(words, queue, budget, min_frequency, one_per_round):
    """Select, apply and count rounds until `budget` merges are made or none is left.
    `words` is a word table's state (a WordState), `queue` a pair queue's (a QueueState)."""
    made = np.empty((budget, 4), dtype=np.int64)
    n = 0
    rounds = 0
    while n < budget:
        queue, batch = _next_round(queue, 1 if one_per_round else budget - n, min_frequency)
        if len(batch) == 0:
            break
        words = _apply_merges(words, batch)
        keys, deltas = _take_deltas(words)
        queue = _add(queue, keys, deltas)
        made[n : n + len(batch)] = batch
        n += len(batch)
        rounds += 1
    return words, queue, made[:n].copy(), rounds


def finish(batches: list[np.ndarray], rounds: int, reason: str, start: float) -> MergeResult:
    """Collect the rounds' (a, b, new id, count) rows into a MergeResult."""
    rows = np.concatenate(batches) if batches else np.zeros((0, 4), np.int64)
    assert (rows[:, 2] == 256 + np.arange(len(rows))).all(), "merge ids must be consecutive"
    return MergeResult(rows[:, :2].copy(), rows[:, 3].copy(), rounds, reason, time.perf_counter() - start)

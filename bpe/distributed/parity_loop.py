"""The Dask engine's parity-aware merge loop (Foroutan et al. 2025; see `bpe.engine.parity`).

Each language's words are in word buckets of their own on the workers. The driver holds one pair
queue per language (and a global one for the first `global_merges`), fed with each bucket's deltas
under its language, and the dev set, replayed after every merge (`ParityQueues`). A round is one
merge, since the choice of the next language depends on the lengths after this merge: the merge is
sent to every bucket of every language, and their deltas come back as in the plain loop. Without
a dev set, or with ratio targets, the languages are weighed by their training tokens, which need
no word from the workers: a word of n tokens holds n - 1 pairs, so a language's tokens are its
initial pair counts plus its word occurrences, and each merge's deltas, summed, are the tokens it
saved. Worker loss is recovered as in the plain loop (a rebuilt holder replays the merge log).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bpe.engine.count import WordCounts, check_pair_counts
from bpe.engine.merge import MergeResult, finish, first_id
from bpe.engine.parity import ParityQueues, ParityRule
from bpe.engine.rules import MergeRules
from bpe.progress import ProgressFn


@dataclass
class ParityBuckets:
    """A parity-aware run's word buckets as the driver sees them: each bucket's language index
    (languages in code order), the groups of buckets held together (a hash bucket of every
    language: one holder, one round trip per round, per group), each language's word occurrences
    (its counts summed, mixture multiplier included), the rule, and the dev set's words (one
    WordCounts per language, or None: ratio targets, or training lengths)."""

    rule: ParityRule
    languages: list[int]
    groups: list[list[int]]
    occurrences: list[int]
    dev: Sequence[WordCounts] | None = None

    @property
    def n_languages(self) -> int:
        return len(self.occurrences)


def merge_parity_on_dask(
    holders,
    initial: list[tuple[np.ndarray, np.ndarray]],
    parity: ParityBuckets,
    n_merges: int,
    rules: MergeRules,
    progress: ProgressFn | None,
    checkpoint_seconds: float,
) -> MergeResult:
    """The driver's parity loop over `holders` (a `driver.Holders` holding `parity`'s buckets, a
    group of them per holder): choose a merge and its language, send it, add each bucket's deltas
    to its language. The result's `languages` holds the language each merge served (-1 for a
    global merge)."""
    started = time.perf_counter()
    check_pair_counts([d for _, d in initial])
    queues = ParityQueues(parity.n_languages, parity.rule, rules, dev=parity.dev, base=holders.base)
    languages = range(parity.n_languages)
    by_language = [[b for b, i in enumerate(parity.languages) if i == language] for language in languages]

    def add(replies: list[tuple[np.ndarray, np.ndarray]]) -> None:
        for language, buckets in enumerate(by_language):
            keys = [replies[b][0] for b in buckets if len(replies[b][0])]
            if keys:
                queues.add(language, np.concatenate(keys), np.concatenate([replies[b][1] for b in buckets]))

    add(initial)
    for language, buckets in enumerate(by_language):  # tokens = pairs + word occurrences (see above)
        pairs = sum(int(initial[b][1].sum()) for b in buckets)
        queues.set_training_tokens(language, pairs + parity.occurrences[language])
    rows: list[np.ndarray] = []
    served: list[int] = []
    holders.merge_log = lambda: np.array(rows, np.int64).reshape(-1, 4)[:, :3]  # what a rebuilt holder replays
    holders.start_rounds(checkpoint_seconds)
    if progress is not None:
        progress("merge", 0, n_merges)  # the loop starts: its progress and its rate are timed from here
    while len(rows) < n_merges:
        chosen = queues.next_merge()
        if chosen is None:
            break
        row, language = chosen
        replies = holders.round(np.asarray(row, np.int64).reshape(1, -1))
        add(replies)
        rows.append(np.asarray(row, np.int64))
        served.append(language)
        if progress is not None:
            progress("merge", len(rows), n_merges)
        holders.after_round()
    holders.end_rounds()
    reason = queues.stop_reason(len(rows), n_merges)
    batches = [np.array(rows, np.int64).reshape(-1, 4)]
    result = finish(batches, len(rows), reason, started, first_id(holders.base))
    result.languages = np.array(served, np.int64)
    return result

"""A multilingual run's word buckets on the Dask workers, from each language's own buckets (counted
apart, `count_tasks.count_languages_on_dask`): what each language holds, its mixture multiplier
applied on the workers, and the buckets the merge loop is given.

- Plain BPE (with or without a mixture): bucket b is the sum over languages of each language's
  bucket b times its multiplier, exactly the local engine's weighted sum split by the same stable
  hash, so the plain merge loop runs unchanged on it.
- Parity-aware BPE: the languages' buckets stay apart (each multiplied by its multiplier), and the
  driver knows each bucket's language, to add its deltas to that language's pair counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bpe.engine.count import WordCounts
from bpe.languages.mixture import check_weighted_bytes, weighted, weighted_sum
from bpe.training.counting import CountStats
from bpe.training.plan import LanguagePlan

# ---------------------------------------------------------------------------------------------
# Tasks that run on workers.


def bucket_summary(counts: WordCounts) -> tuple[int, int, int]:
    """A bucket's unique words, its word occurrences (counts summed) and the bytes of all of them
    (count x length, summed; within int64: the bytes of the text that was counted)."""
    return len(counts), counts.total, int(counts.counts @ np.diff(counts.offsets))


def multiply_counts(counts: WordCounts, multiplier: int) -> WordCounts:
    """One language's bucket with its counts multiplied by the language's mixture multiplier."""
    return weighted([counts], [multiplier])[0]


def sum_languages(multipliers: Sequence[int], *parts: WordCounts) -> WordCounts:
    """One hash bucket of every language (in code order), each multiplied by its language's
    multiplier, summed into one (a word in several languages sums its weighted counts)."""
    return weighted_sum(parts, multipliers)


# ---------------------------------------------------------------------------------------------
# The client side.


@dataclass
class LanguageBuckets:
    """The word buckets the merge loop is given (futures of WordCounts), each language's word
    occurrences in them (its counts summed, times its multiplier) and, for a parity run, each
    bucket's language index and the groups of buckets a holder holds together, hash bucket b of
    every language (None: the languages are summed)."""

    buckets: list
    occurrences: list[int]
    languages: list[int] | None = None
    groups: list[list[int]] | None = None


def language_buckets(
    client,
    buckets: Sequence[Sequence],
    stats: Sequence[CountStats],
    plan: LanguagePlan,
    paths: Sequence[Sequence[str]] | None = None,
) -> LanguageBuckets:
    """From each language's buckets (`buckets[i][b]`, futures) and statistics, fill `plan.stats`
    (documents, bytes, words, unique words, multiplier), refuse a language without a word (naming
    its input `paths`, as the local engine does), check the mixture's weighted counts against what
    the merge loop counts exactly, and make the merge loop's buckets on the workers."""
    summaries = client.gather([[client.submit(bucket_summary, f) for f in language] for language in buckets])
    multipliers = plan.counted(stats, [sum(words for words, _, _ in summary) for summary in summaries], paths)
    if plan.mix is not None:
        # The local engine's check (`check_weighted_limit`), from each language's exact bytes of words.
        check_weighted_bytes([sum(n for _, _, n in summary) for summary in summaries], multipliers)
    occurrences = [m * sum(n for _, n, _ in summary) for m, summary in zip(multipliers, summaries, strict=True)]
    if plan.parity is not None:
        made, languages = [], []
        for i, (language, multiplier) in enumerate(zip(buckets, multipliers, strict=True)):
            made += language if multiplier == 1 else [client.submit(multiply_counts, f, multiplier) for f in language]
            languages += [i] * len(language)
        n_buckets = len(buckets[0])
        groups = [[i * n_buckets + b for i in range(len(buckets))] for b in range(n_buckets)]
        return LanguageBuckets(made, occurrences, languages, groups)
    n_buckets = len(buckets[0]) if buckets else 0
    summed = [
        client.submit(sum_languages, multipliers, *[language[b] for language in buckets], pure=False)
        for b in range(n_buckets)
    ]
    return LanguageBuckets(summed, occurrences)

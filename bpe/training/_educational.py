"""The textbook BPE training ladder: five plain trainers, each removing one bottleneck of the one before.

It sits beside the fast path as tiktoken's `_educational.py` does: to read and to test against;
nothing in production imports it.

Every rung learns the same merges from the same documents: pre-tokenize the documents into words,
take each word's UTF-8 bytes as token ids 0..255, then merge i makes token 256 + i from the most
frequent adjacent pair. Ties go to the largest pair of ids (a first, then b), the textbook rule
(`tie_break="ids"` in our engines). Only the cost of a round changes from rung to rung:

1. `train_naive`: recount every pair of every word occurrence, rewrite every occurrence;
2. `train_dedup`: deduplicate words into word -> count, so a repeated word is processed once;
3. `train_incremental`: keep the pair counts, patch them for the words that hold the merged pair;
4. `train_indexed`: an inverted index pair -> words, so finding those words scans nothing;
5. `train_heap`: a max-heap with lazy deletion, so finding the best pair scans nothing.

Read it top to bottom: the helpers every rung shares, then the rungs in order, then `TEXTBOOK`,
which lists them with the bottleneck each removes. Pure Python and the standard library only;
`bench/ladder.py` times the rungs against our engines and `tests/training/test_ladder.py` checks them
against the oracle in `tests/reference.py`.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

Pair = tuple[int, int]
Merges = list[Pair]
Trainer = Callable[[Sequence[str], int, str], Merges]
Index = defaultdict[Pair, set[int]]  # pair -> indices of the words that hold it

# ---------------------------------------------------------------------------------------------
# Shared by every rung: pre-tokenization, pair counting, the tie-break, merging in a word.


def pretokenize(texts: Iterable[str], pattern: str = "whitespace") -> list[bytes]:
    """Every word occurrence of every document as UTF-8 bytes: `text.split()` for "whitespace",
    otherwise the matches of the pattern (a name such as "gpt2" stands for its regex).

    >>> pretokenize(["aaab aab"]), pretokenize(["aaab aab"], "gpt2")
    ([b'aaab', b'aab'], [b'aaab', b' aab'])
    """
    if pattern == "whitespace":
        return [word.encode() for text in texts for word in text.split()]
    from bpe.pretokenize import Pretokenizer  # needs `regex`; the textbook path above needs nothing

    pretokenizer = Pretokenizer(pattern)
    return [word.encode() for text in texts for word in pretokenizer.split(text)]


def add_pairs(stats: dict[Pair, int], ids: list[int], weight: int = 1) -> None:
    """Add `weight` to the count of every adjacent pair in `ids`, overlapping ones included ("aaa"
    holds (a, a) twice). A count that reaches zero is deleted, so `stats` only holds live pairs.

    >>> stats = {}
    >>> add_pairs(stats, [97, 97, 97, 98], 5); stats
    {(97, 97): 10, (97, 98): 5}
    >>> add_pairs(stats, [97, 98], -5); stats
    {(97, 97): 10}
    """
    for pair in zip(ids, ids[1:]):
        count = stats.get(pair, 0) + weight
        if count:
            stats[pair] = count
        else:
            del stats[pair]


def best_pair(stats: dict[Pair, int]) -> Pair:
    """The most frequent pair; ties go to the largest pair of ids (a first, then b).

    >>> best_pair({(1, 2): 3, (2, 1): 3, (1, 9): 2})
    (2, 1)
    """
    return max(stats, key=lambda pair: (stats[pair], pair))


def merge(ids: list[int], pair: Pair, new_id: int) -> list[int]:
    """Replace every occurrence of `pair` by `new_id`, left to right and non-overlapping.

    >>> merge([1, 2, 3, 1, 2], (1, 2), 256), merge([97, 97, 97], (97, 97), 256)
    ([256, 3, 256], [256, 97])
    """
    out = []
    i = 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


# ---------------------------------------------------------------------------------------------
# The five rungs. Each returns the merges as a list of (a, b) token-id pairs; merge i made 256 + i.


def train_naive(texts: Sequence[str], n_merges: int, pattern: str = "whitespace") -> Merges:
    """Step 1, naive: every round recounts every pair of every word occurrence and rewrites every
    occurrence, so a word that occurs 1,000 times is processed 1,000 times per round.

    (a, a) occurs 3 times in "aaab aab"; then (256, 97), (97, 98) and (256, 98) tie at 1 and the
    largest wins; after 4 merges no pair is left:

    >>> train_naive(["aaab aab"], 10)
    [(97, 97), (256, 98), (256, 97), (258, 98)]
    """
    words = [list(word) for word in pretokenize(texts, pattern)]
    merges: Merges = []
    for new_id in range(256, 256 + n_merges):
        stats: dict[Pair, int] = {}
        for ids in words:
            add_pairs(stats, ids)
        if not stats:
            break
        pair = best_pair(stats)
        words = [merge(ids, pair, new_id) for ids in words]
        merges.append(pair)
    return merges


def train_dedup(texts: Sequence[str], n_merges: int, pattern: str = "whitespace") -> Merges:
    """Step 2 removes the repeated work on repeated words: words are deduplicated into word -> count,
    and each round recounts pairs over the unique words, weighted by their counts.

    >>> train_dedup(["aaab aab"], 10)
    [(97, 97), (256, 98), (256, 97), (258, 98)]
    """
    words = [(list(word), count) for word, count in Counter(pretokenize(texts, pattern)).items()]
    merges: Merges = []
    for new_id in range(256, 256 + n_merges):
        stats: dict[Pair, int] = {}
        for ids, count in words:
            add_pairs(stats, ids, count)
        if not stats:
            break
        pair = best_pair(stats)
        words = [(merge(ids, pair, new_id), count) for ids, count in words]
        merges.append(pair)
    return merges


def train_incremental(texts: Sequence[str], n_merges: int, pattern: str = "whitespace") -> Merges:
    """Step 3 removes the recount of every pair each round: pair counts are built once, then only a
    word holding the chosen pair has its pairs subtracted and re-added. Finding those words still
    scans every word.

    >>> train_incremental(["aaab aab"], 10)
    [(97, 97), (256, 98), (256, 97), (258, 98)]
    """
    counts = Counter(pretokenize(texts, pattern))
    words = [list(word) for word in counts]
    freqs = list(counts.values())
    stats: dict[Pair, int] = {}
    for ids, freq in zip(words, freqs):
        add_pairs(stats, ids, freq)
    merges: Merges = []
    for new_id in range(256, 256 + n_merges):
        if not stats:
            break
        pair = best_pair(stats)
        for i, ids in enumerate(words):  # the scan that step 4 removes
            if pair in zip(ids, ids[1:]):
                add_pairs(stats, ids, -freqs[i])
                words[i] = merge(ids, pair, new_id)
                add_pairs(stats, words[i], freqs[i])
        merges.append(pair)
    return merges


def indexed_words(texts: Sequence[str], pattern: str) -> tuple[list[list[int]], list[int], dict[Pair, int], Index]:
    """Unique words (as ids) with their frequencies, the pair counts, and the inverted index
    pair -> words: the state of steps 4 and 5."""
    counts = Counter(pretokenize(texts, pattern))
    words = [list(word) for word in counts]
    freqs = list(counts.values())
    stats: dict[Pair, int] = {}
    where: Index = defaultdict(set)
    for i, ids in enumerate(words):
        add_pairs(stats, ids, freqs[i])
        for pair in zip(ids, ids[1:]):
            where[pair].add(i)
    return words, freqs, stats, where


def update_word(
    words: list[list[int]], freqs: list[int], i: int, pair: Pair, new_id: int, stats: dict[Pair, int], where: Index
) -> None:
    """Merge `pair` in word i and patch the pair counts and the index (steps 4 and 5)."""
    old = words[i]
    new = words[i] = merge(old, pair, new_id)
    add_pairs(stats, old, -freqs[i])
    add_pairs(stats, new, freqs[i])
    for gone in set(zip(old, old[1:])) - set(zip(new, new[1:])):
        where[gone].discard(i)
    for kept_or_new in zip(new, new[1:]):
        where[kept_or_new].add(i)


def train_indexed(texts: Sequence[str], n_merges: int, pattern: str = "whitespace") -> Merges:
    """Step 4 removes the scan over all words: an inverted index pair -> indices of the words that
    hold it, so a round touches only the words that change.

    >>> train_indexed(["aaab aab"], 10)
    [(97, 97), (256, 98), (256, 97), (258, 98)]
    """
    words, freqs, stats, where = indexed_words(texts, pattern)
    merges: Merges = []
    for new_id in range(256, 256 + n_merges):
        if not stats:
            break
        pair = best_pair(stats)
        for i in list(where[pair]):
            update_word(words, freqs, i, pair, new_id, stats, where)
        del where[pair]  # empty now: the pair occurs nowhere any more
        merges.append(pair)
    return merges


def pop_best(heap: list[tuple[int, int, int]], stats: dict[Pair, int]) -> Pair | None:
    """Pop heap entries until one matches its pair's current count: that pair is the best (highest
    count, then largest ids, as `best_pair`). None when no pair is left.

    >>> pop_best([(-3, -1, -2), (-2, -2, -1)], {(1, 2): 1, (2, 1): 2})  # (1, 2)'s entry is stale
    (2, 1)
    """
    while heap:
        negative_count, negative_a, negative_b = heapq.heappop(heap)
        pair = (-negative_a, -negative_b)
        if stats.get(pair) == -negative_count:
            return pair
    return None


def train_heap(texts: Sequence[str], n_merges: int, pattern: str = "whitespace") -> Merges:
    """Step 5 removes the scan over all pairs to find the best one: a heap of (-count, -a, -b) pops
    it in O(log n). A changed count pushes a fresh entry instead of updating the old one in place;
    entries whose count no longer matches `stats` are stale and skipped when they surface (lazy
    deletion).

    >>> train_heap(["aaab aab"], 10)
    [(97, 97), (256, 98), (256, 97), (258, 98)]
    """
    words, freqs, stats, where = indexed_words(texts, pattern)
    heap = [(-count, -a, -b) for (a, b), count in stats.items()]
    heapq.heapify(heap)
    merges: Merges = []
    for new_id in range(256, 256 + n_merges):
        pair = pop_best(heap, stats)
        if pair is None:
            break
        changed: set[Pair] = set()
        for i in list(where[pair]):
            changed.update(zip(words[i], words[i][1:]))
            update_word(words, freqs, i, pair, new_id, stats, where)
            changed.update(zip(words[i], words[i][1:]))
        del where[pair]
        for a, b in changed:
            if (a, b) in stats:
                heapq.heappush(heap, (-stats[a, b], -a, -b))
        merges.append(pair)
    return merges


# ---------------------------------------------------------------------------------------------
# The ladder as data, for the benchmark's tables and the tests.


@dataclass(frozen=True)
class Rung:
    """One step of the ladder: what it does, which bottleneck it removes, and its trainer."""

    step: str
    technique: str
    removes: str
    trainer: Trainer | None  # None: a rung its harness times apart (the Dask engine in bench/ladder.py)


TEXTBOOK = [
    Rung("1", "naive: recount all pairs, rewrite every word occurrence", "(baseline)", train_naive),
    Rung("2", "deduplicated words with counts", "reprocessing each repeated word occurrence", train_dedup),
    Rung(
        "3",
        "incremental pair counts, patched for affected words",
        "recounting every pair every round",
        train_incremental,
    ),
    Rung("4", "inverted index pair -> words", "scanning every word to find the affected ones", train_indexed),
    Rung("5", "max-heap with lazy deletion", "scanning every pair to find the best one", train_heap),
]

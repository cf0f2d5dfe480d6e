"""Small corpora without compiled kernels: the local engine's path for inputs of up to about a MB.

Loading numba and the cached kernels costs about a second and 150 MB before a single word is
counted, far more than a small corpus needs. So, for a small input (`SMALL_CORPUS_BYTES`), the
local engine counts with the `regex` module (`WordCounter(compiled=False)`) and, unless its words
are long enough to make that slow (`SMALL_CORPUS_WORK`), learns the merges here, with the
textbook fast algorithm in pure Python: unique words with counts, pair counts patched for the
words that hold the merged pair (an index pair -> words), and a max-heap with lazy deletion. The
order is the compiled queue's (`bpe.engine.pair_queue`): highest count first, ties to the
greatest pair of token byte strings (first token, then second) or of ids; `max_token_length` and
`min_frequency` mean what they mean there. So the merges are the compiled engine's, checked by
`tests/training/test_small_corpus.py` against it and the reference trainer; only `rounds` differs (one
merge a round). The run never imports numba.

>>> from bpe.engine.rules import MergeRules
>>> rules = MergeRules(tie_break="bytes", min_frequency=1, max_token_length=None, superwords=None)
>>> learn_merges_small({b"aaab": 1, b"aab": 1}, 2, rules).merges.tolist()
[[97, 97], [256, 98]]
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from heapq import heapify, heappop, heappush

import numpy as np

from bpe.engine.merge_result import MergeResult
from bpe.engine.rules import MergeRules

# Inputs of up to this many bytes of text are counted with the `regex` module (about 7 MB/s), when
# the user leaves `threads` to the engine, does not start from a base tokenizer, and trains neither
# superwords nor by language. Parquet and compressed files count as four times their size.
SMALL_CORPUS_BYTES = 1 << 20
# Their merges are learnt here when the words' work (`merge_work`) is at most this: merging a pair
# rewrites every word that holds it, so long words cost about the square of their length. Measured
# on 2 cores: 1 MB of English (work 1.2 million) takes 0.7 s for 1,744 merges and 1.3 s until its
# pairs run out, less than loading the kernels and merging (1.2 s and 2.6 s); 110 KB of Chinese
# (work 4.3 million) would take 4.5 s here and 0.2 s compiled.
SMALL_CORPUS_WORK = 1_500_000


def merge_work(words: Mapping[bytes, int]) -> int:
    """What learning merges over `words` costs here, roughly: the sum of their lengths squared."""
    return sum(len(word) * len(word) for word in words)


Pair = tuple[int, int]


class _Descending:
    """A byte string that sorts before the strings it is greater than (the heap pops its least
    entry; the tie-break wants the greatest bytes)."""

    __slots__ = ("key",)

    def __init__(self, key: bytes) -> None:
        self.key = key

    def __lt__(self, other: _Descending) -> bool:
        return self.key > other.key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Descending) and self.key == other.key

    __hash__ = None  # type: ignore[assignment]


def learn_merges_small(
    words: Mapping[bytes, int],
    n_merges: int,
    rules: MergeRules,
    *,
    progress: Callable[[int], None] | None = None,
) -> MergeResult:
    """Up to `n_merges` merges of byte-level BPE over `words` (word -> count) by `rules` (which
    make no superwords here), in pure Python: the compiled engine's merges
    (`bpe.engine.merge.learn_merges`) for the same rules. `progress` is called with 0 as the loop
    starts, then with the merges made since the last call."""
    if rules.superwords is not None:
        raise ValueError("the small-corpus path makes no superwords")
    tie_break, min_frequency, max_token_length = rules.tie_break, rules.min_frequency, rules.max_token_length
    started = time.perf_counter()
    tokens = [bytes([i]) for i in range(256)]
    by_bytes = tie_break == "bytes"
    keys = [_Descending(t) for t in tokens] if by_bytes else []
    ids = [list(word) for word in words]
    weights = list(words.values())
    counts: dict[Pair, int] = defaultdict(int)
    holders: dict[Pair, set[int]] = defaultdict(set)
    for i, (word, weight) in enumerate(zip(ids, weights, strict=True)):
        for pair in zip(word, word[1:]):
            counts[pair] += weight
            holders[pair].add(i)

    def allowed(pair: Pair) -> bool:
        return max_token_length is None or len(tokens[pair[0]]) + len(tokens[pair[1]]) <= max_token_length

    def entry(pair: Pair, count: int) -> tuple:
        a, b = pair
        if by_bytes:
            return (-count, keys[a], keys[b], a, b)
        return (-count, -a, -b, a, b)

    heap = [entry(pair, count) for pair, count in counts.items() if count > 0 and allowed(pair)]
    heapify(heap)
    merges: list[Pair] = []
    chosen: list[int] = []
    stop = "vocab_size"
    if progress is not None:
        progress(0)
    reported = 0
    while len(merges) < n_merges:
        while heap and counts.get((heap[0][3], heap[0][4]), 0) != -heap[0][0]:
            heappop(heap)  # stale: the pair's count changed since (a newer entry holds it) or it is gone
        if not heap:
            stop = "max_token_length" if any(count > 0 for count in counts.values()) else "no_pairs"
            break
        negative, _, _, a, b = heap[0]
        if -negative < min_frequency:
            stop = "min_frequency"
            break
        heappop(heap)
        new = len(tokens)
        tokens.append(tokens[a] + tokens[b])
        if by_bytes:
            keys.append(_Descending(tokens[new]))
        merges.append((a, b))
        chosen.append(-negative)
        changed: set[Pair] = set()
        for i in holders.pop((a, b), ()):
            word = ids[i]
            merged = _merge(word, a, b, new)
            if merged is None:
                continue  # the index is lazy: an earlier merge took this word's last (a, b)
            weight = weights[i]
            for pair in zip(word, word[1:]):
                counts[pair] -= weight
                changed.add(pair)
            for pair in zip(merged, merged[1:]):
                counts[pair] += weight
                holders[pair].add(i)
                changed.add(pair)
            ids[i] = merged
        for pair in changed:
            count = counts[pair]
            if count <= 0:
                del counts[pair]
                holders.pop(pair, None)
            elif allowed(pair):
                heappush(heap, entry(pair, count))
        if progress is not None and len(merges) - reported >= 1024:
            progress(len(merges) - reported)
            reported = len(merges)
    if progress is not None and len(merges) > reported:
        progress(len(merges) - reported)
    return MergeResult(
        merges=np.array(merges, dtype=np.int64).reshape(-1, 2),
        counts=np.array(chosen, dtype=np.int64),
        rounds=len(merges),
        stop_reason=stop,
        seconds=time.perf_counter() - started,
        tokens_after=sum(len(word) * weight for word, weight in zip(ids, weights, strict=True)),
    )


def _merge(word: list[int], a: int, b: int, new: int) -> list[int] | None:
    """`word` with every (a, b) replaced by `new`, left to right ("a a a" -> "X a"); None if it holds none."""
    i, n = 0, len(word)
    out: list[int] = []
    found = False
    while i < n:
        if i + 1 < n and word[i] == a and word[i + 1] == b:
            out.append(new)
            i += 2
            found = True
        else:
            out.append(word[i])
            i += 1
    return out if found else None

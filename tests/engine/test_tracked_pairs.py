"""The local loop tracks only pairs that may reach a floor (`bpe.engine.tracked_pairs`): the merges
stay the reference's however low the floor starts, however coarse its sketch, however often it
forgets pairs below the floor, on any number of threads, and every pair that reaches the floor is
tracked with its count."""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from bpe.engine import tracked_pairs, word_table
from bpe.engine.count import WordCounts
from bpe.engine.merge import learn_merges
from bpe.engine.pair_keys import unpack
from bpe.engine.replay import BaseMerges
from bpe.engine.rules import SuperwordRules
from bpe.engine.tracked_pairs import TrackedPairs
from bpe.engine.word_table import WordTable
from bpe.training.counting import count_words
from tests.conftest import merge_rules
from tests.reference import train_reference

SYMBOLS = ["a", "b", "c", "aa", " ", "x", "é", " the", "\n"]
word = st.lists(st.sampled_from(SYMBOLS), min_size=1, max_size=10).map(lambda s: "".join(s).encode())
corpora = st.dictionaries(word, st.integers(1, 30), min_size=1, max_size=40)


@contextmanager
def tight(per_merge: int = 1, sketch: int = 4, growth: float = 1.0, long_word: int | None = None):
    """Floors as high as they go: `per_merge` counters per merge left, a sketch of at most `sketch`
    counters (pairs share them, so floors are often too high and go down by halves), forgetting
    whenever a call of rounds grew the tables, and words of `long_word` tokens indexed by position."""
    saved = (tracked_pairs.TRACKED_PER_MERGE, tracked_pairs.SKETCH_MOST, tracked_pairs.FORGET_GROWTH)
    saved_long = word_table.LONG_WORD
    tracked_pairs.TRACKED_PER_MERGE, tracked_pairs.SKETCH_MOST, tracked_pairs.FORGET_GROWTH = per_merge, sketch, growth
    if long_word is not None:
        word_table.LONG_WORD = long_word
    try:
        yield
    finally:
        tracked_pairs.TRACKED_PER_MERGE, tracked_pairs.SKETCH_MOST, tracked_pairs.FORGET_GROWTH = saved
        word_table.LONG_WORD = saved_long


def merges(result) -> list[tuple[int, int]]:
    return [tuple(pair) for pair in result.merges.tolist()]


@settings(max_examples=300, deadline=None)
@given(
    corpora,
    st.integers(1, 60),
    st.sampled_from(["bytes", "ids"]),
    st.integers(1, 3),
    st.booleans(),
    st.integers(1, 3),
    st.sampled_from([1, 4, 1 << 10]),
    st.sampled_from([None, 4]),
)
def test_merges_equal_the_reference_however_high_the_floor(
    counts, n, tie_break, min_frequency, one_per_round, threads, sketch, long_word
):
    """Any corpus: the reference's merges and stop, with floors lowered, by one and by halves,
    pairs forgotten after every call of rounds, and long words."""
    expected = train_reference(counts, n, tie_break, min_frequency)
    rules = merge_rules(tie_break=tie_break, min_frequency=min_frequency)
    with tight(sketch=sketch, long_word=long_word):
        result = learn_merges(WordCounts.from_dict(counts), n, rules, one_per_round=one_per_round, threads=threads)
    assert merges(result) == expected
    full = learn_merges(WordCounts.from_dict(counts), n, rules)
    assert result.stop_reason == full.stop_reason
    assert np.array_equal(result.counts, full.counts) and result.tokens_after == full.tokens_after


@settings(max_examples=150, deadline=None)
@given(corpora, st.integers(1, 8), st.integers(1, 40), st.integers(1, 3), st.sampled_from([1, 2, None]))
def test_a_superword_stage_after_a_base_is_the_references(counts, n_base, n, threads, max_words):
    """A base's merges replayed, then merges under superword rules (a superword run's second
    stage) with high floors: the reference's."""
    base = train_reference(counts, n_base)
    superwords = SuperwordRules(max_words=max_words, colon_space=False)
    expected = train_reference(counts, n, base=base, max_words=max_words, colon_space=False)[len(base) :]
    with tight():
        result = learn_merges(
            WordCounts.from_dict(counts), n, merge_rules(superwords=superwords), threads=threads, base=BaseMerges(base)
        )
    assert merges(result) == expected


def test_real_text_lowers_the_floor_and_forgets_and_merges_as_tracking_every_pair(corpus_rows, monkeypatch):
    """Hundreds of merges of real text on one and two threads, the floor starting high and the
    loop coming back every 16 merges: the floor is lowered and pairs are forgotten many times, and
    every merge and count is that of a loop that tracks every pair (a floor of 1 from the start)."""
    from bpe.engine import merge

    counts = count_words(corpus_rows, "cl100k")
    with tight(per_merge=1 << 20, sketch=1 << 22):  # the floor is 1: every pair is tracked
        every = learn_merges(counts, 300, merge_rules())
    steps = Counter()
    for name in ("lower", "forget"):
        method = getattr(TrackedPairs, name)
        monkeypatch.setattr(TrackedPairs, name, lambda self, m=method, n=name: (steps.update([n]), m(self))[1])
    monkeypatch.setattr(merge, "MERGES_PER_CALL", 16)
    for threads in (1, 2):
        for per_merge in (1, 4):
            with tight(per_merge=per_merge, sketch=1 << 22, growth=1.2):
                result = learn_merges(counts, 300, merge_rules(), threads=threads)
            assert np.array_equal(result.merges, every.merges) and np.array_equal(result.counts, every.counts)
            assert result.tokens_after == every.tokens_after
    assert steps["lower"] >= 4 and steps["forget"] >= 4, steps


def test_every_pair_that_reaches_the_floor_is_tracked_with_its_count(corpus_rows):
    """After the first index and after rounds: each pair counted at least `floor` times (counted
    here from the words as they stand) is in the queue at its count, and the two tables hold fewer
    pairs than the words hold."""
    counts = count_words(corpus_rows, "cl100k")
    tables = [WordTable(part, indexed=False) for part in counts.split_by_hash(2)]
    tracked = TrackedPairs(tables, merge_rules(), None, 40)
    for rounds in range(3):
        pair_counts = Counter()
        for table in tables:
            tokens, lengths, freqs = table.to_words()
            for word, freq in zip(np.split(tokens, np.cumsum(lengths)[:-1]), freqs):
                for pair in zip(word[:-1].tolist(), word[1:].tolist()):
                    pair_counts[pair] += int(freq)
        queue = tracked.queue.pair_table
        queued = {unpack(int(key) - 1): int(count) for key, count in queue[queue[:, 0] != 0]}
        reaching = {pair: count for pair, count in pair_counts.items() if count >= tracked.floor}
        assert reaching and all(queued.get(pair) == count for pair, count in reaching.items())
        assert tracked.floor > 1 and sum(table.pair_count for table in tables) < len(pair_counts) / 2
        if rounds < 2:
            batch = tracked.queue.next_round(10)
            assert batch[:, 3].min() >= tracked.floor  # the best pairs, far above the floor
            for table in tables:
                table.apply(batch[:, :3])
                tracked.queue.add(*table.take_deltas())
            assert tracked.due(batch) in (None, tracked.forget)
            tracked.forget()

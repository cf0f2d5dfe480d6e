"""The local merge engine makes exactly the merges of the reference trainer."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bpe.engine.count import WordCounts, check_pair_counts
from bpe.engine.merge import learn_merges
from bpe.engine.pair_keys import pack
from bpe.engine.pair_queue import PairQueue
from bpe.engine.word_table import WordTable
from bpe.errors import InputError
from bpe.training.counting import count_words
from tests.conftest import merge_rules, ruled
from tests.engine.conftest import carries_on_across_a_checkpoint
from tests.reference import merge_ids, train_reference

# Words over few symbols give many equal counts (ties) and long runs like "aaaa".
SYMBOLS = ["a", "b", "c", "aa", "é", "中", "🙂", " ", "x", "\n"]
word = st.lists(st.sampled_from(SYMBOLS), min_size=1, max_size=8).map(lambda s: "".join(s).encode())
single_byte = st.integers(0, 255).map(lambda b: bytes([b]))
corpora = st.dictionaries(st.one_of(word, single_byte), st.integers(1, 6), max_size=25)


def merges_of(counts: dict[bytes, int], n: int, **kwargs) -> list[tuple[int, int]]:
    rules, kwargs = ruled(kwargs)
    result = learn_merges(WordCounts.from_dict(counts), n, rules, **kwargs)
    return [tuple(p) for p in result.merges.tolist()]


@settings(max_examples=300, deadline=None)
@given(
    corpora,
    st.integers(0, 40),
    st.sampled_from(["bytes", "ids"]),
    st.integers(1, 3),
    st.booleans(),
    st.integers(1, 4),
)
def test_merges_equal_the_reference(counts, n, tie_break, min_frequency, one_per_round, threads):
    """Any corpus, settings and number of merge-loop threads: the reference's merges."""
    expected = train_reference(counts, n, tie_break, min_frequency)
    options = dict(tie_break=tie_break, min_frequency=min_frequency, one_per_round=one_per_round, threads=threads)
    assert merges_of(counts, n, **options) == expected


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.text(st.sampled_from("ab c\n'sé中🙂1"), max_size=30), max_size=8),
    st.sampled_from(["gpt2", "cl100k", "o200k"]),
)
def test_merges_from_text_equal_the_reference(texts, pattern):
    counts = count_words(texts, pattern).to_dict()
    assert merges_of(counts, 30) == train_reference(counts, 30)


# Few symbols and long runs: many ties, many pairs (a, a), many merges per round.
runs = st.dictionaries(
    st.lists(st.sampled_from(["a", "b", "aa", "ab", "c"]), min_size=1, max_size=10).map(lambda s: "".join(s).encode()),
    st.integers(1, 9),
    max_size=12,
)


@settings(max_examples=1000, deadline=None)
@given(runs, st.integers(1, 30), st.sampled_from(["bytes", "ids"]))
def test_rounds_of_several_merges_equal_one_merge_at_a_time(counts, n, tie_break):
    assert merges_of(counts, n, tie_break=tie_break) == merges_of(counts, n, tie_break=tie_break, one_per_round=True)
    assert merges_of(counts, n, tie_break=tie_break) == train_reference(counts, n, tie_break)


def test_threaded_words_restored_from_a_checkpoint_carry_on_exactly(corpus_rows):
    """Slices on threads written out mid-run (`to_words`) and read back on another number of
    threads (`from_words`, as a Dask bucket holder restores its checkpoint) give the same deltas as
    one table all along."""
    counts = count_words(corpus_rows[:800], "cl100k")
    carries_on_across_a_checkpoint(counts, learn_merges(counts, 400, merge_rules()).merges, 200, (7, 5))


def test_a_round_ends_after_a_pair_of_equal_tokens():
    # (a, a) makes (X, a) twice; (c3, a9) counts once and must not join (a, a)'s round.
    counts = {b"aaaaa": 1, "é".encode(): 1, b"aaa": 1}
    assert merges_of(counts, 2) == [(97, 97), (256, 97)] == train_reference(counts, 2)


def test_empty_input_gives_no_merges():
    result = learn_merges(WordCounts.empty(), 10, merge_rules())
    assert len(result) == 0 and result.stop_reason == "no_pairs"


def test_merges_on_real_text_equal_the_reference(corpus_rows):
    counts = count_words(corpus_rows[:1500], "cl100k").to_dict()
    for tie_break in ("bytes", "ids"):
        assert merges_of(counts, 150, tie_break=tie_break) == train_reference(counts, 150, tie_break)


@pytest.mark.parametrize("threads", [2, 3, 4])
@pytest.mark.parametrize("waits", ["spin", "sleep", "spin, small hand-over buffer"])
def test_the_merge_loop_on_threads_learns_what_one_thread_does(corpus_rows, threads, waits, monkeypatch):
    """Thousands of merges of real text: every merge, its count and the final token count equal
    the one-thread loop's (itself checked against the reference above), whether the slice threads
    spin between rounds (no more threads than cores) or sleep (more), and when a round's deltas
    take many hand-overs through the spinning threads' buffer."""
    from bpe.engine import merge, spin_rounds

    monkeypatch.setattr(merge, "available_cores", lambda: 64 if waits.startswith("spin") else 1)
    if "small" in waits:
        monkeypatch.setattr(spin_rounds, "CHUNK", 7)
    counts = count_words(corpus_rows[:3000], "cl100k")
    one = learn_merges(counts, 3000, merge_rules())
    several = learn_merges(counts, 3000, merge_rules(), threads=threads)
    assert len(one) == 3000
    assert np.array_equal(several.merges, one.merges) and np.array_equal(several.counts, one.counts)
    assert several.tokens_after == one.tokens_after and several.stop_reason == one.stop_reason


def test_ties_go_to_the_greatest_byte_strings():
    # (b'a', b'b') and (b'c', b'd') both occur twice: bytes order picks c d; ids order picks it too,
    # but (b'z', b'a') vs (b'a', b'z') differ by first token.
    counts = {b"ab": 2, b"cd": 2, b"za": 1, b"az": 1}
    assert merges_of(counts, 1) == [(ord("c"), ord("d"))]
    assert merges_of({b"za": 1, b"az": 1}, 1) == [(ord("z"), ord("a"))]


def test_bytes_and_ids_tie_breaks_differ_when_token_ids_disagree_with_bytes():
    # After merging (b, b) -> 256 = b'bb', pairs (256, a) = b'bb'+b'a' and (c, a) = b'c'+b'a' tie.
    # By bytes b'c' > b'bb', by ids 256 > 99.
    counts = {b"bb": 5, b"bba": 1, b"ca": 1}
    assert merges_of(counts, 2, tie_break="bytes")[1] == (ord("c"), ord("a"))
    assert merges_of(counts, 2, tie_break="ids")[1] == (256, ord("a"))


def test_min_frequency_stops_early():
    result = learn_merges(WordCounts.from_dict({b"ab": 5, b"cd": 2}), 10, merge_rules(min_frequency=3))
    assert result.merges.tolist() == [[97, 98]] and result.stop_reason == "min_frequency"


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.one_of(word, single_byte), st.just(1), max_size=25),
    st.dictionaries(st.one_of(word, single_byte), st.integers(2, 4), max_size=4),
    st.integers(0, 60),
    st.sampled_from(["bytes", "ids"]),
    st.integers(1, 3),
)
def test_pairs_counted_once_are_merged_as_the_reference_merges_them(once, more, n, tie_break, threads):
    """The queue's heap leaves out pairs counted once (most pairs of a large corpus) until only such
    pairs are left: mostly words seen once, a few seen more, and more merges than pairs, so that
    rounds run out of held pairs midway and the loop goes on down to count 1."""
    counts = {**once, **more}
    expected = train_reference(counts, n, tie_break)
    assert merges_of(counts, n, tie_break=tie_break, threads=threads) == expected


@pytest.mark.parametrize("threads", [1, 2])
def test_released_counts_are_emptied_and_the_merges_are_the_same(corpus_rows, threads):
    """`release_counts=True` (what a training run asks, to free the words during the loop) empties
    the counts once the word tables hold them, and changes no merge."""
    kept, released = count_words(corpus_rows[:300], "cl100k"), count_words(corpus_rows[:300], "cl100k")
    expected = learn_merges(kept, 200, merge_rules(), threads=threads)
    result = learn_merges(released, 200, merge_rules(), threads=threads, release_counts=True)
    assert result.merges.tolist() == expected.merges.tolist() and len(kept) > 0
    assert len(released) == 0 and len(released.data) == 0


def test_running_out_of_pairs_stops_with_a_reason():
    result = learn_merges(WordCounts.from_dict({b"abc": 1}), 10, merge_rules())
    assert len(result) == 2 and result.stop_reason == "no_pairs"


def test_word_table_reports_deltas_next_to_merge_sites():
    table = WordTable(WordCounts.from_dict({bytes([1, 2, 3, 1, 2]): 1}))
    initial = dict(zip(*table.take_deltas()))
    assert initial == {pack(1, 2): 2, pack(2, 3): 1, pack(3, 1): 1}
    table.apply(np.array([[1, 2, 256]]))
    assert table.words() == [[256, 3, 256]]
    deltas = dict(zip(*table.take_deltas()))
    assert deltas == {
        pack(1, 2): -2,
        pack(2, 3): -1,
        pack(3, 1): -1,
        pack(256, 3): 1,
        pack(3, 256): 1,
    }


def test_overlapping_runs_merge_left_to_right():
    table = WordTable(WordCounts.from_dict({b"aaaaa": 1}))
    table.take_deltas()
    table.apply(np.array([[97, 97, 256]]))
    assert table.words() == [[256, 256, 97]]
    assert dict(zip(*table.take_deltas())) == {pack(97, 97): -4, pack(256, 256): 1, pack(256, 97): 1}


def test_queue_refuses_deltas_that_do_not_match():
    queue = PairQueue(merge_rules())
    queue.add(np.array([pack(1, 2)]), np.array([3]))
    with pytest.raises(ValueError, match="negative"):
        queue.add(np.array([pack(1, 2)]), np.array([-4]))


# Counts past what 32 bits hold (Hugging Face's trainer keeps pair counts in i32 and wrapped them
# silently on large corpora): pairs here occur 2**32 to 2**35 times, and ties are broken as usual.
HUGE = {b"ab": 2**31 + 5, b"abc": 2**32 + 7, b"bcd": 2**33 + 1, b"cd": 3 * 2**31, b"abcd": 2**32 - 1, b"dc": 2**33 + 1}
# Just below the limit (2**62 bytes of words in all): pair counts near 2**60, still exact.
NEAR_LIMIT = {b"ab": 2**59, b"abab": 2**58 - 1, b"ba": 3}


def tokens_after(counts: dict[bytes, int], merges: list[tuple[int, int]]) -> int:
    """Tokens of all word occurrences once `merges` are applied, by the reference's own merging."""
    total = 0
    for word, count in counts.items():
        ids = list(word)
        for new_id, pair in enumerate(merges, start=256):
            ids = merge_ids(ids, pair, new_id)
        total += count * len(ids)
    return total


@pytest.mark.parametrize("counts", [HUGE, NEAR_LIMIT], ids=["past 2**32", "near 2**62"])
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("tie_break", ["bytes", "ids"])
def test_counts_past_32_bits_give_the_reference_merges_and_exact_counts(counts, threads, tie_break):
    expected = train_reference(counts, 10, tie_break)
    result = learn_merges(WordCounts.from_dict(counts), 10, merge_rules(tie_break=tie_break), threads=threads)
    assert [tuple(p) for p in result.merges.tolist()] == expected
    first = expected[0]
    assert result.counts[0] == sum(c * list(zip(w, w[1:])).count(first) for w, c in counts.items()) > 2**32
    assert result.tokens_after == tokens_after(counts, expected)


@pytest.mark.parametrize(
    "counts",
    [{b"ab": 2**62, b"abab": 2**62}, {b"ab": 2**63 - 1, b"cd": 2**63 - 1}, {b"ab": 2**63}, {b"ab": 2**64 + 1}],
    ids=["pair count past 2**63", "tokens past 2**63", "a count past int64", "a count past uint64"],
)
def test_counts_past_what_int64_holds_are_refused_in_one_line(counts):
    """A count that wrapped negative would silently change the merges: refused, never wrapped."""
    with pytest.raises(InputError) as raised:
        learn_merges(WordCounts.from_dict(counts), 10, merge_rules())
    message = str(raised.value)
    assert message.startswith("word counts: ") and "int64" in message and "\n" not in message, message


def test_a_negative_word_count_is_refused():
    with pytest.raises(InputError, match=r"^word counts: word b'ab' has count -3, below 0$"):
        learn_merges(WordCounts.from_dict({b"cd": 2, b"ab": -3}), 10, merge_rules())


def test_the_dask_engines_pair_counts_past_the_limit_are_refused():
    """The first pair counts the Dask engine's word buckets send: summed over the buckets, as its queue does."""
    check_pair_counts([np.array([2**61, 5]), np.array([2**60])])  # 3 x 2**60 in all: within the limit
    with pytest.raises(InputError, match=r"^word counts: the pair occurrences of all words come to .*int64"):
        check_pair_counts([np.array([2**61, 5]), np.array([2**61])])
    with pytest.raises(InputError, match=r"^word counts: a word bucket gave a negative pair count .*int64"):
        check_pair_counts([np.array([3]), np.array([-(2**63) + 1])])


def test_the_loop_comes_back_after_few_merges_first_then_after_more_each_time():
    """The tables are looked at between calls (pairs forgotten, the floor lowered): the first call
    makes `FIRST_CALL_MERGES`, each next one twice as many up to `MERGES_PER_CALL`, and every
    call's merges are reported as progress."""
    from bpe.engine import merge

    budgets, reported = [], []

    def run_rounds(budget: int) -> tuple[np.ndarray, int]:
        budgets.append(budget)
        return np.zeros((budget, 4), np.int64), 1

    batches, done, rounds = merge.drive(run_rounds, 5000, reported.append)
    first, most = merge.FIRST_CALL_MERGES, merge.MERGES_PER_CALL
    assert budgets[0] == first and budgets[1] == 2 * first and max(budgets) == most
    left = [5000 - sum(budgets[: i + 1]) for i in range(len(budgets))]
    assert all(b == min(2 * a, most, rest) for a, b, rest in zip(budgets, budgets[1:], left))
    assert done == sum(budgets) == 5000 and rounds == len(budgets) and reported == [0, *budgets]

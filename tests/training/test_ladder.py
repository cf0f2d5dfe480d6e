"""The ladder's trainers (bpe/training/_educational.py, and our engine as bench/ladder.py runs it) all make the
reference trainer's merges; the harness around them runs end to end."""

from __future__ import annotations

import doctest
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench import ladder
from bench.ladder import Result, check_identical, load_texts, take_bytes, train_local_engine
from bpe.training import _educational as textbook
from bpe.training._educational import TEXTBOOK, best_pair, merge, pop_best, pretokenize
from bpe.training.counting import count_words
from tests.conftest import write_parquet
from tests.reference import train_reference

TRAINERS = {rung.step: rung.trainer for rung in TEXTBOOK} | {"6": train_local_engine}

# Ties, runs like "aaaa", words with no pairs, multi-byte characters, empty input.
HAND_MADE = [
    ["aaaa aaa aa a"],
    ["ab ba"],
    ["low lower lowest newest widest", "low low\tnewer"],
    ["abab baba abba", "aaaa bbbb aaaa", "ab ab ba ba"],
    ["héllo wörld 中文 🙂🙂🙂 naïve café", "🙂🙂 中文中文"],
    ["a b c d"],
    ["", "   \n"],
    [],
]


def reference(texts: list[str], n_merges: int, pattern: str = "whitespace") -> list[tuple[int, int]]:
    return train_reference(dict(Counter(pretokenize(texts, pattern))), n_merges, tie_break="ids")


def assert_all_equal_reference(texts: list[str], n_merges: int, pattern: str = "whitespace", steps=TRAINERS) -> None:
    expected = reference(texts, n_merges, pattern)
    for step in steps:
        assert TRAINERS[step](texts, n_merges, pattern) == expected, f"step {step}"


def test_merge_is_left_to_right_and_non_overlapping():
    assert merge([1, 2, 3, 1, 2], (1, 2), 256) == [256, 3, 256]
    assert merge([97, 97, 97], (97, 97), 256) == [256, 97]
    assert merge([97, 97, 97, 97], (97, 97), 256) == [256, 256]
    assert merge([1, 2], (2, 1), 256) == [1, 2]


def test_docstring_examples():
    assert doctest.testmod(ladder).failed == 0
    result = doctest.testmod(textbook)
    assert result.attempted > 0 and result.failed == 0


def test_ties_go_to_the_largest_pair_of_ids():
    stats = {(1, 2): 3, (2, 1): 3, (1, 9): 3, (9, 9): 2}
    assert best_pair(stats) == (2, 1)
    heap = [(-3, -1, -2), (-3, -2, -1), (-3, -1, -9), (-5, -9, -9)]  # (9, 9) is stale: its count is 2
    assert pop_best(sorted(heap), stats) == (2, 1)
    assert pop_best([(-4, -1, -2)], stats) is None  # only stale entries


@pytest.mark.parametrize("step", sorted(TRAINERS))
def test_hand_checked_merges(step):
    train = TRAINERS[step]
    # (a, a) occurs 3 + 2 + 1 = 6 times; then (256, 256) and (256, 97) tie at 1: the larger goes first.
    assert train(["aaaa aaa aa a"], 10, "whitespace") == [(97, 97), (256, 256), (256, 97)]
    # (a, b) and (b, a) tie at 1: (98, 97) is larger, whatever order the words come in.
    assert train(["ab ba"], 10, "whitespace") == [(98, 97), (97, 98)]
    assert train(["ba ab"], 1, "whitespace") == [(98, 97)]
    assert train(["a b c"], 5, "whitespace") == []


@pytest.mark.parametrize("texts", HAND_MADE)
@pytest.mark.parametrize("n_merges", [1, 4, 60])
def test_every_rung_equals_the_reference_on_hand_made_texts(texts, n_merges):
    assert_all_equal_reference(texts, n_merges)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(st.sampled_from("aab c\t é🙂"), max_size=40), max_size=6), st.integers(0, 25))
def test_every_rung_equals_the_reference_on_random_texts(texts, n_merges):
    assert_all_equal_reference(texts, n_merges)


@pytest.mark.parametrize("pattern", ["gpt2", r"\w+|[^\w\s]+"])
def test_regex_patterns(pattern):
    texts = ["Hello, world! It's 2024: the cat's hat.", "aaaa  aaa\n\nbb bb", "naïve café 中文"]
    assert Counter(pretokenize(texts, pattern)) == count_words(texts, pattern).to_dict()
    assert_all_equal_reference(texts, 40, pattern)


def test_real_text(corpus_rows):
    """A few hundred paragraphs of English: step 1 on a slice (it is slow), the others on more."""
    assert_all_equal_reference(corpus_rows[:60], 40)
    assert_all_equal_reference(corpus_rows[:400], 150, steps=["2", "3", "4", "5", "6"])


def test_check_identical_catches_a_difference():
    rung_a, rung_b = TEXTBOOK[0], TEXTBOOK[1]
    check_identical([Result(rung_a, 1.0, [(1, 2), (3, 4)]), Result(rung_b, 1.0, [(1, 2), (3, 4)])])
    with pytest.raises(AssertionError, match="step 2 differs from step 1 at merge 1"):
        check_identical([Result(rung_a, 1.0, [(1, 2), (3, 4)]), Result(rung_b, 1.0, [(1, 2), (4, 3)])])
    with pytest.raises(AssertionError, match="at merge 1"):
        check_identical([Result(rung_a, 1.0, [(1, 2), (3, 4)]), Result(rung_b, 1.0, [(1, 2)])])


def test_load_texts_takes_whole_rows_in_sorted_file_order(tmp_path):
    write_parquet(tmp_path / "b.parquet", ["third row", None, "fourth row"])
    write_parquet(tmp_path / "a.parquet", ["first row", "second row é"])
    everything = ["first row", "second row é", "third row", "fourth row"]
    assert load_texts(tmp_path, 0) == everything
    assert load_texts(tmp_path, 10) == everything[:2]  # 9 bytes < 10: one more whole row
    assert load_texts(tmp_path, 9) == everything[:1]
    assert load_texts(tmp_path / "b.parquet", 1) == ["third row"]
    assert take_bytes(everything, 10) == everything[:2]
    (tmp_path / "c.txt").write_text("line one\nline two\n", encoding="utf-8")
    assert load_texts(tmp_path / "c.txt", 0) == ["line one\n", "line two\n"]


def test_command_runs_end_to_end(tmp_path, capsys):
    data = tmp_path / "corpus.txt"
    data.write_text("the quick brown fox jumps over the lazy dog\nthe cat sat on the mat\n" * 40, encoding="utf-8")
    out = tmp_path / "results"
    ladder.main(
        [
            "--data",
            str(data),
            "--bytes",
            "400",
            "--merges",
            "12",
            "--no-dask",
            "--out",
            str(out),
            "--scaling",
            "--sizes",
            "400,1k,2k",
            "--time-limit",
            "0",
        ]
    )
    printed = capsys.readouterr().out
    assert "every step made the same 12 merges" in printed
    assert "| 6 | bpe local engine |" in printed
    assert printed.count("skipped (> limit)") == 2 * 6  # every rung at 1 KB and at 2 KB: the limit is 0 s
    assert (out / "ladder.png").stat().st_size > 0
    assert (out / "ladder_scaling.png").stat().st_size > 0

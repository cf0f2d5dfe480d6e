"""Parity-aware merges (`bpe.engine.parity`) make exactly the reference parity trainer's merges, and
serve the same languages: every variant, ratio targets, global merges, with and without a dev set,
both tie-breaks, min_frequency, max_token_length, a base tokenizer's merges, and 1-4 threads; and so
does a driver that holds the words itself and feeds `ParityQueues` as the Dask engine does."""

from __future__ import annotations

import random
import signal
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bpe.engine.count import WordCounts
from bpe.engine.merge import learn_merges
from bpe.engine.parity import GLOBAL, ParityQueues, ParityRule, learn_parity_merges, refuse_superwords
from bpe.engine.replay import BaseMerges
from bpe.engine.word_table import WordTable
from bpe.errors import SettingsError
from bpe.training.trainer import train
from tests.conftest import merge_rules, parity_rule
from tests.reference import merge_ids, reference_parity_run, train_reference

# Words over few symbols: many equal counts (ties between pairs and between languages), long runs.
SYMBOLS = ["a", "b", "c", "aa", "é", "中", " ", "x"]
word = st.lists(st.sampled_from(SYMBOLS), min_size=1, max_size=7).map(lambda s: "".join(s).encode())
words = st.dictionaries(word, st.integers(1, 6), max_size=12)


@st.composite
def runs(draw) -> dict:
    """2-4 languages' words, maybe a dev set (or ratio targets), and the rule's and run's settings."""
    n = draw(st.integers(2, 4))
    options = dict(
        variant=draw(st.sampled_from(["base", "window"])),
        global_merges=draw(st.sampled_from([0, 0, 1, 3])),
        window=draw(st.integers(1, 6)),
        alpha=draw(st.sampled_from([0.5, 1.0, 2.0, 3.5])),
        tie_break=draw(st.sampled_from(["bytes", "ids"])),
        min_frequency=draw(st.sampled_from([1, 1, 2, 4])),
        max_token_length=draw(st.sampled_from([None, None, 2, 3, 5])),
    )
    drive_by = draw(st.sampled_from(["dev", "dev", "ratio", "training"]))
    dev = [draw(words) for _ in range(n)] if drive_by == "dev" else None
    ratio = tuple(draw(st.sampled_from([1.0, 1.5, 2.5, 0.7])) for _ in range(n)) if drive_by == "ratio" else None
    return dict(languages=[draw(words) for _ in range(n)], dev=dev, ratio=ratio, options=options)


def learnt(run: dict, n_merges: int, threads: int = 1, base: list[tuple[int, int]] = ()):
    options = dict(run["options"])
    rule = ParityRule(options.pop("variant"), options.pop("global_merges"), options.pop("window"),
                      options.pop("alpha"), run["ratio"])  # fmt: skip
    return learn_parity_merges(
        [WordCounts.from_dict(w) for w in run["languages"]],
        n_merges,
        rule,
        merge_rules(**options),
        dev=None if run["dev"] is None else [WordCounts.from_dict(w) for w in run["dev"]],
        threads=threads,
        base=BaseMerges(np.array(base, dtype=np.int64).reshape(-1, 2)) if base else None,
    )


def expected(run: dict, n_merges: int, base: list[tuple[int, int]] = ()):
    return reference_parity_run(run["languages"], n_merges, dev=run["dev"], ratio=run["ratio"], base=base,
                                **run["options"])  # fmt: skip


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs(), st.integers(0, 30), st.integers(1, 4))
def test_parity_merges_equal_the_reference(run, n_merges, threads):
    """Any languages, dev set or ratio targets, rule and settings, on 1-4 threads: the reference's
    merges, each serving the reference's language."""
    result = learnt(run, n_merges, threads)
    reference = expected(run, n_merges)
    assert [tuple(p) for p in result.merges.tolist()] == reference.merges
    assert result.languages.tolist() == reference.languages
    assert len(result.counts) == len(result.merges) == result.rounds


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs(), st.integers(1, 20), st.integers(1, 8), st.integers(1, 3))
def test_parity_merges_after_a_base_tokenizer_equal_the_reference(run, n_merges, n_base, threads):
    """A base tokenizer's merges (learnt on other words) are replayed on training and dev words
    first; the merges learnt continue from them, as the reference's do."""
    other = {b"".join(random.Random(n_base).choices([b"a", b"b", b" ", b"c", b"\xc3\xa9"], k=6)): 3, b"aab ab": 2}
    base = train_reference(other, n_base)
    result = learnt(run, n_merges, threads, base)
    reference = expected(run, n_merges, base)
    assert [tuple(p) for p in result.merges.tolist()] == reference.merges[len(base) :]
    assert result.languages.tolist() == reference.languages[len(base) :]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs(), st.integers(0, 25), st.integers(1, 5), st.randoms(use_true_random=False))
def test_a_driver_of_parity_queues_makes_the_references_merges(run, n_merges, buckets, rng):
    """A driver holding each language's words in buckets of its own (any split, as Dask workers
    hold them) and feeding `ParityQueues` as its docstring says makes the reference's merges."""
    options = dict(run["options"])
    rule = ParityRule(options["variant"], options["global_merges"], options["window"], options["alpha"], run["ratio"])
    queues = ParityQueues(
        len(run["languages"]),
        rule,
        merge_rules(
            tie_break=options["tie_break"],
            min_frequency=options["min_frequency"],
            max_token_length=options["max_token_length"],
        ),
        dev=None if run["dev"] is None else [WordCounts.from_dict(w) for w in run["dev"]],
    )
    held: list[tuple[int, WordTable]] = []
    for language, counts in enumerate(run["languages"]):
        parts: list[dict[bytes, int]] = [{} for _ in range(buckets)]
        for w, c in counts.items():
            parts[rng.randrange(buckets)][w] = c
        tables = [WordTable(WordCounts.from_dict(part)) for part in parts]
        for table in tables:
            queues.add(language, *table.take_deltas())
        queues.set_training_tokens(language, sum(table.token_count() for table in tables))
        held += [(language, table) for table in tables]
    merges, served = [], []
    while len(merges) < n_merges and (chosen := queues.next_merge()) is not None:
        row, language = chosen
        for bucket_language, table in held:
            table.apply(row[None, :3])
            queues.add(bucket_language, *table.take_deltas())
        merges.append((int(row[0]), int(row[1])))
        served.append(language)
    reference = expected(run, n_merges)
    assert (merges, served) == (reference.merges, reference.languages)
    assert queues.training_tokens().tolist() == [sum(t.token_count() for k, t in held if k == i)
                                                 for i in range(len(run["languages"]))]  # fmt: skip


def tokens_of(counts: dict[bytes, int], merges: list[tuple[int, int]]) -> int:
    total = 0
    for w, c in counts.items():
        ids = list(w)
        for k, pair in enumerate(merges):
            ids = merge_ids(ids, pair, 256 + k)
        total += len(ids) * c
    return total


def test_tokens_after_stop_reasons_and_progress():
    """`tokens_after` is the training words' tokens with every merge; a run stops for the reason
    plain runs give; progress is reported as learn_merges reports it."""
    languages = [{b"aab": 4, b"ab": 3}, {b"ccd": 5, b"c": 1}, {b"x": 2}]
    counts = [WordCounts.from_dict(w) for w in languages]
    calls: list[int] = []
    result = learn_parity_merges(counts, 3, parity_rule(), merge_rules(), dev=counts, progress=calls.append)
    assert calls == [0, 3] and result.stop_reason == "vocab_size"
    merges = [tuple(p) for p in result.merges.tolist()]
    assert result.tokens_after == sum(tokens_of(w, merges) for w in languages)
    everything = learn_parity_merges(counts, 50, parity_rule(), merge_rules(), dev=counts)
    assert everything.stop_reason == "no_pairs" and len(everything) == 4  # aa, aab, cc, ccd or the like
    assert learn_parity_merges(counts, 50, parity_rule(), merge_rules(min_frequency=5)).stop_reason == "min_frequency"
    assert (
        learn_parity_merges(counts, 50, parity_rule(), merge_rules(max_token_length=2)).stop_reason
        == "max_token_length"
    )


def test_the_global_phase_merges_the_summed_counts():
    """With global merges only, parity-aware merges are plain BPE on the languages' summed words."""
    languages = [{b"hello world": 3, b"low": 2}, {b"lower": 4, b"hell": 1}, {b"world": 2}]
    counts = [WordCounts.from_dict(w) for w in languages]
    result = learn_parity_merges(counts, 12, parity_rule(global_merges=12), merge_rules())
    plain = learn_merges(WordCounts.combine(counts), 12, merge_rules())
    assert result.merges.tolist() == plain.merges.tolist() and set(result.languages.tolist()) == {GLOBAL}


def test_parity_merges_ease_the_longest_language():
    """The language whose dev text is longest in tokens is served until it is no longer the longest."""
    counts = [WordCounts.from_dict({b"abab abab": 10}), WordCounts.from_dict({b"cdcdcdcd": 1})]
    result = learn_parity_merges(
        counts, 3, parity_rule(), merge_rules(), dev=[counts[0], WordCounts.from_dict({b"cdcdcdcd": 40})]
    )
    assert result.languages.tolist() == [1, 1, 0]  # language 1's 320 dev tokens, then 160, then 80 < 90


@pytest.mark.parametrize(
    "setting, value",
    [
        ("parity_variant", "sliding"),
        ("parity_window", 0),
        ("parity_alpha", float("nan")),
        ("parity_alpha", float("inf")),
        ("global_merges", -1),
    ],
)
def test_a_parity_setting_the_engine_cannot_follow_is_refused_by_the_schema_in_one_line(setting, value):
    """The schema checks the parity settings where they are given; the engine does not check
    them again with messages of its own."""
    with pytest.raises(SettingsError, match=f"^{setting}: ") as caught:
        train(texts={"eng": ["ab ab"], "hin": ["cd cd"]}, vocab_size=260, parity=True, **{setting: value})
    assert "\n" not in str(caught.value)


def test_a_rule_that_does_not_fit_its_languages_is_a_programming_error():
    with pytest.raises(ValueError, match="2 languages has dev text for 1"):
        learn_parity_merges(
            [WordCounts.from_dict({b"ab": 1})] * 2, 5, parity_rule(), merge_rules(), dev=[WordCounts.empty()]
        )
    with pytest.raises(ValueError, match="2 languages has 1 ratios"):
        learn_parity_merges([WordCounts.from_dict({b"ab": 1})] * 2, 5, parity_rule(ratio=(1.0,)), merge_rules())


def test_superwords_are_refused_naming_both_settings():
    with pytest.raises(SettingsError) as caught:
        refuse_superwords()
    assert str(caught.value).startswith("superwords=True: ") and "parity=True" in str(caught.value)


def test_ctrl_c_stops_parity_merges_cleanly():
    """Ctrl-C during the merge loop (inside a kernel) raises KeyboardInterrupt once the kernel is
    back, between batches of merges: no crash, no merge loop left running."""
    rng = random.Random(0)
    letters = b"abcdefghijklmnopqrstuvwxyz"
    languages = [
        WordCounts.from_dict(
            {bytes(rng.choices(letters, k=rng.randint(3, 12))): rng.randint(1, 9) for _ in range(4000)}
        )
        for _ in range(3)
    ]
    made: list[int] = []

    def progress(merges: int) -> None:
        if not made:  # the loop starts: Ctrl-C in 20 ms, while a kernel runs
            threading.Timer(0.02, signal.raise_signal, (signal.SIGINT,)).start()
        made.append(merges)

    # As a terminal's foreground command has it: a run started in the background (a CI job) inherits
    # "ignore SIGINT", which the engine rightly respects.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            learn_parity_merges(languages, 10**6, parity_rule(), merge_rules(), dev=languages, progress=progress)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert made[0] == 0 and sum(made) < 10**6

"""`max_token_length`: no merge makes a token longer than L bytes; such pairs are skipped, not
merged, and the next best pair wins. Every engine and thread count gives the reference's merges."""

from __future__ import annotations

import inspect
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bpe import train
from bpe.cli import in_flags, main
from bpe.engine import merge
from bpe.engine.count import WordCounts
from bpe.engine.merge import learn_merges
from bpe.errors import SettingsError
from bpe.training.counting import count_words
from tests.conftest import merge_rules, ruled, stdlib_paragraphs
from tests.reference import train_reference

# As in tests/engine/test_merge.py: few symbols (many ties, multi-byte characters), and long runs (pairs (a, a)).
SYMBOLS = ["a", "b", "c", "aa", "é", "中", "🙂", " ", "x", "\n"]
word = st.lists(st.sampled_from(SYMBOLS), min_size=1, max_size=8).map(lambda s: "".join(s).encode())
corpora = st.dictionaries(word, st.integers(1, 6), max_size=25)
run = st.lists(st.sampled_from(["a", "b", "aa", "ab", "c"]), min_size=1, max_size=10).map(lambda s: "".join(s).encode())
runs = st.dictionaries(run, st.integers(1, 9), max_size=12)


def texts() -> list[str]:
    """Real prose, read when a test runs (collecting the suite waits on nothing)."""
    return stdlib_paragraphs()[:800]


N_MERGES = 200


def merges_of(counts: dict[bytes, int], n: int, **kwargs) -> list[tuple[int, int]]:
    rules, kwargs = ruled(kwargs)
    return [tuple(p) for p in learn_merges(WordCounts.from_dict(counts), n, rules, **kwargs).merges.tolist()]


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(corpora, runs),
    st.integers(0, 40),
    st.sampled_from(["bytes", "ids"]),
    st.integers(1, 3),
    st.booleans(),
    st.integers(1, 3),
    st.integers(2, 7),
)
def test_merges_with_a_length_limit_equal_the_reference(
    counts, n, tie_break, min_frequency, one_per_round, threads, limit
):
    """Any small corpus, tie-break, threads and limit: the reference's merges, none longer than the limit."""
    expected = train_reference(counts, n, tie_break, min_frequency, max_token_length=limit)
    options = dict(tie_break=tie_break, min_frequency=min_frequency, one_per_round=one_per_round, threads=threads)
    assert merges_of(counts, n, max_token_length=limit, **options) == expected


@pytest.fixture(scope="module")
def word_counts() -> dict[bytes, int]:
    return count_words(texts(), "cl100k").to_dict()


@pytest.fixture(scope="module")
def reference(word_counts):
    """The reference's merges on real text, per tie-break, with L = 4 (cached: it recounts every round)."""
    return {tb: train_reference(word_counts, N_MERGES, tb, max_token_length=4) for tb in ("bytes", "ids")}


@pytest.mark.parametrize("tie_break", ["bytes", "ids"])
@pytest.mark.parametrize("threads, waits", [(1, "-"), (2, "spin"), (2, "sleep"), (3, "spin"), (3, "sleep")])
def test_the_local_engine_on_threads_gives_the_reference_merges(reference, tie_break, threads, waits, monkeypatch):
    """`threads=` forces the threaded loop below THREADED_MERGE_MIN_WORDS; the threads spin between
    rounds with no more threads than cores, sleep with more (forced here either way)."""
    monkeypatch.setattr(merge, "available_cores", lambda: 64 if waits == "spin" else 1)
    tok = train(
        texts(), vocab_size=256 + N_MERGES, pattern="cl100k", tie_break=tie_break, max_token_length=4, threads=threads
    )
    assert tok.manifest["engine"]["merge_threads"] == threads
    assert tok.merges == reference[tie_break]
    assert tok.manifest["settings"]["max_token_length"] == 4
    assert tok.manifest["engine"]["rounds"] < N_MERGES  # rounds of several merges were taken


def test_no_token_is_longer_than_the_limit_and_the_limit_changes_the_merges():
    unlimited = train(texts(), vocab_size=1000, pattern="cl100k")
    assert max(len(t) for t in unlimited.vocab) > 5
    for limit in (2, 3, 5):
        tok = train(texts(), vocab_size=1000, pattern="cl100k", max_token_length=limit)
        assert max(len(t) for t in tok.vocab) == limit
        if limit == 2:  # fewer pairs of bytes occur than the vocabulary wants: the limit stops the run
            assert len(tok.merges) < 1000 - 256 and tok.manifest["result"]["stop_reason"] == "max_token_length"
        else:
            assert len(tok.merges) == 1000 - 256 and tok.manifest["result"]["stop_reason"] == "vocab_size"
        assert tok.encode_ordinary(texts()[0]) and tok.decode(tok.encode_ordinary(texts()[0])) == texts()[0]
    # The merges up to the first token longer than the limit are the unlimited run's.
    first_long = next(i for i, t in enumerate(unlimited.vocab) if len(t) > 5) - 256
    assert tok.merges[:first_long] == unlimited.merges[:first_long]


def test_a_limit_that_leaves_only_long_pairs_stops_with_its_own_reason(capsys, tmp_path):
    result = learn_merges(WordCounts.from_dict({b"abcd": 5}), 10, merge_rules(max_token_length=2))
    assert result.merges.tolist() == [[99, 100], [97, 98]] and result.stop_reason == "max_token_length"
    assert learn_merges(WordCounts.from_dict({b"ab": 5}), 10, merge_rules(max_token_length=2)).stop_reason == "no_pairs"
    path = tmp_path / "t.txt"
    path.write_text("abcd " * 5)
    assert (
        main(
            [
                "train",
                str(path),
                "--vocab-size",
                "300",
                "--max-token-length",
                "2",
                "--out",
                str(tmp_path / "tok"),
                "--json",
            ]
        )
        == 0
    )
    record = json.loads(capsys.readouterr().out)
    assert record["stop_reason"] == "max_token_length" and record["merges"] == 2
    assert any("--max-token-length" in w for w in record["warnings"])


@settings(max_examples=100, deadline=None)
@given(st.one_of(corpora, runs), st.integers(0, 30), st.sampled_from([None, 2, 3, 5]))
def test_train_warns_exactly_when_it_stops_below_the_vocabulary_size(counts, n, limit):
    """When the reference runs out of pairs (or of pairs short enough) before `n` merges, train()
    warns once, in one line saying why; when it makes them all, it does not."""
    import warnings

    counts = {word: count for word, count in counts.items() if not any(c in word for c in b" \n")}  # one word each
    texts = [word.decode() for word, count in counts.items() for _ in range(count)]
    if not texts:
        return
    expected = train_reference(counts, n, max_token_length=limit)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tok = train(texts, vocab_size=256 + n, pattern="whitespace", max_token_length=limit)
    assert all(w.category.__name__ == "StoppedEarly" and issubclass(w.category, UserWarning) for w in caught)
    warned = [str(w.message) for w in caught]
    assert tok.merges == expected
    if len(expected) == n:
        assert warned == []
        return
    ran_out = train_reference(counts, len(expected) + 1) == expected  # no pair at all was left
    why = "pairs ran out" if ran_out else "only pairs too long for max_token_length were left"
    assert warned == [f"{why} after {len(expected):,} merges; the vocabulary is smaller than asked"]


@pytest.mark.parametrize("bad", [1, 0, -3, True, 2.5, "4"])
def test_a_limit_below_two_or_not_an_integer_is_refused_in_one_line(bad):
    with pytest.raises(SettingsError) as raised:
        train(["some text"], vocab_size=300, max_token_length=bad)
    message = str(raised.value)
    assert raised.value.parameter == "max_token_length" and message.startswith("max_token_length: expected")
    assert "\n" not in message and in_flags(raised.value).startswith("--max-token-length: ")


def test_the_library_and_the_command_take_it_and_record_it(tmp_path, capsys):
    """Once an unknown option for the local engine; now a setting, recorded in the manifest."""
    tok = train(texts()[:100], vocab_size=400, pattern="cl100k", max_token_length=8)
    assert tok.manifest["settings"]["max_token_length"] == 8 and max(map(len, tok.vocab)) <= 8
    assert train(texts()[:100], vocab_size=300).manifest["settings"]["max_token_length"] is None
    path = tmp_path / "t.txt"
    path.write_text("\n\n".join(texts()[:100]))
    out = tmp_path / "tok"
    assert main(["train", str(path), "--vocab-size", "400", "--max-token-length", "8", "--out", str(out)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["settings"]["max_token_length"] == 8
    bad = ["train", str(path), "--vocab-size", "400", "--max-token-length", "1", "--out", str(tmp_path / "x")]
    assert main(bad) == 1
    assert capsys.readouterr().err.strip().startswith("bpe: error: --max-token-length: expected an integer >= 2")
    assert not (tmp_path / "x").exists()


def test_the_pipeline_configuration_and_the_flow_take_it(tmp_path):
    pytest.importorskip("yaml")
    from bpe.pipeline.config import TRAINING_KEYS, load_config

    path = tmp_path / "tok.yaml"
    path.write_text("name: tok\ndata: data/\nvocab_size: 1000\nmax_token_length: 6\n")
    cfg = load_config(path)
    assert cfg.settings().max_token_length == 6 and "max_token_length" in TRAINING_KEYS
    assert cfg.training_settings()["max_token_length"] == 6
    assert load_config(path, {"max_token_length": 3}).settings().max_token_length == 3
    path.write_text("name: tok\ndata: data/\nvocab_size: 1000\n")
    assert load_config(path).settings().max_token_length is None
    path.write_text("name: tok\ndata: data/\nvocab_size: 1000\nmax_token_length: 1\n")
    with pytest.raises(SettingsError, match=r"tok.yaml: max_token_length: expected an integer >= 2"):
        load_config(path)
    pytest.importorskip("prefect")
    from flows.train_bpe import train_bpe

    assert "max_token_length" in inspect.signature(train_bpe.fn).parameters


@pytest.mark.services  # starts a Dask cluster: the slow tier, as tests/distributed/test_dask.py
@pytest.mark.parametrize("tie_break", ["bytes", "ids"])
def test_the_dask_engine_on_two_workers_gives_the_reference_merges(reference, tie_break, two_workers):
    tok = train(
        texts(),
        vocab_size=256 + N_MERGES,
        pattern="cl100k",
        tie_break=tie_break,
        max_token_length=4,
        engine="dask",
        client=two_workers,
    )
    assert tok.manifest["engine"]["word_buckets"] == 2
    assert tok.merges == reference[tie_break]
    assert tok.manifest["settings"]["max_token_length"] == 4

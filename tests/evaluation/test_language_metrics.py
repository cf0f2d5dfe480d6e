"""The per-language figures of `bpe.evaluate`, against independent computations: the Gini
coefficient against its double-sum definition, Rényi efficiency against `tokenization-scorer`
(its authors' scorer), token counts against Hugging Face `tokenizers` encoding the same
tokenizer.json, the other figures against hand-counted tiny cases; which scripts get fertility,
on the shared NTREX set where it is there."""

from __future__ import annotations

import io
import math
from contextlib import redirect_stderr
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bpe import Tokenizer, train
from bpe.errors import SettingsError
from bpe.evaluation.evaluate import display_names, evaluate
from bpe.evaluation.metrics import gini, renyi_efficiency, spaced
from tests.conftest import SHARED, stdlib_paragraphs

NTREX = SHARED / "corpora" / "ntrex"
BYTES = Tokenizer([])  # a token per byte: token counts are byte counts


def gini_by_definition(values: list[float]) -> float:
    """sum_i sum_j |x_i - x_j| / (2 n^2 mean), term by term."""
    n = len(values)
    mean = sum(values) / n
    return sum(abs(a - b) for a in values for b in values) / (2 * n * n * mean)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 10**9), min_size=2, max_size=40))
def test_gini_is_the_mean_absolute_difference_over_twice_the_mean(values):
    if sum(values) == 0:
        assert gini(values) == 0.0
    else:
        assert gini(values) == pytest.approx(gini_by_definition(values), rel=1e-9, abs=1e-12)
    assert gini(sorted(values, reverse=True)) == gini(values)  # the languages' order does not matter


def test_gini_of_equal_counts_is_zero_and_of_one_language_none():
    assert gini([5, 5, 5, 5]) == 0.0
    assert gini([0, 0, 0, 12]) == pytest.approx(3 / 4)  # one language holds everything: (n - 1) / n
    assert gini([7]) is None and gini([]) is None


def scorer_renyi(sentences: list[list[int]], alpha: float) -> float:
    """tokenization-scorer's Rényi efficiency of token ids written as whitespace-separated words."""
    tokenization_scorer = pytest.importorskip("tokenization_scorer")
    text = "\n".join(" ".join(map(str, ids)) for ids in sentences)
    with redirect_stderr(io.StringIO()):  # it reports the vocabulary size and progress there
        return tokenization_scorer.score(text, metric="renyi", power=alpha)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 40), min_size=1, max_size=30), min_size=1, max_size=8))
def test_renyi_efficiency_is_tokenization_scorers(sentences):
    counts = np.bincount([i for ids in sentences for i in ids], minlength=41)
    if np.count_nonzero(counts) < 2:
        assert renyi_efficiency(counts) is None
        return
    for alpha in (2.5, 3.0):
        assert renyi_efficiency(counts, alpha) == pytest.approx(scorer_renyi(sentences, alpha), rel=1e-9)


def test_evaluate_gives_the_scorers_renyi_efficiency_of_the_dev_sets_tokens():
    tok = train(stdlib_paragraphs()[:300], vocab_size=400, pattern="cl100k")
    dev = {"eng": stdlib_paragraphs()[300:330], "fra": [t.upper() for t in stdlib_paragraphs()[300:330]]}
    found = evaluate(tok, dev)["tokenizer 1"]
    every = [tok.encode(t) for code in dev for t in dev[code]]
    assert found.renyi_efficiency == pytest.approx(scorer_renyi(every, 2.5), rel=1e-9)
    eng = [tok.encode(t) for t in dev["eng"]]
    assert found.languages["eng"].renyi_efficiency == pytest.approx(scorer_renyi(eng, 2.5), rel=1e-9)


def test_each_figure_of_a_tiny_dev_set_counted_by_hand():
    """Bytes as tokens: "ab cd" is 5 tokens of 5 bytes in 2 words; "é" is 2 bytes, 2 tokens."""
    dev = {"eng": ["ab cd", "x"], "fra": ["é é", "é"], "zho": ["你好", "好"]}
    ev = evaluate({"bytes": BYTES}, dev)
    assert ev.pivot == "eng" and ev.codes == ["eng", "fra", "zho"]
    eng, fra, zho = (ev["bytes"].languages[c] for c in ("eng", "fra", "zho"))
    assert (eng.sentences, eng.bytes, eng.tokens, eng.words) == (2, 6, 6, 3)
    assert (eng.bytes_per_token, eng.tokens_per_sentence, eng.fertility, eng.parity) == (1.0, 3.0, 2.0, 1.0)
    assert (fra.bytes, fra.tokens, fra.words, fra.fertility, fra.parity) == (7, 7, 3, 7 / 3, 7 / 6)
    assert (zho.bytes, zho.tokens, zho.words, zho.fertility, zho.parity) == (9, 9, None, None, 9 / 6)
    # distinct ids used: a b c d x and the space (eng); 0xC3 0xA9 (é) and the space again (fra); 你 is
    # E4 BD A0 and 好 E5 A5 BD: 5 distinct bytes (zho)
    assert eng.vocabulary_use == 6 / 256 and ev["bytes"].vocabulary_use == (6 + 2 + 5) / 256
    whole = ev["bytes"]
    assert (whole.bytes, whole.tokens, whole.tokens_per_sentence) == (22, 22, 22 / 6)
    assert whole.gini == pytest.approx(gini_by_definition([6, 7, 9])) and whole.most_tokens == "zho"
    assert ev.spaced == {"eng": True, "fra": True, "zho": False}


def test_vocabulary_use_is_a_share_of_the_tokens_other_than_special_ones():
    tok = Tokenizer([(104, 105)], special_tokens=["<|endoftext|>"])  # 257 ordinary tokens and one special
    ev = evaluate(tok, {"eng": ["hi <|endoftext|>"]})  # the special token's text is text here
    assert ev["tokenizer 1"].languages["eng"].tokens == len(tok.encode("hi <|endoftext|>", special_as_text=True))
    used = len(set(tok.encode("hi <|endoftext|>", special_as_text=True)))
    assert ev["tokenizer 1"].vocabulary_use == used / 257


def test_token_counts_are_hugging_faces_for_the_same_tokenizer_json(tmp_path):
    """Our tokenizer saved, its tokenizer.json read by Hugging Face `tokenizers`: each language's
    tokens, and so Gini and parity, are what HF's encoder gives on the same sentences."""
    hf = pytest.importorskip("tokenizers")
    texts = stdlib_paragraphs()
    tok = train(texts[:400], vocab_size=600, pattern="gpt2")
    tok.save(tmp_path / "tok")
    dev = {"eng": texts[400:440], "deu": [t.replace("th", "ß") for t in texts[400:440]], "ell": texts[440:480]}
    ev = evaluate([tmp_path / "tok" / "tokenizer.json", tmp_path / "tok"], dev)
    assert [t.name for t in ev.tokenizers] == ["tok/tokenizer.json", "tok"]
    theirs = hf.Tokenizer.from_file(str(tmp_path / "tok" / "tokenizer.json"))
    counts = {code: sum(len(e.ids) for e in theirs.encode_batch(lines)) for code, lines in dev.items()}
    for found in ev.tokenizers:
        assert {code: f.tokens for code, f in found.languages.items()} == counts
        assert found.gini == pytest.approx(gini_by_definition(list(counts.values())))
        assert found.languages["deu"].parity == counts["deu"] / counts["eng"]


def test_the_pivot_is_eng_by_default_when_there_and_must_be_a_language_when_named():
    dev = {"deu": ["a"], "hin": ["bb"]}
    ev = evaluate(BYTES, dev)
    assert ev.pivot is None and ev["tokenizer 1"].languages["hin"].parity is None
    assert evaluate(BYTES, dev, pivot="hin")["tokenizer 1"].languages["deu"].parity == 0.5
    with pytest.raises(SettingsError) as raised:
        evaluate(BYTES, dev, pivot="eng")
    assert str(raised.value) == "pivot: 'eng' is not a language of the dev set (it has deu, hin)"
    with pytest.raises(SettingsError, match=r"^languages: 'fra' is not in the dev set \(it has deu, hin\)$"):
        evaluate(BYTES, dev, languages=["fra"])


def test_languages_keep_only_those_and_are_held_in_code_order():
    dev = {"tel": ["a"], "eng": ["b"], "arb": ["c"]}
    ev = evaluate(BYTES, dev, languages=["tel", "arb"])
    assert ev.codes == ["arb", "tel"] and list(ev["tokenizer 1"].languages) == ["arb", "tel"]
    assert list(evaluate(BYTES, dev).to_json()["tokenizers"][0]["languages"]) == ["arb", "eng", "tel"]


def test_bad_arguments_are_one_line_naming_the_parameter():
    cases = [
        (lambda: evaluate(BYTES, {"eng": ["a", "b"], "hin": ["c"]}), "'hin' has 1 sentence but 'eng' has 2"),
        (lambda: evaluate(BYTES, {"Eng": ["a"]}), "dev: 'Eng' is not a language code"),
        (lambda: evaluate(BYTES, {"eng": "a sentence"}), "dev: 'eng': expected a list of sentences"),
        (lambda: evaluate(BYTES, {}), "dev: no language in the dev set"),
        (lambda: evaluate(BYTES, 42), "dev: expected a directory"),
        (lambda: evaluate([], {"eng": ["a"]}), "tokenizers: expected at least one tokenizer"),
        (lambda: evaluate([BYTES, 3], {"eng": ["a"]}), "tokenizers: expected a Tokenizer or the path of one, got int"),
        (lambda: evaluate({"x": BYTES, "y": BYTES}, {"eng": ["a"]}, num_threads=0), "num_threads: expected"),
        (lambda: evaluate(BYTES, {"eng": ["a"]}, pivot="English"), "pivot: expected a language code such as eng"),
    ]
    for call, message in cases:
        with pytest.raises(Exception) as raised:
            call()
        assert message in str(raised.value) and "\n" not in str(raised.value), str(raised.value)


def test_tokenizers_are_named_by_the_last_parts_of_their_paths():
    assert display_names(["/a/gpt2", "/b/gpt2/", "c/tok.tiktoken"]) == ["a/gpt2", "b/gpt2", "tok.tiktoken"]
    assert display_names(["s3://bucket/runs/v0001", "/x/tokenizer.json"]) == ["v0001", "x/tokenizer.json"]
    assert display_names(["/same", "/same"]) == ["same", "same"]  # nothing left to tell them apart
    with pytest.raises(SettingsError, match="names: 'same' names two tokenizers"):
        evaluate(["/same", "/same"], {"eng": ["a"]})


def ntrex() -> dict[str, list[str]]:
    if not (NTREX / "eng.txt").exists():
        pytest.skip(f"the shared NTREX dev set is not at {NTREX}")
    return {p.stem: p.read_text(encoding="utf-8").splitlines()[:200] for p in sorted(Path(NTREX).glob("*.txt"))}


def test_fertility_is_left_out_exactly_for_the_scripts_written_without_spaces():
    """Of NTREX's 18 languages, Chinese, Japanese and Thai are written without spaces between
    words (their whitespace-separated "words" are 22 to 40 characters long; the others' 4 to 9)."""
    dev = ntrex()
    assert [code for code, texts in dev.items() if not spaced(texts)] == ["jpn", "tha", "zho"]
    figures = evaluate(BYTES, dev)["tokenizer 1"].languages
    assert [code for code, f in figures.items() if f.fertility is None] == ["jpn", "tha", "zho"]
    assert all(f.words == sum(len(t.split()) for t in dev[c]) for c, f in figures.items() if f.words is not None)


def test_a_script_without_spaces_is_judged_by_most_of_its_letters():
    assert spaced(["Tokyo 東京"]) and spaced(["東京 Tokyo Osaka"])  # as many Latin letters as Han or more
    assert not spaced(["東京から大阪へ Tokyo"]) and not spaced(["ພາສາລາວ", "ភាសាខ្មែរ"])
    assert spaced(["", "123 !"])  # nothing written in any script: spaces are all there is
    assert math.isclose(evaluate(BYTES, {"kor": ["한국어 문장"]})["tokenizer 1"].languages["kor"].fertility, 16 / 2)

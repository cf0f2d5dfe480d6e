"""Mixture weights (`bpe.languages.mixture`): the two forms and what they mean, the integer multipliers
they become, the merges they give (the reference trainer's on counts multiplied as documented),
and what is refused, in one line naming the setting."""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bpe.engine.count import COUNT_LIMIT, WordCounts
from bpe.errors import SettingsError
from bpe.languages.mixture import Mix, check_weighted_bytes, weighted_sum
from bpe.training.counting import count_words
from bpe.training.trainer import train
from tests.reference import train_reference

ENG = ["the cat sat on the mat", "the dog sat on the log", "low lower lowest"] * 4
HIN = ["नमस्ते दुनिया", "दुनिया नमस्ते नमस्ते"] * 2
FIN = ["kissa istui matolla", "koira istui"] * 3


def expected_multipliers(weights: list[float | Fraction], exact: bool) -> list[int]:
    """The documented rule, written again: the smallest integers in the weights' proportions,
    `exact` weights as they are, others relative to the smallest rounded to thousandths."""
    thousandths = [Fraction(w) * 1000 if exact else round(Fraction(w) / Fraction(min(weights)) * 1000) for w in weights]
    assert all(Fraction(t).denominator == 1 for t in thousandths)
    divisor = math.gcd(*(int(t) for t in thousandths))
    return [int(t) // divisor for t in thousandths]


@pytest.mark.parametrize(
    ("text", "sizes", "multipliers"),
    [
        ("eng=1,hin=4", [1000, 10], (1, 4)),
        ("hin=8,eng=2", [1000, 10], (1, 4)),  # weights are proportions, in any order
        ("eng=1,hin=2.5", [1000, 10], (2, 5)),
        ("hin=0.5", [1000, 10], (2, 1)),  # a language left out weighs 1
        ("eng=3,hin=4", [1000, 10], (3, 4)),  # explicit weights exactly as written
        ("eng=1,hin=0.333", [1000, 10], (1000, 333)),
        ("temperature=1", [1000, 10], (1, 1)),  # the text as it is
        ("temperature=0", [400, 100], (1, 4)),  # every language the same weight of text
        ("temperature=0.5", [400, 100], (1, 2)),  # n ** (0.5 - 1): (400 / 100) ** 0.5 = 2
    ],
)
def test_multipliers_of_each_form(text, sizes, multipliers):
    assert Mix.parse(text).multipliers(sizes, ["eng", "hin"]) == multipliers


def test_a_mixture_is_given_as_text_or_as_a_mapping():
    assert Mix.of({"temperature": 0.3}).temperature == 0.3
    assert Mix.of({"eng": 1, "hin": 4}).multipliers([10, 10], ["eng", "hin"]) == (1, 4)
    assert Mix.of("eng=1,hin=4").record() == {"given": "eng=1,hin=4", "weights": {"eng": 1, "hin": 4}}
    assert Mix.of("temperature=0.3").record() == {"given": "temperature=0.3", "temperature": 0.3}


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(1, 10**12), min_size=1, max_size=8),
    st.floats(0, 1, allow_nan=False),
)
def test_temperature_multipliers_are_the_weights_to_a_thousandth(sizes, alpha):
    """Each multiplier over the smallest is n ** (alpha - 1) over the smallest such weight,
    within half a thousandth; the multipliers share no factor and follow the languages' order."""
    codes = [f"l{i}" for i in range(len(sizes))]
    multipliers = Mix.parse(f"temperature={alpha!r}").multipliers(sizes, codes)
    assert all(isinstance(m, int) and m >= 1 for m in multipliers)
    assert math.gcd(*multipliers) == 1
    weights = [Fraction(n ** (alpha - 1)) for n in sizes]
    smallest = min(multipliers)
    for m, w in zip(multipliers, weights, strict=True):
        exact = w / min(weights)  # computed here in floats too: both sides may round in the 13th digit
        assert abs(Fraction(m, smallest) - exact) <= Fraction(1, 2000) + exact * Fraction(1, 10**12)
    reversed_codes = Mix.parse(f"temperature={alpha!r}").multipliers(sizes[::-1], codes)
    assert reversed_codes == multipliers[::-1]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 50), min_size=2, max_size=5))
def test_whole_weights_are_kept_in_their_proportions(weights):
    codes = [f"l{i}" for i in range(len(weights))]
    text = ",".join(f"{c}={w}" for c, w in zip(codes, weights, strict=True))
    divisor = math.gcd(*weights)
    assert Mix.parse(text).multipliers([1] * len(weights), codes) == tuple(w // divisor for w in weights)


@pytest.mark.parametrize("tie_break", ["bytes", "ids"])
@pytest.mark.parametrize("mix", ["eng=1,hin=4,fin=2.5", "temperature=0.3", "temperature=0"])
def test_merges_are_the_reference_trainers_on_counts_multiplied_as_documented(mix, tie_break):
    texts = {"fin": FIN, "eng": ENG, "hin": HIN}
    tok = train(texts=texts, mix=mix, vocab_size=340, pattern="gpt2", tie_break=tie_break)
    codes = sorted(texts)
    sizes = [sum(len(t.encode()) for t in texts[code]) for code in codes]
    if mix.startswith("temperature"):
        alpha = float(mix.split("=")[1])
        multipliers = expected_multipliers([n ** (alpha - 1) for n in sizes], exact=False)
    else:
        weights = dict(part.split("=") for part in mix.split(","))
        multipliers = expected_multipliers([Fraction(weights[code]) for code in codes], exact=True)
    record = tok.manifest.languages
    assert [record.by_language[code]["multiplier"] for code in codes] == multipliers
    weighted: Counter[bytes] = Counter()
    for code, m in zip(codes, multipliers, strict=True):
        for word, count in count_words(texts[code], "gpt2").to_dict().items():
            weighted[word] += count * m
    assert tok.merges == train_reference(dict(weighted), len(tok.merges), tie_break=tie_break)
    assert len(tok.merges) > 40


def test_bytes_per_token_of_a_mixture_are_those_of_the_weighted_text():
    """The manifest's figure weighs each language's bytes and tokens alike: its text encoded by the
    tokenizer, times its multiplier (not weighted tokens over unweighted bytes)."""
    texts = {"eng": ENG, "hin": HIN}
    tok = train(texts=texts, mix="eng=1,hin=3", vocab_size=320, pattern="gpt2")
    multiplier = {"eng": 1, "hin": 3}
    weighted_bytes = sum(multiplier[c] * len(t.encode()) for c in texts for t in texts[c])
    weighted_tokens = sum(multiplier[c] * len(tok.encode(t)) for c in texts for t in texts[c])
    assert tok.manifest.result.tokens == weighted_tokens
    assert tok.manifest.result.bytes_per_token == round(weighted_bytes / weighted_tokens, 4)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "expected temperature=A"),
        ("temperature=x", "expected temperature=A"),
        ("temperature=1.5", "from 0 to 1"),
        ("temperature=-0.1", "from 0 to 1"),
        ("eng", "code=value"),
        ("eng=0", "positive number"),
        ("eng=-1", "positive number"),
        ("eng=abc", "positive number"),
        ("eng=0.0001", "at most three decimals"),
        ("eng=1,eng=2", "eng is given twice"),
        ("Eng=1", "not a language code"),
        ("1ng=1", "not a language code"),
    ],
)
def test_a_bad_mixture_is_refused_in_one_line_naming_it(text, why):
    with pytest.raises(SettingsError) as caught:
        Mix.parse(text)
    assert str(caught.value).startswith("mix: ") and why in str(caught.value) and "\n" not in str(caught.value)


def test_weights_for_a_language_not_trained_on_and_temperature_on_an_empty_language_are_refused():
    with pytest.raises(SettingsError, match="mix: fra is not one of the run's languages"):
        train(texts={"eng": ENG, "hin": HIN}, mix="fra=2", vocab_size=300)
    with pytest.raises(SettingsError, match="mix: temperature needs text in every language; hin has none"):
        Mix.parse("temperature=0.3").multipliers([10, 0], ["eng", "hin"])


def test_weighted_counts_past_what_the_merge_loop_counts_exactly_are_refused():
    words = WordCounts.from_dict({b"ab": 1 << 58, b"cd": 3})
    with pytest.raises(SettingsError, match=r"^mix: the multipliers 1, 16 make the bytes .* past the"):
        weighted_sum([words, words], [1, 16])
    assert weighted_sum([words, words], [1, 2]).to_dict() == {b"ab": 3 << 58, b"cd": 9}
    with pytest.raises(SettingsError, match="^mix: the multipliers 4, 1"):  # from bytes, before counts are read
        check_weighted_bytes([COUNT_LIMIT // 4, 1], [4, 1])
    check_weighted_bytes([COUNT_LIMIT // 4 - 1, 1], [4, 1])

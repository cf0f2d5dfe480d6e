"""Pre-tokenization: the compiled scanners and the counter give exactly what the regexes give."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import regex
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bpe import pretokenize, train
from bpe.engine.scanner import SCANNER_IDS, split_offsets
from bpe.pretokenize import NAMED_PATTERNS, Pretokenizer, scanner_tables
from bpe.training.counting import WordCounter, count_words
from bpe.training.settings import Settings
from tests.conftest import stdlib_paragraphs
from tests.reference import encode_word, train_reference

# Characters where the patterns disagree with each other or with naive splitting: every kind of
# whitespace (including the four separators str.split() knows and regex does not), apostrophes
# and contraction letters (with the long s that case-folds to s), letters of each case class,
# marks, digits of several scripts, CJK, emoji with skin tones and joiners, slashes, punctuation.
TRICKY = list(
    " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
    "'’sStTdDmMlLvVrReEſ/.,!?-_#\"()[]"
    "aBcXyZéÉßÆǅʰ中文日本語한국어ÀÖøДжЖ"
    "0123456789٣²½Ⅻ"
    "\u0301\u0308\u20dd"
    "🙂👍🏽👨‍👩‍👧\u200d"
)
tricky_text = st.text(alphabet=st.sampled_from(TRICKY), max_size=40)
any_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
mixed_text = st.one_of(
    tricky_text,
    any_text,
    st.lists(st.sampled_from(["aaaa", " ", "  ", "\n", "'s", "123", "ab", "!!", ", "])).map("".join),
)

# GPT-2 as released (and as Hugging Face spells it): tiktoken's possessive spelling must agree.
GPT2_RELEASED = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def scan(texts: list[str], name: str) -> list[list[str]]:
    """Pieces per document as the compiled scanner cuts them."""
    encoded = [t.encode() for t in texts]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(b) for b in encoded])
    raw = b"".join(encoded)
    data = np.frombuffer(raw + b"\0", dtype=np.uint8)
    classes, folds = scanner_tables()
    starts, ends = split_offsets(data, offsets, SCANNER_IDS[name], classes, folds)
    pieces: list[list[str]] = [[] for _ in texts]
    doc = 0
    for s, e in zip(starts.tolist(), ends.tolist()):
        while s >= offsets[doc + 1]:
            doc += 1
        pieces[doc].append(raw[s:e].decode())
    return pieces


@settings(max_examples=400, deadline=None)
@given(st.lists(mixed_text, max_size=4))
def test_scanners_cut_exactly_where_the_regexes_do(texts):
    for name in SCANNER_IDS:
        expected = [regex.findall(NAMED_PATTERNS[name], t) for t in texts]
        assert scan(texts, name) == expected, name
    assert scan(texts, "whitespace") == [t.split() for t in texts]


def test_named_patterns_are_tiktokens_own():
    import inspect

    from tiktoken_ext import openai_public

    source = inspect.getsource(openai_public)
    for name in ("gpt2", "cl100k"):
        assert NAMED_PATTERNS[name] in source, name
    for part in NAMED_PATTERNS["o200k"].split("|"):
        assert part in source


@settings(max_examples=200, deadline=None)
@given(mixed_text)
def test_gpt2_pattern_equals_the_released_spelling(text):
    assert regex.findall(NAMED_PATTERNS["gpt2"], text) == regex.findall(GPT2_RELEASED, text)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(mixed_text, st.none()), max_size=6))
def test_counts_equal_running_the_pattern_on_every_document(texts):
    for name in [*SCANNER_IDS, r"\w+|[^\w\s]+"]:
        pre = Pretokenizer(name)
        expected = Counter()
        for t in texts:
            if t is not None:
                expected.update(p.encode() for p in pre.split_ordinary(t))
        counter = WordCounter(pre)
        counter.add_texts(texts)
        assert counter.result().to_dict() == dict(expected), name
        assert counter.stats.null_rows == sum(t is None for t in texts)
        assert counter.stats.pretokens == sum(expected.values())


@settings(max_examples=200, deadline=None)
@given(any_text)
def test_whitespace_pattern_is_str_split(text):
    assert regex.findall(NAMED_PATTERNS["whitespace"], text) == text.split()


def test_counts_on_real_text_equal_the_regex(corpus_rows):
    for name in SCANNER_IDS:
        expected = Counter(p.encode() for t in corpus_rows for p in regex.findall(NAMED_PATTERNS[name], t))
        assert count_words(corpus_rows, name).to_dict() == dict(expected)


def test_special_tokens_are_cut_out_first_and_counted_apart():
    pre = Pretokenizer("gpt2", ["<|endoftext|>", "<|end|>"])
    assert pre.split("a<|endoftext|>b<|end|>") == ["a", "<|endoftext|>", "b", "<|end|>"]
    counter = WordCounter(pre)
    counter.add_texts(["hello<|endoftext|> world", "<|end|><|end|>x", None])
    assert counter.result().to_dict() == {b"hello": 1, b" world": 1, b"x": 1}
    assert counter.stats.special_tokens == {"<|endoftext|>": 1, "<|end|>": 2}
    assert counter.stats.null_rows == 1


def test_longest_special_token_wins():
    pre = Pretokenizer("gpt2", ["<|a|>", "<|a|>b"])
    assert pre.split("x<|a|>by") == ["x", "<|a|>b", "y"]


def test_bad_pattern_and_bad_special_tokens_are_refused():
    import pytest

    with pytest.raises(ValueError, match="^pattern: not a known name"):
        Pretokenizer("([unclosed")
    with pytest.raises(ValueError, match="empty"):
        Pretokenizer("gpt2", [""])
    with pytest.raises(ValueError, match="twice"):
        Pretokenizer("gpt2", ["<s>", "<s>"])


def pieces_by_the_regex(pattern: str, text: str) -> list[str]:
    """How `pattern` cuts `text`, computed apart from the library: a named pattern (or its regex)
    by `regex.findall` (each is a tiktoken pattern, whose matches cover the text) or, for
    `whitespace`, by str.split(); a user's regex by Hugging Face's `Split(regex, "isolated")`."""
    from tokenizers import Regex, pre_tokenizers

    name = next((name for name, known in NAMED_PATTERNS.items() if pattern in (name, known)), None)
    if name == "whitespace":
        return text.split()
    if name is not None:
        return regex.findall(NAMED_PATTERNS[name], text)
    return [piece for piece, _ in pre_tokenizers.Split(Regex(pattern), "isolated").pre_tokenize_str(text)]


@pytest.fixture(scope="module")
def documents() -> list[str]:
    return stdlib_paragraphs()[:150] + ["".join(TRICKY), "It's 2024... naïve café 中文 🙂\n\n  x\ty  "]


# `(?m)` is Oniguruma's (Ruby's) dot-matches-newline, the `regex` module's `(?s)`.
REGEXES = [r"\w+|[^\w\s]+", r"\S+", "(?m).", r"(?m:a.)|\S"]


@pytest.mark.parametrize("pattern", [*NAMED_PATTERNS, *NAMED_PATTERNS.values(), *REGEXES])
def test_patterns_named_or_regexes_train_and_encode_as_the_regex_splits(pattern, documents):
    """Each pattern that never matches the empty string is taken, and means its regex: training
    learns the reference trainer's merges over the regex's pieces, encoding gives the ids of those
    pieces under the merges (a textbook encoder), and decoding gives the pieces back: the text,
    or its words for `whitespace`."""
    tok = train(documents, vocab_size=300, pattern=pattern)
    pieces = {text: pieces_by_the_regex(pattern, text) for text in documents}
    counts = Counter(piece.encode() for text in documents for piece in pieces[text])
    assert tok.merges == train_reference(dict(counts), 300 - 256)
    ranks = {pair: rank for rank, pair in enumerate(tok.merges)}
    for text in documents[:40] + documents[-2:]:
        ids = tok.encode(text)
        assert ids == [i for piece in pieces[text] for i in encode_word(piece.encode(), ranks)], repr(text[:80])
        assert tok.decode(ids) == "".join(pieces[text])
        assert "".join(pieces[text]) == ("".join(text.split()) if tok.pattern == "whitespace" else text)


# `a|` and `x*` match the empty text; `(?=x)`, `\b` and `(?<=\s)` only next to certain characters;
# `a|(?<=a)` only after a first, non-empty match. Hugging Face reads each as places to cut.
MATCHES_EMPTY = ["x*", "a|", "(?=x)", r"\b", r"(?<=\s)", "a|(?<=a)", r"\w+|\s*", "^", r"\w+|(?<=zq)"]


@pytest.mark.parametrize("pattern", MATCHES_EMPTY)
def test_a_pattern_that_can_match_the_empty_string_cuts_there(pattern):
    from tokenizers import Regex, pre_tokenizers

    text = "xx a ab zq zqa\tb"
    expected = [piece for piece, _ in pre_tokenizers.Split(Regex(pattern), "isolated").pre_tokenize_str(text)]
    assert Settings(vocab_size=300, pattern=pattern).pretokenizer.split(text) == expected
    assert "".join(expected) == text
    assert pretokenize.can_match_empty(pattern)


@pytest.mark.parametrize("pattern", [r"\w+", r"a|b+", r"(?:\w|(?<=a)b)+", r"\p{L}+|[^\p{L}]", r"(a)\1?", "x{1,}"])
def test_a_pattern_each_of_whose_alternatives_takes_a_character_never_matches_empty(pattern):
    assert not pretokenize.can_match_empty(pattern)


def test_scanner_tables_are_kept_in_the_kernel_cache_and_a_damaged_copy_is_read_off_again(tmp_path, monkeypatch):
    """Reading the scanners' tables off the `regex` module takes a tenth of a second, so a run
    keeps them in the kernel cache and later runs read them from there: what they read is what
    the `regex` module gives, and a copy cut short is read off again and replaced whole."""
    import bpe.pretokenize as pretokenize

    kept = tmp_path / "tables.npy"
    monkeypatch.setattr(pretokenize, "_tables_file", lambda: kept)
    read_off = pretokenize._read_scanner_tables()
    try:
        for damage in (None, lambda: kept.write_bytes(kept.read_bytes()[:1000]), lambda: kept.write_bytes(b"")):
            if damage is not None:
                damage()
            scanner_tables.cache_clear()
            classes, folds = scanner_tables()
            assert np.array_equal(classes, read_off[0]) and np.array_equal(folds, read_off[1])
            assert np.array_equal(np.load(kept), np.stack(read_off))  # kept whole for the next run
    finally:
        scanner_tables.cache_clear()


# Bytes near the edges of UTF-8: each kind of lead byte, continuation bytes, and the bytes that
# make an overlong form, a surrogate or a code point past U+10FFFF.
utf8_edges = st.lists(
    st.one_of(
        st.sampled_from([0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF]),
        st.sampled_from([0xE0, 0xE1, 0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xFF]),
        st.integers(0, 255),
    ),
    max_size=12,
).map(bytes)


@settings(max_examples=500, deadline=None)
@given(st.one_of(utf8_edges, st.text(max_size=8).map(lambda t: t.encode("utf-8", "surrogatepass"))))
@example(b"\xed\xa0\x80")  # a surrogate, U+D800
@example(b"\xed\x9f\xbf")  # U+D7FF, just below them
@example(b"\xc0\xaf")  # "/" spelt in two bytes (overlong)
@example(b"\xe0\x80\xaf")  # and in three
@example(b"\xf0\x80\x80\xaf")  # and in four
@example(b"\xf4\x90\x80\x80")  # U+110000, past the last code point
@example(b"\xf4\x8f\xbf\xbf")  # U+10FFFF, the last
@example(b"ab\xe2\x82")  # a character cut short at the end
def test_the_scanners_decoder_takes_exactly_what_python_decodes_as_utf8(data):
    """Counting reads Parquet's strings unchecked and relies on this decoder to refuse what is not
    UTF-8: it must agree with Python's decoder on every byte string, and decode what it takes to
    the same code points."""
    from bpe.engine.scanner import decode_utf8

    try:
        expected = [ord(c) for c in data.decode("utf-8")]
    except UnicodeDecodeError:
        expected = None
    array = np.frombuffer(b"<" + data + b">", dtype=np.uint8)  # bytes around it: the end is the end given
    cps, byte_pos = np.empty(len(data) + 1, np.int32), np.empty(len(data) + 2, np.int64)
    n = decode_utf8(array, 1, 1 + len(data), cps, byte_pos)
    assert (None if n < 0 else cps[:n].tolist()) == expected

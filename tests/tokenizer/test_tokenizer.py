"""Encode and decode, and agreement with Hugging Face `tokenizers` and tiktoken on the exported
files; text that is not Unicode (a lone surrogate) is refused in one line, or replaced when asked."""

from __future__ import annotations

import pytest
import tiktoken
from hypothesis import given, settings
from tiktoken.load import load_tiktoken_bpe
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, pre_tokenizers

from bpe import Tokenizer, train
from bpe.errors import BpeError, InputError, SettingsError, SpecialTokenError
from bpe.formats.spelling import bytes_to_unicode, spell, unspell
from bpe.formats.tiktoken_ranks import TIKTOKEN_FILE
from bpe.tokenizer.conversions import tiktoken_pattern
from tests.conftest import GPT2, WHITESPACE, stdlib_paragraphs
from tests.conftest import any_text as any_text_of

any_text = any_text_of("ab1 ")
SAMPLE_TEXTS = [
    "Hello world!  It's 2024... naïve café 中文 🙂\n\n  x",
    "   leading and trailing spaces   ",
    "tabs\tand\r\nnewlines\n\n\nend\n ",
    "numbers 1234567 and 3.14159, emoji 👨‍👩‍👧 and marks é",
    "CamelCase WordPress HTTPServer I'M YOU'RE we'll they'VE",
    "",
]


# A user's regex too: one that leaves the text between its matches (spaces, symbols) as pieces, with groups.
@pytest.fixture(scope="module", params=["gpt2", "cl100k", "o200k", "whitespace", r"(\p{L}+)|(\d)"])
def trained(request, corpus_rows, tmp_path_factory):
    """A tokenizer trained on real text and saved; the same text is used to compare encoders."""
    tok = train(corpus_rows[:1500], vocab_size=1000, pattern=request.param, special_tokens=["<|endoftext|>", "<|pad|>"])
    out = tmp_path_factory.mktemp(f"tok-{request.param}") / "tok"
    tok.save(out)
    return tok, out


def hf(out) -> HFTokenizer:
    return HFTokenizer.from_file(str(out / "tokenizer.json"))


def tiktoken_encoding(tok: Tokenizer, out) -> tiktoken.Encoding:
    ranks = load_tiktoken_bpe(str(out / TIKTOKEN_FILE))
    return tiktoken.Encoding("t", pat_str=tiktoken_pattern(tok.pretokenizer), mergeable_ranks=ranks, special_tokens={})


def kept(tok: Tokenizer, text: str) -> str:
    """What decoding gives back: the text, or for the whitespace pattern (str.split()) its words."""
    return "".join(text.split()) if tok.pretokenizer.pattern == "whitespace" else text


def test_three_encoders_agree_on_real_and_tricky_text(trained, corpus_rows):
    tok, out = trained
    loaded = Tokenizer.load(out)
    hf_tok, tk = hf(out), tiktoken_encoding(tok, out)
    for text in SAMPLE_TEXTS + corpus_rows[1500:2300] + [f"a{space}b {space}{space}c" for space in WHITESPACE]:
        ours = loaded.encode(text)
        assert ours == hf_tok.encode(text).ids == tk.encode_ordinary(text), repr(text)
        assert loaded.decode(ours) == kept(tok, text)


@settings(max_examples=300, deadline=None)
@given(any_text)
def test_three_encoders_agree_on_any_string(trained, text):
    tok, out = trained
    if any(s in text for s in tok.special_tokens):
        return
    ours = tok.encode(text)
    assert ours == hf(out).encode(text).ids == tiktoken_encoding(tok, out).encode_ordinary(text)


@settings(max_examples=300, deadline=None)
@given(any_text)
def test_round_trip_of_any_string(trained, text):
    tok, _ = trained
    assert tok.decode(tok.encode(text, special_as_text=True)) == kept(tok, text)


def test_python_encoder_equals_tiktoken(trained, corpus_rows):
    tok, _ = trained
    for text in SAMPLE_TEXTS + corpus_rows[2300:2500]:
        assert tok._encoder.encode_python(text, set()) == tok.encode(text, special_as_text=True)


def test_special_tokens(trained):
    tok, out = trained
    eot, pad = tok.special_tokens["<|endoftext|>"], tok.special_tokens["<|pad|>"]
    assert (eot, pad) == (998, 999) and tok.vocab_size == 1000
    ids = tok.encode("a<|endoftext|>b", allowed_special="all")
    assert ids[1] == eot and tok.decode(ids) == "a<|endoftext|>b"
    assert hf(out).encode("a<|endoftext|>b").ids == ids
    with pytest.raises(SpecialTokenError, match="<\\|pad\\|>"):
        tok.encode("x<|pad|>", allowed_special={"<|endoftext|>"})
    as_text = tok.encode("x<|pad|>", allowed_special={"<|endoftext|>"}, special_as_text=True)
    assert pad not in as_text and tok.decode(as_text) == "x<|pad|>"
    assert tok.encode_ordinary("<|endoftext|>") == tok.encode("<|endoftext|>", allowed_special=(), special_as_text=True)
    assert len(tok.encode_ordinary("<|endoftext|>")) > 1


def test_whitespace_pattern_agrees_with_hugging_face(corpus_rows, tmp_path):
    tok = train(corpus_rows[:800], vocab_size=600, pattern="whitespace")
    tok.save(tmp_path / "ws")
    hf_tok = hf(tmp_path / "ws")
    for text in corpus_rows[800:1000] + ["a\x1cb  c\u3000d"]:
        assert tok.encode(text) == hf_tok.encode(text).ids


def test_gpt2_spelling_round_trips_every_byte():
    table = bytes_to_unicode()
    assert len(set(table.values())) == 256 and table[ord(" ")] == "Ġ"
    every = bytes(range(256))
    assert unspell(spell(every)) == every


@pytest.fixture(scope="module")
def gpt2_dir():
    if not (GPT2 / "vocab.json").exists():
        pytest.skip(f"GPT-2 files not found at {GPT2}")
    return GPT2


def test_gpt2_files_give_hugging_face_ids(gpt2_dir, corpus_rows):
    ours = Tokenizer.load(gpt2_dir)
    reference = HFTokenizer(models.BPE.from_file(str(gpt2_dir / "vocab.json"), str(gpt2_dir / "merges.txt")))
    reference.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    assert ours.special_tokens == {"<|endoftext|>": 50256} and ours.vocab_size == 50257
    for text in SAMPLE_TEXTS + corpus_rows[:400]:
        ids = ours.encode(text, special_as_text=True)
        assert ids == reference.encode(text).ids, repr(text)
        assert ours.decode(ids) == text
    assert ours.encode("Hello<|endoftext|>", allowed_special="all")[-1] == 50256


def test_loading_a_directory_without_a_tokenizer_fails_clearly(tmp_path):
    with pytest.raises(FileNotFoundError, match="holds no tokenizer"):
        Tokenizer.load(tmp_path)


# -- ergonomics: names and behaviour as in tiktoken and Hugging Face ------------------------------


def test_sizes_and_vocabulary_match_hugging_face_and_tiktoken(trained):
    tok, out = trained
    hf_tok = hf(out)
    reference = tiktoken.Encoding(
        "t",
        pat_str=tok.pretokenizer.regex,
        mergeable_ranks=load_tiktoken_bpe(str(out / TIKTOKEN_FILE)),
        special_tokens=tok.special_tokens,
    )
    assert len(tok) == tok.vocab_size == hf_tok.get_vocab_size() == 1000
    assert tok.n_vocab == reference.n_vocab and tok.max_token_value == reference.max_token_value
    assert tok.get_vocab() == hf_tok.get_vocab()
    ordinary = {s: i for s, i in hf_tok.get_vocab().items() if s not in tok.special_tokens}
    assert tok.get_vocab(with_added_tokens=False) == ordinary
    assert tok.id_to_token(-1) is None
    for token_id in [0, 32, 255, 256, 500, 997, 998, 999, 1000]:
        assert tok.id_to_token(token_id) == hf_tok.id_to_token(token_id), token_id
    for spelling in ["Ġthe", "the", "<|pad|>", "<|endoftext|>", "Ġ", "not-a-token-xyz", "中", "ä¸Ń"]:
        assert tok.token_to_id(spelling) == hf_tok.token_to_id(spelling), spelling
    assert tok.eot_token == reference.eot_token == tok.special_tokens["<|endoftext|>"]
    assert tok.special_tokens_set == reference.special_tokens_set
    ranks = reference._mergeable_ranks
    tokens = [t for t in [b" the", b"a", " th", "th", b"he"] if (t if isinstance(t, bytes) else t.encode()) in ranks]
    tokens.append("<|pad|>")
    assert len(tokens) >= 3
    for piece in tokens:
        assert tok.encode_single_token(piece) == reference.encode_single_token(piece)
    with pytest.raises(KeyError):
        tok.encode_single_token("definitely not one token")
    assert tok.decode_single_token_bytes(tok.special_tokens["<|pad|>"]) == b"<|pad|>"


def test_batches_equal_tiktoken_batches_and_single_calls(trained, corpus_rows):
    tok, out = trained
    reference = tiktoken_encoding(tok, out)
    texts = corpus_rows[2500:2700] + SAMPLE_TEXTS
    expected = reference.encode_ordinary_batch(texts, num_threads=2)
    assert tok.encode_ordinary_batch(texts, num_threads=2) == expected
    assert tok.encode_batch(texts, num_threads=2) == [tok.encode(t) for t in texts] == expected
    assert tok.decode_batch(expected, num_threads=2) == reference.decode_batch(expected)
    mixed = ["a<|endoftext|>b", "x<|pad|>"]
    assert tok.encode_batch(mixed, allowed_special="all") == [hf(out).encode(t).ids for t in mixed]
    with pytest.raises(SpecialTokenError):
        tok.encode_batch(mixed, allowed_special={"<|endoftext|>"})


def test_batches_without_tiktoken_use_a_thread_pool(trained, corpus_rows):
    """The plain encoder (where tiktoken cannot take a tokenizer) gives the same batches."""
    tok, out = trained
    plain = Tokenizer(tok.merges, tok.pattern, tok.special_tokens)
    plain._encoder.encoding = False  # as when tiktoken cannot compile the pattern
    texts = corpus_rows[2700:2760] + SAMPLE_TEXTS
    expected = tiktoken_encoding(tok, out).encode_ordinary_batch(texts)
    assert plain.encode_ordinary_batch(texts, num_threads=2) == expected
    assert plain.decode_batch(expected, num_threads=2) == [tok.decode(ids) for ids in expected]


def test_batch_arguments_are_checked(trained):
    tok, _ = trained
    with pytest.raises(SettingsError, match="^texts: expected a list of strings, got one str"):
        tok.encode_batch("one string")
    with pytest.raises(SettingsError, match="^num_threads: expected an integer >= 1, got 0"):
        tok.encode_ordinary_batch(["a"], num_threads=0)
    with pytest.raises(InputError, match="^token id 5000 is not in this tokenizer's vocabulary"):
        tok.decode_batch([[1, 2], [5000]])
    assert tok.encode_batch([]) == [] and tok.decode_batch([[]]) == [""]


def test_equality_and_repr(trained):
    tok, out = trained
    loaded = Tokenizer.load(out)
    assert loaded == tok and loaded is not tok
    assert Tokenizer(tok.merges[:-1], tok.pattern, list(tok.special_tokens)) != tok  # one merge fewer
    assert Tokenizer(tok.merges, "gpt2" if tok.pattern != "gpt2" else "cl100k", list(tok.special_tokens)) != tok
    assert Tokenizer(tok.merges, tok.pattern, list(reversed(tok.special_tokens))) != tok  # ids swapped
    assert Tokenizer(tok.merges, tok.pattern, tok.special_tokens, special_token_roles={"pad": "<|pad|>"}) != tok
    assert tok != "not a tokenizer"
    text = repr(tok)
    assert text.startswith("Tokenizer(vocab_size=1000, pattern=") and f"{tok.pattern!r}" in text
    assert "'<|endoftext|>': 998" in text and "'<|pad|>': 999" in text
    long_regex = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|\p{L}+|\p{N}{1,3}|[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
    custom = Tokenizer([], long_regex, [f"<|t{i}|>" for i in range(10)])
    assert custom.pattern == long_regex and long_regex not in repr(custom)  # abridged: a repr is one short line
    assert '..."' in repr(custom) and "(10 in all)" in repr(custom) and len(repr(custom)) < 240


def test_a_tokenizer_built_from_merges_splits_as_the_trainer_does_by_default():
    paragraphs = stdlib_paragraphs()[:600]
    tok = train(paragraphs, vocab_size=600)  # no pattern named
    rebuilt = Tokenizer(tok.merges[:300])
    assert rebuilt.pattern == tok.pattern
    named = Tokenizer(tok.merges[:300], tok.pattern)
    assert [rebuilt.encode(t) for t in paragraphs[:200]] == [named.encode(t) for t in paragraphs[:200]]


# -- text that is not Unicode ---------------------------------------------------------------------


def python_encoded() -> Tokenizer:
    """A tokenizer tiktoken cannot take (two tokens with the same bytes): the Python encoder runs."""
    tok = Tokenizer([(97, 98), (97, 98)], pattern="gpt2")
    assert tok._encoder.tiktoken() is None
    return tok


@pytest.mark.parametrize("encoder", ["tiktoken", "python"])
def test_a_lone_surrogate_is_refused_unless_replaced(encoder):
    tok = train(SAMPLE_TEXTS * 20, vocab_size=400, pattern="gpt2") if encoder == "tiktoken" else python_encoded()
    assert (tok._encoder.tiktoken() is None) == (encoder == "python")
    with pytest.raises(ValueError) as raised:
        tok.encode("ab\ud800c")
    assert isinstance(raised.value, BpeError)
    assert str(raised.value).startswith("text: lone surrogate U+D800 at character 2") and "\n" not in str(raised.value)
    with pytest.raises(BpeError, match="U\\+DC80"):
        tok.encode_ordinary("x\udc80")
    assert tok.encode("ab\ud800c", errors="replace") == tok.encode("ab\ufffdc")
    # Two lone halves are two errors in the text, not one character: each becomes U+FFFD.
    assert tok.encode("\ud83d\ude42", errors="replace") == tok.encode("\ufffd\ufffd") != tok.encode("🙂")
    assert tok.encode_ordinary("x\udc80", errors="replace") == tok.encode_ordinary("x\ufffd")

"""Encode/decode, and agreement with Hugging Face `tokenizers` and tiktoken on the exported files."""

from __future__ import annotations

import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st
from tiktoken.load import load_tiktoken_bpe
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, pre_tokenizers

from bpe import Tokenizer, train
from bpe.errors import SpecialTokenError
from bpe.export import TIKTOKEN_FILE, bytes_to_unicode, spell, unspell
from tests.conftest import GPT2

# Every character some split pattern treats as whitespace (regex's \s, str.split()'s \x1c-\x1f), which
# regex engines disagree on most often, mixed into arbitrary Unicode.
WHITESPACE = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B)))
WHITESPACE += "\u2028\u2029\u202f\u205f\u3000"
any_text = st.text(
    st.one_of(st.characters(exclude_categories=("Cs",)), st.sampled_from(WHITESPACE), st.sampled_from("ab1 ")),
    max_size=60,
)
SAMPLE_TEXTS = [
    "Hello world!  It's 2024... naïve café 中文 🙂\n\n  x",
    "   leading and trailing spaces   ",
    "tabs\tand\r\nnewlines\n\n\nend\n ",
    "numbers 1234567 and 3.14159, emoji 👨‍👩‍👧 and marks é",
    "CamelCase WordPress HTTPServer I'M YOU'RE we'll they'VE",
    "",
]


@pytest.fixture(scope="module", params=["gpt2", "cl100k", "o200k", "whitespace"])
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
    return tiktoken.Encoding("t", pat_str=tok.pretokenizer.regex, mergeable_ranks=ranks, special_tokens={})


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
        assert tok._encode_python(text, set()) == tok.encode(text, special_as_text=True)


def test_special_tokens(trained):
    tok, out = trained
    eot, pad = tok.special_tokens["<|endoftext|>"], tok.special_tokens["<|pad|>"]
    assert (eot, pad) == (998, 999) and tok.vocab_size == 1000
    ids = tok.encode("a<|endoftext|>b")
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
    assert ours.encode("Hello<|endoftext|>")[-1] == 50256


def test_loading_a_directory_without_a_tokenizer_fails_clearly(tmp_path):
    with pytest.raises(FileNotFoundError, match="holds no tokenizer"):
        Tokenizer.load(tmp_path)

"""A user's split regex means what it means in a tokenizer.json: Hugging Face's `Split(regex,
behavior="isolated")`, run by Oniguruma. Its matches and the text between them are the pieces, an
empty match only cuts, a capture group changes nothing; so decoding gives the text back.

Every expectation comes from Hugging Face `tokenizers` (its pieces, its ids on the tokenizer.json
we save) or from the reference trainer fed Hugging Face's pieces, never from our own output. The
regexes are random, from a small grammar: characters and classes, alternation, repetition, groups,
lookarounds (lookbehinds of fixed width, as Oniguruma requires) and anchors.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest
import tiktoken
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tokenizers import Regex, decoders, models, pre_tokenizers, trainers
from tokenizers import Tokenizer as HFTokenizer

from bpe import Tokenizer, pretokenize, train
from bpe.cli import main
from bpe.errors import ExportError, SettingsError
from bpe.formats.hf_json import HF_FILE
from bpe.pretokenize import Pretokenizer
from tests.conftest import WHITESPACE, stdlib_paragraphs
from tests.reference import train_reference

# Where Oniguruma and the `regex` module differ unless rewritten (`oniguruma_regex`): \w and \b
# (the joiners U+200C/D, ²³¹¼½¾), \h, POSIX classes, `^`, `$`, \Z, the inline flag `m`.
ONE_CHAR = ["a", "b", "z", "q", "A", " ", "1", "²", r"\n", ".", r"\w", r"\d", r"\s", r"\W", r"\S", r"\h", r"\H"]
ONE_CHAR += ["[a-c]", "[^a ]", r"[\w-]", r"[^\w\s]", r"[\W]", r"[\h]", r"[^\W\d]", r"\p{L}"]
ONE_CHAR += ["[[:alpha:]]", "[[:space:]]", "[[:digit:]]", "[[:alnum:]]", "[[:word:]]", "[[:^digit:]]"]
ANCHORS = ["^", "$", r"\b", r"\B", r"\A", r"\Z", r"\z"]
QUANTIFIERS = ["*", "+", "?", "{1,2}", "{2}", "*?", "+?", "++"]
one_char = st.sampled_from(ONE_CHAR)
fixed_width = st.lists(one_char, min_size=1, max_size=2).map("".join)


def _grow(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(inner, inner).map("".join),
        st.tuples(inner, inner).map("|".join),
        st.tuples(inner, st.sampled_from(QUANTIFIERS)).map(lambda t: f"(?:{t[0]}){t[1]}"),
        inner.map(lambda r: f"({r})"),
        st.tuples(st.sampled_from(["(?=", "(?!", "(?>", "(?i:", "(?m:"]), inner).map(lambda t: f"{t[0]}{t[1]})"),
        st.tuples(st.sampled_from(["(?<=", "(?<!"]), fixed_width).map(lambda t: f"{t[0]}{t[1]})"),
    )


def oniguruma_compiles(pattern: str) -> bool:
    """Whether Hugging Face can hold the regex at all (Oniguruma refuses a repeated anchor)."""
    try:
        Regex(pattern)
    except Exception:
        return False
    return True


regexes = st.recursive(st.one_of(one_char, st.sampled_from(ANCHORS)), _grow, max_leaves=6).filter(oniguruma_compiles)
# Assigned code points only: engines on different Unicode versions class new characters differently.
texts = st.text(
    st.one_of(
        st.characters(exclude_categories=("Cs", "Cn")),
        st.sampled_from(WHITESPACE),
        st.sampled_from("ab1 zq\n²¼\u200dAZ-"),
    ),
    max_size=40,
)


def hf_pieces(pattern: str, text: str) -> list[str]:
    return [piece for piece, _ in pre_tokenizers.Split(Regex(pattern), behavior="isolated").pre_tokenize_str(text)]


def saved_and_loaded_by_hf(tok: Tokenizer) -> HFTokenizer:
    with tempfile.TemporaryDirectory() as tmp:
        tok.save(Path(tmp) / "tok")
        return HFTokenizer.from_file(str(Path(tmp) / "tok" / HF_FILE))


@settings(max_examples=400, deadline=None)
@given(regexes, texts)
@example(r"[\W]^", "{\n")  # `^` after a newline that ends the text: no line starts there
def test_a_regex_cuts_text_as_hugging_faces_split(pattern, text):
    assert Pretokenizer(pattern).split(text) == hf_pieces(pattern, text)
    # Its spelling for other engines (what to_tiktoken gives tiktoken) cuts alike, read again as ours.
    assert Pretokenizer(pretokenize.oniguruma_regex(pattern)).split(text) == hf_pieces(pattern, text)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(regexes, st.lists(texts, min_size=1, max_size=4), texts)
@example("((?:[[:alpha:]])+)", [""], "Aª")  # a letter beyond ASCII: tiktoken's engine reads POSIX classes as ASCII
@example("[[:space:]]+|[^[:space:]]+", ["a\u3000b"], "x\u3000y")  # an ideographic space
@example(r"[\W]^", ["{\n"], "")  # `^` after the newline that ends a document
def test_ids_are_hugging_faces_on_the_saved_tokenizer_json_for_any_regex(pattern, documents, text):
    documents = [*documents, text, "zq ab  a1 b²"]  # never without text to train on
    tok = train(documents, vocab_size=300, pattern=pattern)
    pieces = Counter(piece.encode() for document in documents for piece in hf_pieces(pattern, document))
    assert tok.merges == train_reference(dict(pieces), len(tok.merges))
    hf = saved_and_loaded_by_hf(tok)
    expected = hf.encode(text).ids
    assert tok.encode(text) == expected
    assert tok.encode_batch([text, *documents])[0] == expected
    assert tok.encode_batch_to_numpy([text])[0].tolist() == expected
    assert tok.decode(expected) == text == hf.decode(expected)
    if pretokenize.can_match_empty(pattern):
        with pytest.raises(ExportError, match="can match the empty string") as raised:
            tok.to_tiktoken()
        assert "\n" not in str(raised.value)
    else:
        encoding = tok.to_tiktoken()
        assert encoding.encode(text) == expected
        assert Tokenizer.from_tiktoken(encoding) == tok


def test_training_on_real_text_counts_hugging_faces_pieces():
    """Groups, gaps (spaces, symbols) and an empty match after each digit, on real prose."""
    pattern = r"(\p{L}+)|(?<=\d)"
    documents = stdlib_paragraphs()[:200]
    tok = train(documents, vocab_size=600, pattern=pattern)
    pieces = Counter(piece.encode() for document in documents for piece in hf_pieces(pattern, document))
    assert tok.merges == train_reference(dict(pieces), 600 - 256)


# -- a user's regex in training, the command, superwords, bases and exports --------------------


def bpe(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bpe.cli", *args], cwd=cwd, capture_output=True, text=True)


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "small.txt"
    path.write_text("\n\n".join(stdlib_paragraphs()[:300]))
    return path


@pytest.mark.parametrize("pattern", [r"\w+", r"(\w+)|(\s+)", r"\w+|(?<=zq)"])
def test_bpe_decode_of_bpe_encode_is_the_text_and_the_ids_are_hugging_faces(corpus_file, tmp_path, pattern):
    """A regex that leaves text between its matches, one with capture groups, one that matches the
    empty string after "zq" only: through the command, as a user runs it."""
    trained = bpe("train", str(corpus_file), "--vocab-size", "400", "--pattern", pattern, "--out", "t", cwd=tmp_path)
    assert trained.returncode == 0 and "Traceback" not in trained.stderr, trained.stderr
    text = "hello world, friend! zq zqa\tb²"
    encoded = bpe("encode", "t", "--text", text, cwd=tmp_path)
    assert encoded.returncode == 0, encoded.stderr
    ids = [int(i) for i in encoded.stdout.split()]
    assert ids == HFTokenizer.from_file(str(tmp_path / "t" / HF_FILE)).encode(text).ids
    decoded = bpe("decode", "t", *map(str, ids), cwd=tmp_path)
    assert decoded.returncode == 0 and decoded.stdout.rstrip("\n") == text


@pytest.mark.parametrize("split", [r"(?<=zq)|\w+", r"(\w+)|(\s+)"])
def test_a_superword_split_that_matches_empty_or_has_groups_gives_hugging_faces_ids(split):
    documents = [f"{p} zq zqa zq, 12" for p in stdlib_paragraphs()[:150]]
    tok = train(documents, vocab_size=700, superwords=True, transition=500, superword_pattern=split)
    hf = saved_and_loaded_by_hf(tok)
    for text in [*documents[:20], "zq a", "zq zqa b\n\n c"]:
        assert tok.encode(text) == hf.encode(text).ids, text
        assert tok.decode(tok.encode(text)) == text


def hf_trained_with_groups(directory: Path) -> Path:
    """A tokenizer.json that Hugging Face trains, whose Split regex has capture groups."""
    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"(\w+)|(\s+)"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    hf.train_from_iterator(stdlib_paragraphs()[:300], trainer)
    path = directory / HF_FILE
    hf.save(str(path))
    return path


def test_a_base_tokenizer_json_whose_split_has_groups_loads_and_extends(tmp_path):
    path = hf_trained_with_groups(tmp_path)
    hf = HFTokenizer.from_file(str(path))
    base = Tokenizer.load(path)
    texts = stdlib_paragraphs()[300:400]
    for text in texts[:30]:
        assert base.encode(text) == hf.encode(text).ids
    extended = train(texts, vocab_size=len(base) + 50, base=path)
    extended_hf = saved_and_loaded_by_hf(extended)
    for text in texts[:30]:
        assert extended.encode(text) == extended_hf.encode(text).ids
        assert extended.decode(extended.encode(text)) == text


def test_a_tiktoken_encoding_whose_pattern_drops_text_is_refused_in_one_line():
    ranks = {bytes([b]): b for b in range(256)}
    encoding = tiktoken.Encoding("words", pat_str=r"\w+", mergeable_ranks=ranks, special_tokens={})
    with pytest.raises(ExportError) as raised:
        Tokenizer.from_tiktoken(encoding)
    message = str(raised.value)
    assert message.startswith("tiktoken encoding 'words': its split pattern leaves text unmatched ('!"), message
    assert "\n" not in message


def test_a_posix_class_tiktoken_reads_as_ascii_is_refused_for_tiktoken_in_one_line():
    """Oniguruma reads [[:cntrl:]] as Unicode's; tiktoken's engine as ASCII's, and no Unicode class
    spells it for that engine: the tokenizer trains and saves, but makes no tiktoken encoding (nor
    tokenizer.tiktoken) rather than one that splits otherwise."""
    tok = train(["a\x85b\tc", "plain text"], vocab_size=260, pattern="[[:cntrl:]]+|[^[:cntrl:]]+")
    with pytest.raises(ExportError) as raised:
        tok.to_tiktoken()
    message = str(raised.value)
    assert message == (
        "tiktoken cannot split as this tokenizer does: its pattern uses [:cntrl:], which tiktoken's regex engine "
        "reads as ASCII only"
    )


@pytest.mark.parametrize("pattern", ["[[:punct:]]+", r"\w+|[[:^word:]]", r"[\H\s]+", "(?s).", r"(?a:\w)+|\s"])
def test_a_regex_oniguruma_reads_otherwise_is_refused_in_one_line_before_counting(tmp_path, capsys, pattern):
    (tmp_path / "a.txt").write_text("some text, to count!\n" * 20)
    argv = ["train", str(tmp_path / "a.txt"), "--vocab-size", "300", "--pattern", pattern, "--out", str(tmp_path / "t")]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"bpe: error: --pattern: {pattern!r} holds ") and err.count("\n") == 1, err
    assert "does not read as the `regex` module does" in err and not (tmp_path / "t").exists()
    with pytest.raises(SettingsError, match=r"^superword_pattern: .* does not read as"):
        train(["a b"], vocab_size=300, superwords=True, transition=280, superword_pattern=pattern)


@pytest.mark.parametrize("flags", ["(?s)", "(?a:", "(?u)", "(?d)", "(?is)"])
def test_inline_flags_are_refused_exactly_where_hugging_face_refuses_them(flags):
    """Oniguruma reads Ruby's inline flags (i, m, x) and refuses the `regex` module's others: a
    tokenizer.json holding one could never be loaded by Hugging Face."""
    pattern = flags + r"\w+)" if flags.endswith(":") else flags + r"\w+"
    with pytest.raises(Exception, match="undefined group option"):
        pre_tokenizers.Split(Regex(pattern), behavior="isolated")
    with pytest.raises(SettingsError, match=r"^pattern: .* holds the inline flag"):
        train(["a b"], vocab_size=300, pattern=pattern)
    kept = flags.replace("s", "m").replace("a", "i").replace("u", "x").replace("d", "i")
    pattern = kept + r"\w+)" if kept.endswith(":") else kept + r"\w+"
    pre_tokenizers.Split(Regex(pattern), behavior="isolated")
    train(["a b"], vocab_size=300, pattern=pattern)


def test_the_whitespace_pattern_drops_whitespace_as_str_split_and_hugging_face_do():
    tok = train(["a b  c\td"] * 3, vocab_size=260, pattern="whitespace")
    text = "a b  c\td e"
    assert tok.encode(text) == saved_and_loaded_by_hf(tok).encode(text).ids
    assert tok.decode(tok.encode(text)) == "".join(text.split())


def test_a_custom_pattern_tokenizer_json_round_trips(tmp_path):
    """Saved and loaded, the regex is the same: tokenizer.json holds it as it was given."""
    tok = train(["a bc, d"] * 5, vocab_size=270, pattern=r"(\w)+|(?<=,)")
    tok.save(tmp_path / "tok")
    assert json.loads((tmp_path / "tok" / HF_FILE).read_text())["pre_tokenizer"]["pretokenizers"][0] == {
        "type": "Split",
        "pattern": {"Regex": r"(\w)+|(?<=,)"},
        "behavior": "Isolated",
        "invert": False,
    }
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / HF_FILE).write_bytes((tmp_path / "tok" / HF_FILE).read_bytes())
    assert Tokenizer.load(alone) == Tokenizer.load(tmp_path / "tok") == Tokenizer(tok.merges, r"(\w)+|(?<=,)")

"""Superword tokenizers (SuperBPE): ordinary BPE up to the transition, then merges across words.

The oracle is the reference trainer run twice: on the words the run's pattern cuts up to the
transition, then on the pieces the superword split cuts (as Hugging Face's `Split(...,
"isolated")` cuts them, written out in `tests/reference.py`), after replaying the first stage's
merges, with the paper's rules (at most `max_words` words, no ": "). Exports are checked against
Hugging Face `tokenizers` and tiktoken reading the saved files.
"""

from __future__ import annotations

import functools
import json
import unicodedata
from collections import Counter

import pytest
import regex
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st
from tiktoken.load import load_tiktoken_bpe
from tokenizers import Regex, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer

from bpe import Tokenizer, train
from bpe.cli import main
from bpe.errors import SettingsError
from bpe.formats.hf_json import HF_FILE
from bpe.formats.tiktoken_ranks import TIKTOKEN_FILE
from bpe.pretokenize import NAMED_PATTERNS, SUPERBPE_SPLIT
from tests.conftest import any_text, stdlib_paragraphs
from tests.reference import isolated_split, train_reference, words_in

# Letters, spaces, a colon and other symbols, digits: every rule of the superword split and of the
# merges shows up in a few characters.
documents = st.lists(st.text(st.sampled_from("ab a b:,.!1 \n"), min_size=1, max_size=30), min_size=1, max_size=10)


def stage_counts(texts: list[str], split) -> dict[bytes, int]:
    return dict(Counter(piece.encode() for text in texts for piece in split(text)))


def superword_reference(
    texts: list[str], transition: int, vocab_size: int, pattern: str = "cl100k", **rules
) -> list[tuple[int, int]]:
    """The two stages with the reference trainer: `transition - 256` merges on the pattern's words,
    then the rest on the superword split's pieces after replaying those."""
    subwords = stage_counts(texts, regex.compile(NAMED_PATTERNS[pattern]).findall)
    tie_break = rules.pop("tie_break", "bytes")
    first = train_reference(subwords, transition - 256, tie_break)
    pieces = stage_counts(texts, lambda text: isolated_split(SUPERBPE_SPLIT, text))
    return train_reference(pieces, vocab_size - 256 - len(first), tie_break, base=first, **rules)


def superword_train(texts: list[str], transition: int, vocab_size: int, **options) -> Tokenizer:
    """`train()`'s superword run, its arguments as `superword_reference` takes them."""
    return train(texts, vocab_size=vocab_size, superwords=True, transition=transition, **options)


def assigned_text(extra: str) -> st.SearchStrategy[str]:
    """`any_text` less unassigned code points, which regex engines on different Unicode versions
    class differently (as in tests/training/test_peers.py)."""
    return any_text(extra).filter(lambda text: all(unicodedata.category(c) != "Cn" for c in text))


@settings(max_examples=200, deadline=None)
@given(assigned_text(":,. 1a"))
def test_the_superword_split_is_hugging_faces_isolated_split(text):
    """One pattern, read as every match a piece, cuts text as the paper's Split does in Hugging Face."""
    hf = pre_tokenizers.Split(Regex(SUPERBPE_SPLIT), behavior="isolated")
    expected = [piece for piece, _ in hf.pre_tokenize_str(text)]
    assert regex.findall(NAMED_PATTERNS["superbpe"], text) == expected == isolated_split(SUPERBPE_SPLIT, text)


@settings(max_examples=150, deadline=None)
@given(
    documents,
    st.integers(0, 12),
    st.integers(0, 25),
    st.sampled_from([None, 1, 2, 4]),
    st.booleans(),
    st.sampled_from(["bytes", "ids"]),
    st.integers(1, 3),
)
def test_superword_merges_are_the_reference_after_replaying_the_first_stage(
    texts, first, second, max_words, colon_space, tie_break, threads
):
    transition, vocab_size = 256 + first, 256 + first + second
    rules = dict(max_words=max_words, colon_space=colon_space, tie_break=tie_break)
    tok = superword_train(texts, transition, vocab_size, threads=threads, **rules)
    assert tok.merges == superword_reference(texts, transition, vocab_size, **rules)


@pytest.fixture(scope="module")
def paragraphs() -> list[str]:
    return stdlib_paragraphs()[:600]


@pytest.fixture(scope="module")
def superword_tok(paragraphs, tmp_path_factory) -> tuple[Tokenizer, object]:
    tok = train(
        paragraphs, vocab_size=1500, superwords=True, transition=900, special_tokens=["<|endoftext|>"], max_words=3
    )
    out = tmp_path_factory.mktemp("superwords") / "tok"
    tok.save(out)
    return tok, out


def test_on_real_text_superwords_cross_words_within_the_rules(superword_tok, paragraphs):
    tok, _ = superword_tok
    first_stage = [tok.vocab[i] for i in range(256, 900)]
    second_stage = [tok.vocab[i] for i in range(900, 256 + len(tok.merges))]
    assert all(words_in(token) <= 1 for token in first_stage if not token.isspace())  # subwords stay in one word
    assert sum(words_in(token) >= 2 for token in second_stage) >= 50  # superwords such as b" of the"
    assert max(words_in(token) for token in second_stage) == 3  # max_words=3
    assert not any(b": " in token for token in tok.vocab)
    assert tok.pattern == "superbpe"
    stages = tok.manifest["superwords"]
    assert stages["transition"] == 900 and [s["merges"] for s in stages["stages"]] == [644, 600 - 1]
    assert stages["stages"][1]["unique_words"] < stages["stages"][0]["unique_words"]  # whole phrases


def test_the_colon_rule_and_max_words_are_settings():
    texts = ["Note: one two three four five six seven", "Args: one two three four five six seven"] * 20
    strict = train(texts, vocab_size=400, superwords=True, transition=300)
    loose = train(texts, vocab_size=400, superwords=True, transition=300, colon_space=True, max_words=None)
    assert not any(b": " in token for token in strict.vocab) and any(b": " in token for token in loose.vocab)
    assert max(map(words_in, strict.vocab)) == 4 and max(map(words_in, loose.vocab)) == 8  # "Note: one ... seven"
    recorded = loose.manifest["settings"]
    assert recorded["colon_space"] is True and recorded["max_words"] is None and recorded["superwords"] is True
    assert "superwords" not in train(texts, vocab_size=300).manifest["settings"]  # plain runs record none


def test_a_custom_superword_split_is_read_as_hugging_face_reads_it(paragraphs):
    """`superword_pattern` is a Split regex: its matches and the text between them are the pieces."""
    split = r"\d+|[.!?]"  # sentences between numbers and full stops
    tok = train(paragraphs[:200], vocab_size=900, superwords=True, transition=600, superword_pattern=split)
    pieces = stage_counts(paragraphs[:200], lambda text: isolated_split(split, text))
    subwords = stage_counts(paragraphs[:200], regex.compile(NAMED_PATTERNS["cl100k"]).findall)
    first = train_reference(subwords, 600 - 256)
    assert tok.merges == train_reference(pieces, 900 - 256 - len(first), base=first, max_words=4, colon_space=False)
    assert tok.encode("It is 12 of them. Yes!") == tok.to_tiktoken().encode("It is 12 of them. Yes!")


def test_stage_two_alone_extends_an_existing_tokenizer(paragraphs):
    """The paper's third script: superwords on top of a tokenizer, the transition at its size."""
    base = train(paragraphs[300:], vocab_size=700)
    tok = train(paragraphs[:300], vocab_size=1000, base=base, superwords=True, transition=700)
    assert tok.merges[:444] == base.merges
    pieces = stage_counts(paragraphs[:300], lambda text: isolated_split(SUPERBPE_SPLIT, text))
    assert tok.merges == train_reference(pieces, 300, base=base.merges, max_words=4, colon_space=False)
    assert [stage["merges"] for stage in tok.manifest.superwords.stages] == [0, 300]


@settings(max_examples=200, deadline=None)
@given(assigned_text(":,. 1a<|>"))
def test_a_superword_tokenizer_round_trips_and_its_exports_give_its_ids(superword_tok, text):
    tok, out = superword_tok
    ids = tok.encode(text, allowed_special="all")
    assert tok.decode(ids) == text
    hf = _hf(out)
    assert hf.encode(text, add_special_tokens=False).ids == ids
    assert _tiktoken(out, tok).encode(text, allowed_special="all") == ids


def test_exports_give_its_ids_on_real_text_and_transformers_reads_it(superword_tok, paragraphs):
    import transformers

    tok, out = superword_tok
    texts = stdlib_paragraphs()[600:900]
    ids = tok.encode_batch(texts)
    assert any(len(tok.vocab[i].split()) >= 2 for row in ids for i in row)  # superwords are used
    assert [e.ids for e in _hf(out).encode_batch(texts, add_special_tokens=False)] == ids
    assert _tiktoken(out, tok).encode_ordinary_batch(texts) == ids
    auto = transformers.AutoTokenizer.from_pretrained(str(out))
    assert [auto.encode(text, add_special_tokens=False) for text in texts[:50]] == ids[:50]
    document = json.loads((out / HF_FILE).read_text(encoding="utf-8"))
    split = document["pre_tokenizer"]["pretokenizers"][0]
    assert split["pattern"]["Regex"] == SUPERBPE_SPLIT and split["behavior"] == "Isolated"  # the paper's own form
    assert Tokenizer.load(out / HF_FILE) == Tokenizer.load(out) == tok


def test_a_tokenizer_json_split_with_text_between_matches_loads_as_hugging_face_cuts_it(paragraphs, tmp_path):
    """A tokenizer.json made by the paper's recipe (a Split that keeps words between its matches)
    encodes as Hugging Face does: the text between the matches is not dropped."""
    from tokenizers import models, trainers

    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SUPERBPE_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    hf.decoder = __import__("tokenizers").decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=800, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    hf.train_from_iterator(paragraphs, trainer)
    hf.save(str(tmp_path / HF_FILE))
    tok = Tokenizer.load(tmp_path / HF_FILE)
    for text in stdlib_paragraphs()[600:700] + ["by the way, 1234 things!!  ok"]:
        assert tok.encode(text) == hf.encode(text, add_special_tokens=False).ids


@functools.cache
def _hf(out) -> HFTokenizer:
    return HFTokenizer.from_file(str(out / HF_FILE))


def _tiktoken(out, tok: Tokenizer) -> tiktoken.Encoding:
    """tiktoken reading the saved ranks with its own loader, split by the superword pattern."""
    return _tiktoken_of(out, tuple(tok.special_tokens.items()))


@functools.cache
def _tiktoken_of(out, special_tokens: tuple) -> tiktoken.Encoding:
    ranks = load_tiktoken_bpe(str(out / TIKTOKEN_FILE))
    return tiktoken.Encoding(
        "superwords", pat_str=NAMED_PATTERNS["superbpe"], mergeable_ranks=ranks, special_tokens=dict(special_tokens)
    )


@pytest.mark.parametrize(
    "options, message",
    [
        ({"superwords": True}, "^transition: a superword run needs"),
        ({"transition": 300}, "^transition: only a superword run"),
        ({"superwords": True, "transition": 255}, "^transition: expected a vocabulary size >= 256"),
        ({"superwords": True, "transition": 600}, r"^transition: expected a vocabulary size from 256 .* to 500"),
        ({"superwords": True, "transition": 300, "max_words": 0}, "^max_words: expected an integer >= 1"),
        ({"superwords": True, "transition": 300, "superword_pattern": "("}, "^superword_pattern: not a known name"),
    ],
)
def test_bad_superword_settings_are_one_line_naming_the_setting(options, message):
    with pytest.raises(SettingsError, match=message):
        train(["some text"], vocab_size=500, **options)


def test_the_command_trains_superwords_and_reports_both_stages(tmp_path, capsys, paragraphs):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(paragraphs[:300]), encoding="utf-8")
    out = tmp_path / "tok"
    argv = ["train", str(corpus), "--text-format", "lines", "--vocab-size", "900", "--out", str(out)]
    assert main([*argv, "--superwords", "--transition", "600", "--max-words", "2", "--colon-space"]) == 0
    printed = capsys.readouterr().out
    assert "stages    subwords 344 merges to 600 tokens" in printed and "then superwords 300 merges" in printed
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["settings"]["max_words"] == 2 and manifest["settings"]["colon_space"] is True
    tok = Tokenizer.load(out)
    assert max(map(words_in, tok.vocab)) == 2 and tok.pattern == "superbpe"
    base = tmp_path / "base"
    assert main([*argv[:-1], str(base), "--vocab-size", "600", "--quiet"]) == 0
    on_base = [*argv[:-1], str(tmp_path / "on-base"), "--from", str(base), "--superwords", "--transition", "600"]
    assert main(on_base) == 0
    assert "stages    subwords 0 merges to 600 tokens" in capsys.readouterr().out  # superwords on the base alone
    assert main([*argv[:-1], str(tmp_path / "other"), "--transition", "600"]) == 1
    assert capsys.readouterr().err.strip() == "bpe: error: --transition: only a superword run has one (--superwords)"


# -- a run its rules stop below the vocabulary size says so ------------------------------------------


def stopped_early_warnings(run) -> list[str]:
    """The warnings `run()` gives (each a `bpe.errors.StoppedEarly`, which callers can filter)."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run()
    assert all(w.category.__name__ == "StoppedEarly" and issubclass(w.category, UserWarning) for w in caught)
    return [str(w.message) for w in caught]


@settings(max_examples=100, deadline=None)
@given(documents, st.integers(0, 12), st.integers(0, 40), st.sampled_from([None, 1, 2]), st.booleans())
def test_a_superword_run_warns_exactly_when_it_stops_below_the_vocabulary_size(
    texts, first, second, max_words, colon_space
):
    """The reference trainer with the same rules says whether pairs ran out (or only refused ones
    were left) before the vocabulary was full: then, and only then, train() warns, in one line."""
    transition, vocab_size = 256 + first, 256 + first + second
    rules = dict(max_words=max_words, colon_space=colon_space)
    expected = superword_reference(texts, transition, vocab_size, **rules)
    made = []

    def run() -> None:
        made.append(superword_train(texts, transition, vocab_size, **rules))

    warned = stopped_early_warnings(run)
    assert made[0].merges == expected
    if len(expected) < vocab_size - 256:
        assert len(warned) == 1 and "\n" not in warned[0]
        assert warned[0].endswith(f"after {len(expected):,} merges; the vocabulary is smaller than asked")
    else:
        assert warned == []


def test_a_superword_run_its_rules_stop_far_below_the_vocabulary_size_says_so(tmp_path, capsys, paragraphs):
    """With at most one word per token, the superword stage soon has only pairs across words left:
    the reference trainer with the rules stops where ours does, and without them it would go on.
    The command says so in one warning line, naming the flags; train() warns, naming the parameters."""
    texts = paragraphs[:20]
    rules = dict(max_words=1, colon_space=False)
    ours = []
    warned = stopped_early_warnings(
        lambda: ours.append(train(texts, vocab_size=2000, superwords=True, transition=400, **rules))
    )
    expected = superword_reference(texts, 400, 2000, **rules)
    assert ours[0].merges == expected and len(expected) < (2000 - 256) // 2  # far below
    assert len(superword_reference(texts, 400, 2000, max_words=2, colon_space=False)) > len(expected)
    assert warned == [
        f'only pairs that the superword rules refuse (at most 1 word(s) by max_words, no ": " without colon_space) '
        f"were left after {len(expected):,} merges; the vocabulary is smaller than asked"
    ]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts), encoding="utf-8")
    argv = ["train", str(corpus), "--vocab-size", "2000", "--superwords"]
    assert main([*argv, "--transition", "400", "--max-words", "1", "--out", str(tmp_path / "tok"), "--quiet"]) == 0
    assert capsys.readouterr().err == (
        'bpe: warning: only pairs that the superword rules refuse (at most 1 word(s) by --max-words, no ": " '
        f"without --colon-space) were left after {len(expected):,} merges; the vocabulary is smaller than asked\n"
    )
    assert Tokenizer.load(tmp_path / "tok").merges == expected

"""Special tokens in text: refused by default, as tiktoken refuses them, naming the token (and the
text of a batch, the file and document of `bpe encode`); encoded as the special token when allowed
(`allowed_special`, `--allow-special`) and as ordinary text when asked (`special_as_text`,
`--special-as-text`), with tiktoken's ids on the same ranks. A special token spelled like a byte is
refused before any counting."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bpe import Tokenizer, pretokenize, train
from bpe.cli import main
from bpe.errors import SettingsError, SpecialTokenError
from tests.conftest import stdlib_paragraphs, write_parquet

BIN = Path(sys.executable).parent
EOT = "<|endoftext|>"


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    """A tokenizer trained with the default pattern and two special tokens."""
    return train(stdlib_paragraphs()[:1500], vocab_size=800, special_tokens=[EOT, "<|pad|>"])


def bpe(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "bpe"), *args], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=300)


# -- in the library --------------------------------------------------------------------------------


def test_special_token_text_is_refused_by_default_as_tiktoken_refuses_it(tok):
    text = f"user input {EOT} more"
    with pytest.raises(SpecialTokenError, match=re.escape(repr(EOT))):
        tok.encode(text)
    with pytest.raises(ValueError):  # what tiktoken does with the same tokenizer, by default
        tok.to_tiktoken().encode(text)
    with pytest.raises(SpecialTokenError, match=r"texts\[1\]"):
        tok.encode_batch(["fine", text])
    with pytest.raises(SpecialTokenError, match=r"texts\[0\]"):
        tok.encode_batch_to_numpy([text])


def test_allowed_special_encodes_the_special_token_as_tiktoken_does(tok):
    text = f"user input {EOT} more"
    ids = tok.encode(text, allowed_special="all")
    assert ids == tok.to_tiktoken().encode(text, allowed_special="all")
    assert ids.count(tok.special_tokens[EOT]) == 1
    assert tok.encode(text, allowed_special={EOT}) == ids


def test_special_as_text_encodes_the_text_of_a_special_token_as_ordinary_text(tok):
    text = f"x {EOT} y"
    ids = tok.encode(text, special_as_text=True)
    assert tok.special_tokens[EOT] not in ids
    assert ids == tok.encode_ordinary(text) == tok.to_tiktoken().encode(text, disallowed_special=())
    assert tok.decode(ids) == text
    flat, offsets = tok.encode_batch_to_numpy([text, text], special_as_text=True)
    assert flat[offsets[0] : offsets[1]].tolist() == ids


# -- in `bpe encode` -------------------------------------------------------------------------------


def test_bpe_encode_refuses_special_token_text_naming_the_file_and_document(tok, tmp_path):
    tok.save(tmp_path / "tok")
    docs = write_parquet(tmp_path / "docs.parquet", ["a first document", f"a second {EOT} one", "a third"])
    out = tmp_path / "ids.npy"
    refused = bpe("encode", "tok", str(docs), "--eot", "--out", str(out), cwd=tmp_path)
    assert refused.returncode == 1
    line = refused.stderr.strip()
    assert "\n" not in line and line.startswith(f"bpe: error: {docs}: document 1: ")
    assert "--allow-special" in line and "--special-as-text" in line
    assert not out.exists() and list(tmp_path.glob("*.npy*")) == []

    # --special-as-text: the token's text is text, and the only end-of-text ids are the boundaries
    as_text = bpe("encode", "tok", str(docs), "--eot", "--special-as-text", "--out", str(out), cwd=tmp_path)
    assert as_text.returncode == 0, as_text.stderr
    ids = np.load(out)
    assert int((ids == tok.special_tokens[EOT]).sum()) == 3
    assert tok.decode(ids.tolist()) == "".join(d + EOT for d in ["a first document", f"a second {EOT} one", "a third"])

    # --allow-special: asked for, the text becomes the special token
    out.unlink()
    assert bpe("encode", "tok", str(docs), "--eot", "--allow-special", "--out", str(out), cwd=tmp_path).returncode == 0
    assert int((np.load(out) == tok.special_tokens[EOT]).sum()) == 4


def test_bpe_encode_flags_for_special_tokens_on_stdin(tok, tmp_path):
    tok.save(tmp_path / "tok")
    text = f"x {EOT} y\n"
    assert bpe("encode", "tok", cwd=tmp_path, stdin=text).returncode == 1
    as_text = bpe("encode", "tok", "--special-as-text", cwd=tmp_path, stdin=text)
    assert as_text.returncode == 0
    assert [int(i) for i in as_text.stdout.split()] == tok.encode_ordinary(text[:-1])
    allowed = bpe("encode", "tok", "--allow-special", cwd=tmp_path, stdin=text)
    assert [int(i) for i in allowed.stdout.split()] == tok.encode(text[:-1], allowed_special="all")
    both = bpe("encode", "tok", "--allow-special", "--special-as-text", cwd=tmp_path, stdin=text)
    assert both.returncode == 2 and "not allowed with" in both.stderr


# -- at training -----------------------------------------------------------------------------------


def test_a_special_token_spelled_like_a_byte_is_refused_before_counting(tmp_path, capsys, no_counting):
    data = write_parquet(tmp_path / "data" / "part.parquet", ["the cat sat on the mat"] * 100)
    assert main(["train", str(data), "--vocab-size", "300", "--special-token", "a", "--out", str(tmp_path / "t")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("bpe: error: --special-token: 'a' is spelled like a byte token"), err
    assert not (tmp_path / "t").exists()


def test_more_special_tokens_than_any_tokenizer_has_are_refused_naming_the_setting(tmp_path, capsys, monkeypatch):
    """With the bound lowered to 2 (it is 65,536: the encoders match each special token with a regex)."""
    monkeypatch.setattr(pretokenize, "MAX_SPECIAL_TOKENS", 2)
    tokens = ["<|a|>", "<|b|>", "<|c|>"]
    reason = (
        "3 special tokens, more than 2, the most a tokenizer may have (released ones have a few thousand at most, "
        "and each costs the encoder about 5 KB)"
    )
    with pytest.raises(SettingsError) as raised:
        Tokenizer([(104, 105)], "gpt2", tokens)
    assert str(raised.value) == f"special_tokens: {reason}"
    data = write_parquet(tmp_path / "data" / "part.parquet", ["the cat sat on the mat"] * 100)
    flags = [arg for token in tokens for arg in ("--special-token", token)]
    assert main(["train", str(data), "--vocab-size", "300", *flags, "--out", str(tmp_path / "t")]) == 1
    assert capsys.readouterr().err == f"bpe: error: --special-token: {reason}\n"
    assert not (tmp_path / "t").exists()

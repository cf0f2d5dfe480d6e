"""A new user's first hour: what Getting started (and the README) promise, walked as written.

Each test here is one thing a newcomer ran into: special tokens in text, the default split
pattern, `--quiet`, `model_max_length` for transformers, the tiktoken round trip and the first
command block. (`bpe warm`'s promise of how long it takes is checked in tests/test_cold_start.py,
where the kernels are compiled from nothing; `bpe cluster up`'s stop hint in tests/test_cluster.py;
the demo deployment on a fresh cluster in tests/test_pipeline.py.)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bpe import Tokenizer, train
from bpe.cli import main
from bpe.errors import SpecialTokenError
from tests.conftest import stdlib_paragraphs, write_parquet

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
EOT = "<|endoftext|>"


@pytest.fixture(scope="module")
def prose() -> list[str]:
    return stdlib_paragraphs()[:1500]


@pytest.fixture(scope="module")
def tok(prose) -> Tokenizer:
    """A tokenizer trained with the defaults (the pattern too), an end-of-text token and roles."""
    return train(
        prose,
        vocab_size=800,
        special_tokens=[EOT, "<|pad|>"],
        special_token_roles={"eos": EOT, "pad": "<|pad|>"},
        model_max_length=64,
    )


def bpe(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "bpe"), *args], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=300)


# -- special tokens in text: one default, tiktoken's, and one argument for each other behaviour ----


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


# -- one default split pattern ---------------------------------------------------------------------


def test_a_tokenizer_built_from_merges_splits_as_the_trainer_does_by_default(tok, prose):
    rebuilt = Tokenizer(tok.merges[:300])
    assert rebuilt.pattern == tok.pattern  # `tok` was trained without naming a pattern
    named = Tokenizer(tok.merges[:300], tok.pattern)
    assert [rebuilt.encode(t) for t in prose[:200]] == [named.encode(t) for t in prose[:200]]


# -- the command's --quiet -----------------------------------------------------------------------


def test_bpe_train_quiet_prints_nothing(tmp_path):
    data = write_parquet(tmp_path / "d.parquet", ["the cat sat on the mat"] * 20)
    done = bpe("train", str(data), "--vocab-size", "262", "--out", "tok", "--quiet", cwd=tmp_path)
    assert done.returncode == 0 and (done.stdout, done.stderr) == ("", "")
    assert Tokenizer.load(tmp_path / "tok").vocab_size == 262
    loud = bpe("train", str(data), "--vocab-size", "262", "--out", "tok2", cwd=tmp_path)
    assert loud.returncode == 0 and "merges" in loud.stdout  # the summary, without --quiet


# -- transformers: model_max_length ----------------------------------------------------------------


def test_model_max_length_makes_transformers_truncate(tmp_path, prose, capsys):
    transformers = pytest.importorskip("transformers")
    data = write_parquet(tmp_path / "d.parquet", prose[:800])
    args = [
        "train",
        str(data),
        "--vocab-size",
        "600",
        "--eos-token",
        EOT,
        "--model-max-length",
        "32",
        "--out",
        str(tmp_path / "tok"),
        "--quiet",
    ]
    assert main(args) == 0
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "tok"))
    assert hf.model_max_length == 32
    long_text = " ".join(prose[:20])
    assert len(hf(long_text, truncation=True)["input_ids"]) == 32
    assert len(hf(long_text)["input_ids"]) > 32
    loaded = Tokenizer.load(tmp_path / "tok")
    assert loaded.model_max_length == 32
    assert Tokenizer.load(tmp_path / "tok" / "tokenizer.json").model_max_length == 32  # read from tokenizer_config
    with pytest.raises(SystemExit):
        main(["train", str(data), "--vocab-size", "300", "--model-max-length", "x", "--out", str(tmp_path / "t2")])
    capsys.readouterr()
    assert (
        main(
            [
                "train",
                str(data),
                "--vocab-size",
                "300",
                "--model-max-length",
                "0",
                "--out",
                str(tmp_path / "t2"),
                "--quiet",
            ]
        )
        == 1
    )
    assert capsys.readouterr().err.startswith("bpe: error: --model-max-length: expected a positive integer")
    assert not (tmp_path / "t2").exists()


def test_without_model_max_length_the_config_has_none(tmp_path):
    Tokenizer([(104, 105)]).save(tmp_path / "tok")
    assert "model_max_length" not in json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text())


# -- tiktoken round trip ---------------------------------------------------------------------------


def test_from_tiktoken_of_to_tiktoken_is_the_same_tokenizer(tok):
    encoding = tok.to_tiktoken()
    back = Tokenizer.from_tiktoken(encoding)
    assert back == tok
    assert back.special_token_roles == {"eos": EOT, "pad": "<|pad|>"} and back.model_max_length == 64
    plain = Tokenizer.from_tiktoken(encoding, special_token_roles={}, model_max_length=None)
    assert plain.special_token_roles == {} and plain.model_max_length == 64  # None: keep what it carries
    import tiktoken

    bare = tiktoken.Encoding(
        "bare",
        pat_str=encoding._pat_str,
        mergeable_ranks=encoding._mergeable_ranks,
        special_tokens=encoding._special_tokens,
    )
    assert Tokenizer.from_tiktoken(bare, special_token_roles={"eos": EOT, "pad": "<|pad|>"}, model_max_length=64) == tok


# -- the commands of Getting started (and the README), walked as written --------------------------


def shell_block(page: str, heading: str) -> list[str]:
    """The command lines of the first shell block under `heading` in `page`."""
    text = (REPO / page).read_text()
    section = text.split(f"\n{heading}\n", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```\n", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_the_train_encode_decode_block_runs_as_written(tmp_path, prose):
    """Getting started's block (the README shows the same lines) runs in a directory holding the
    files it names, and does what its comments say."""
    import gzip

    for i in range(2):
        write_parquet(tmp_path / "data" / f"part-{i}.parquet", prose[i::2])
    with gzip.open(tmp_path / "notes.txt.gz", "wt") as notes:
        notes.write("Some notes.\n")
    lines = shell_block("docs/getting-started.md", "## Train, encode, decode")
    assert shell_block("README.md", "## Train, encode, decode") == lines
    assert lines[0].startswith("bpe train ") and lines[-1].startswith("bpe decode ")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    outputs = []
    for line in lines:
        done = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (line, done.stderr[-2000:])
        outputs.append(done.stdout)
    piped, argument = outputs[1], outputs[2]
    assert piped == argument and piped.split()
    assert outputs[-1] == "Hello world\n"
    assert np.load(tmp_path / "ids.npy").size > 0 and (tmp_path / "docs.npy").exists()

"""Token ids: a tokenizer's ids run from 0 to 2**32 - 1 (written as uint32 past uint16) and are
dense enough to index. Ids outside that, or too sparse, are refused when a file is loaded (in one
line naming the file and the token, never loaded to wrap in a uint32 array or to fill the memory),
by the constructor, and by `bpe encode` before it writes anything; ids that fit are taken."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bpe import Tokenizer, train
from bpe.errors import ExportError, SettingsError

REPO = Path(__file__).resolve().parents[2]
TOO_BIG, NEGATIVE, SPARSE = 2**40, -1, 2**31  # past uint32; below 0; within uint32 but far past the ~300 tokens


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A tokenizer the library trained and saved (every format), in which " cod" is one token."""
    tok = train(["the code codes cod coding " * 50] * 20, vocab_size=300, pattern="gpt2", special_tokens=["<|x|>"])
    assert [tok.id_to_token(i) for i in tok.encode(" cod")] == ["Ġcod"]
    out = tmp_path_factory.mktemp("saved") / "tok"
    tok.save(out)
    return out


def hf_json_with_id(saved: Path, tmp_path: Path, token_id: int, token: str = "Ġcod") -> Path:
    """The saved tokenizer.json alone, with `token` given `token_id` (in added_tokens too, if there)."""
    doc = json.loads((saved / "tokenizer.json").read_text(encoding="utf-8"))
    doc["model"]["vocab"][token] = token_id
    for added in doc["added_tokens"]:
        if added["content"] == token:
            added["id"] = token_id
    path = tmp_path / "h.tokenizer.json"
    path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    return path


def gpt2_files_with_id(saved: Path, tmp_path: Path, token_id: int) -> Path:
    """GPT-2-style vocab.json + merges.txt alone, with "Ġcod" given `token_id`."""
    directory = tmp_path / "gpt2"
    directory.mkdir()
    shutil.copy(saved / "merges.txt", directory)
    vocab = json.loads((saved / "vocab.json").read_text(encoding="utf-8"))
    vocab["Ġcod"] = token_id
    (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    return directory / "vocab.json"


def ranks_with_rank(saved: Path, tmp_path: Path, rank: int) -> Path:
    """The saved tiktoken ranks with the last token (the last merge: still BPE ranks) given `rank`."""
    lines = (saved / "tokenizer.tiktoken").read_text(encoding="ascii").splitlines()
    lines[-1] = f"{lines[-1].split()[0]} {rank}"
    path = tmp_path / "r.tiktoken"
    path.write_text("\n".join(lines) + "\n", encoding="ascii")
    return path


def last_ranked_token(saved: Path) -> bytes:
    last = (saved / "tokenizer.tiktoken").read_text(encoding="ascii").splitlines()[-1]
    return base64.b64decode(last.split()[0])


def assert_names(message: str, path: Path, token: str, token_id: int) -> None:
    assert "\n" not in message and str(path) in message, message
    assert token in message and str(token_id) in message, message


@pytest.mark.parametrize("token_id", [TOO_BIG, NEGATIVE, SPARSE], ids=["2**40", "-1", "sparse"])
def test_a_tokenizer_json_with_an_id_out_of_range_is_refused_naming_the_file_and_the_token(saved, tmp_path, token_id):
    path = hf_json_with_id(saved, tmp_path, token_id)
    with pytest.raises(ExportError) as raised:
        Tokenizer.load(path)
    assert_names(str(raised.value), path, "'Ġcod'", token_id)


def test_a_tokenizer_json_with_a_special_token_id_out_of_range_is_refused(saved, tmp_path):
    path = hf_json_with_id(saved, tmp_path, TOO_BIG, token="<|x|>")
    with pytest.raises(ExportError) as raised:
        Tokenizer.load(path)
    assert_names(str(raised.value), path, "'<|x|>'", TOO_BIG)


@pytest.mark.parametrize("token_id", [TOO_BIG, NEGATIVE, SPARSE], ids=["2**40", "-1", "sparse"])
def test_gpt2_files_with_an_id_out_of_range_are_refused_naming_the_file_and_the_token(saved, tmp_path, token_id):
    vocab_path = gpt2_files_with_id(saved, tmp_path, token_id)
    with pytest.raises(ExportError) as raised:
        Tokenizer.load(vocab_path.parent)
    assert_names(str(raised.value), vocab_path, "'Ġcod'", token_id)


@pytest.mark.parametrize("rank", [TOO_BIG, SPARSE], ids=["2**40", "sparse"])
def test_tiktoken_ranks_with_a_rank_out_of_range_are_refused_naming_the_file_and_the_token(saved, tmp_path, rank):
    path = ranks_with_rank(saved, tmp_path, rank)
    with pytest.raises(ExportError) as raised:
        Tokenizer.load(path, pattern="gpt2")
    assert_names(str(raised.value), path, repr(last_ranked_token(saved)), rank)


def test_a_special_token_id_out_of_range_given_for_tiktoken_ranks_is_refused(saved):
    with pytest.raises(ExportError) as raised:
        Tokenizer.load(saved / "tokenizer.tiktoken", pattern="gpt2", special_tokens={"<|end|>": TOO_BIG})
    assert_names(str(raised.value), saved / "tokenizer.tiktoken", "'<|end|>'", TOO_BIG)


def test_a_saved_directory_whose_special_token_id_is_out_of_range_is_refused(saved, tmp_path):
    """Every file of the directory agrees on the id (and no checksum is recorded): still refused."""
    directory = tmp_path / "tok"
    shutil.copytree(saved, directory)
    manifest = json.loads((directory / "manifest.json").read_text())
    del manifest["files"]
    manifest["tokenizer"]["special_tokens"]["<|x|>"] = TOO_BIG
    (directory / "manifest.json").write_text(json.dumps(manifest))
    shutil.copy(hf_json_with_id(saved, tmp_path, TOO_BIG, token="<|x|>"), directory / "tokenizer.json")
    vocab = json.loads((directory / "vocab.json").read_text(encoding="utf-8"))
    vocab["<|x|>"] = TOO_BIG
    (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    with pytest.raises(ExportError) as raised:
        Tokenizer.load(directory)
    message = str(raised.value)
    assert str(directory) in message and "'<|x|>'" in message and str(TOO_BIG) in message and "\n" not in message


@pytest.mark.parametrize("token_id", [TOO_BIG, NEGATIVE, SPARSE], ids=["2**40", "-1", "sparse"])
def test_the_constructor_refuses_ids_out_of_range_naming_the_token(token_id):
    with pytest.raises(SettingsError) as raised:
        Tokenizer([(104, 105)], "gpt2", {"<|end|>": token_id})
    assert "'<|end|>'" in str(raised.value) and str(token_id) in str(raised.value)
    with pytest.raises(SettingsError) as raised:
        Tokenizer([(104, 105)], "gpt2", ids={**{i: i for i in range(256)}, 256: token_id})
    assert "'hi'" in str(raised.value) and str(token_id) in str(raised.value)


def test_ids_that_fit_are_still_taken():
    """A special token past uint16 (ids written as uint32) and the ids of a vocabulary with gaps."""
    wide = Tokenizer([(104, 105)], "gpt2", {"<|end|>": 70_000})
    assert wide.encode("hi<|end|>", allowed_special="all") == [256, 70_000]
    gaps = Tokenizer([(104, 105)], "gpt2", {"<|end|>": 600_000}, ids={i: 2 * i for i in range(257)})
    assert gaps.encode("hi <|end|>", allowed_special="all") == [512, 64, 600_000]


@pytest.mark.parametrize("out", ["h.npy", "h.bin", None], ids=["npy", "bin", "stdout"])
@pytest.mark.parametrize("token_id", [TOO_BIG, NEGATIVE], ids=["2**40", "-1"])
def test_the_encode_command_refuses_an_id_out_of_range_and_writes_nothing(saved, tmp_path, token_id, out):
    path = hf_json_with_id(saved, tmp_path, token_id)
    target = tmp_path / out if out else None
    command = [sys.executable, "-m", "bpe.cli", "encode", str(path), "--text", " cod"]
    command += ["--out", str(target)] if target else ["--format", "txt"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    err = done.stderr.strip().splitlines()
    assert done.returncode != 0 and done.stdout == ""
    assert len(err) == 1 and err[0].startswith("bpe: error: ") and str(path) in err[0] and "'Ġcod'" in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.tokenizer.json"]  # no --out, nor a temporary one

"""Reading tokenizer files that are not what they claim: a link to a device, a FIFO, a directory, a
file larger than any tokenizer, a merges.txt bad from its second line, a tokenizer.json whose model
lacks its merges or its vocab, an empty special token. Each is refused in one line naming the file,
without waiting or filling memory: the runs that could hang or fill memory are in processes of their
own, under a time limit and an address-space limit, so that a regression fails the test rather than
the machine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bpe import Tokenizer, pretokenize, train
from bpe.errors import ExportError
from bpe.formats import files
from tests.conftest import HEADROOM, limited, not_a_regular_file

BPE = str(Path(sys.executable).parent / "bpe")
# A file larger than the bound: a regression reading it whole would need more than `limited`'s HEADROOM.
HUGE = 2 << 30


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A tokenizer saved in every format, with a special token."""
    texts = ["the cat sat on the mat, naïve café 中文 1234."] * 50
    out = tmp_path_factory.mktemp("saved") / "tok"
    train(texts, vocab_size=300, pattern="gpt2", special_tokens=["<|endoftext|>"]).save(out)
    return out


def encode_command(directory: Path) -> subprocess.CompletedProcess:
    """`bpe encode DIRECTORY --text hello`, under `limited`'s limits."""
    return limited(f"sys.exit(bpe.cli.main(['encode', {str(directory)!r}, '--text', 'hello']))")


def assert_refused(done: subprocess.CompletedProcess, path: Path, reason: str) -> None:
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stderr.splitlines() == [f"bpe: error: {path}: {reason}"]


def gpt2_directory(saved: Path, target: Path) -> Path:
    """vocab.json + merges.txt alone, as GPT-2 ships them."""
    target.mkdir()
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(saved / name, target / name)
    return target


def hf_directory(saved: Path, target: Path) -> Path:
    """tokenizer.json with tokenizer_config.json beside it, as Hugging Face ships them."""
    target.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(saved / name, target / name)
    return target


LAYOUTS = {  # (how the directory is made, the file replaced)
    "vocab.json of GPT-2's files": (gpt2_directory, "vocab.json"),
    "merges.txt of GPT-2's files": (gpt2_directory, "merges.txt"),
    "tokenizer.json": (hf_directory, "tokenizer.json"),
    "tokenizer_config.json beside tokenizer.json": (hf_directory, "tokenizer_config.json"),
    "manifest.json of a saved directory": (lambda saved, target: shutil.copytree(saved, target), "manifest.json"),
    "vocab.json of a saved directory": (lambda saved, target: shutil.copytree(saved, target), "vocab.json"),
    "tokenizer.tiktoken of a saved directory": (
        lambda saved, target: shutil.copytree(saved, target),
        "tokenizer.tiktoken",
    ),
}
SPECIAL_FILES = {  # what replaces it -> how the refusal names it
    "/dev/zero": "a character device",
    "/dev/urandom": "a character device",
    "fifo": "a FIFO",
    "directory": "a directory",
}


@pytest.mark.parametrize("replacement", list(SPECIAL_FILES))
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_tokenizer_file_that_is_not_a_regular_file_is_refused_without_reading_it(
    saved, tmp_path, layout, replacement
):
    make, name = LAYOUTS[layout]
    directory = Path(make(saved, tmp_path / "tok"))
    path = directory / name
    path.unlink()
    not_a_regular_file(path, replacement)
    assert_refused(
        encode_command(directory), path, f"not a regular file ({SPECIAL_FILES[replacement]}), so not a tokenizer file"
    )


def test_a_path_naming_a_device_or_a_fifo_itself_is_refused(tmp_path):
    os.mkfifo(tmp_path / "tokenizer.json")
    (tmp_path / "t.tiktoken").symlink_to("/dev/zero")
    for path, kind in ((tmp_path / "tokenizer.json", "a FIFO"), (tmp_path / "t.tiktoken", "a character device")):
        done = limited(f"sys.exit(bpe.cli.main(['encode', {str(path)!r}, '--text', 'hello']))")
        assert_refused(done, path, f"not a regular file ({kind}), so not a tokenizer file")


@pytest.mark.parametrize("name", ["tokenizer.json", "vocab.json", "merges.txt"])
def test_a_file_larger_than_any_tokenizer_is_refused_by_its_size(saved, tmp_path, name):
    directory = (
        gpt2_directory(saved, tmp_path / "tok") if name != "tokenizer.json" else hf_directory(saved, tmp_path / "tok")
    )
    with open(directory / name, "r+b") as f:
        f.truncate(HUGE)  # sparse: costs no disk
    reason = (
        f"holds {HUGE:,} bytes, more than 256 MiB, the most a tokenizer file may hold (released tokenizers' "
        "files are tens of MB)"
    )
    assert_refused(encode_command(directory), directory / name, reason)


@pytest.mark.parametrize(
    "line2, reason",
    [
        ("only-one-token", "expected two tokens separated by a space, got 1"),
        ("Ġz Ġq", "token 'Ġz' is not made by an earlier merge"),
    ],
)
def test_a_large_merges_file_bad_at_its_second_line_fails_there_reading_only_its_start(saved, tmp_path, line2, reason):
    """A merges.txt of 200 MB (under the bound) whose second line is bad: refused at that line, in a
    process that could not hold the file (a regression reading it whole runs out of memory)."""
    directory = gpt2_directory(saved, tmp_path / "tok")
    merges = directory / "merges.txt"
    lines = merges.read_text(encoding="utf-8").splitlines()
    with open(merges, "wb") as f:
        f.write("\n".join([lines[0], line2, *lines[1:]]).encode() + b"\n")
        f.truncate(200 << 20)  # sparse: the rest is NUL bytes, on no line the reader reaches
    assert HEADROOM < 200 << 20 < files.MAX_FILE_BYTES
    assert_refused(encode_command(directory), Path(f"{merges}:2"), reason)


def test_a_tiktoken_file_bad_at_its_second_line_fails_there_reading_only_its_start(saved, tmp_path):
    ranks = tmp_path / "t.tiktoken"
    with open(ranks, "wb") as f:
        f.write(b"AA== 0\nnot-base64! 1\n")
        f.truncate(200 << 20)
    code = f"bpe.tokenizer.Tokenizer.load({str(ranks)!r}, pattern='gpt2')"
    done = limited(f"try:\n    {code}\nexcept Exception as exc:\n    print(type(exc).__name__, exc)")
    assert done.stdout.strip() == f"ExportError {ranks}:2: 'not-base64!' is not base64", done.stderr[-2000:]


def test_a_file_that_is_read_normally_still_loads(saved, tmp_path):
    """The checks refuse nothing real: a link to a regular file is a regular file."""
    directory = tmp_path / "linked"
    directory.mkdir()
    for name in ("vocab.json", "merges.txt"):
        (directory / name).symlink_to(saved / name)
    assert Tokenizer.load(directory).merges == Tokenizer.load(saved).merges


# -- a tokenizer.json whose model lacks its merges or its vocab ----------------------------------------


@pytest.mark.parametrize("missing", ["merges", "vocab"])
@pytest.mark.parametrize("typed", [True, False], ids=["typed", "untyped"])
def test_a_tokenizer_json_without_merges_or_vocab_says_which(saved, tmp_path, missing, typed):
    """Alone (a file made elsewhere) and in a saved directory (read as `save` writes it)."""
    doc = json.loads((saved / "tokenizer.json").read_text(encoding="utf-8"))
    del doc["model"][missing]
    if not typed:
        del doc["model"]["type"]  # older tokenizer.json files carry no model type
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    with pytest.raises(ExportError) as raised:
        Tokenizer.load(path)
    assert str(raised.value) == f"{path}: model has no '{missing}'"
    if not typed:
        return
    directory = tmp_path / "tok"
    shutil.copytree(saved, directory)
    manifest = json.loads((directory / "manifest.json").read_text())
    del manifest["files"]  # an old manifest: no checksum tells first that tokenizer.json changed
    (directory / "manifest.json").write_text(json.dumps(manifest))
    shutil.copy(path, directory / "tokenizer.json")
    with pytest.raises(ExportError) as raised:
        Tokenizer.load(directory)
    assert str(raised.value) == f"{directory / 'tokenizer.json'}: model has no '{missing}'"


# -- an empty special token, named in the file that holds it -------------------------------------------


def test_an_empty_added_token_in_tokenizer_json_is_named_in_the_file(saved, tmp_path):
    directory = hf_directory(saved, tmp_path / "tok")
    path = directory / "tokenizer.json"
    document = json.loads(path.read_text(encoding="utf-8"))
    document["added_tokens"].append({**document["added_tokens"][0], "content": "", "id": 400})
    path.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(ExportError) as raised:
        Tokenizer.load(directory)
    assert str(raised.value) == (
        f"{path}: added_tokens[1] (id 400) is an empty token, which no text can hold (Hugging Face ignores it; "
        "remove it from the file)"
    )
    done = subprocess.run([BPE, "encode", str(directory), "--text", "hello"], capture_output=True, text=True)
    assert done.returncode == 1 and done.stderr.splitlines() == [f"bpe: error: {raised.value}"]


def test_an_empty_entry_in_vocab_json_is_named_in_the_file(saved, tmp_path):
    directory = gpt2_directory(saved, tmp_path / "tok")
    path = directory / "vocab.json"
    vocab = json.loads(path.read_text(encoding="utf-8"))
    vocab[""] = max(vocab.values()) + 1
    path.write_text(json.dumps(vocab), encoding="utf-8")
    done = subprocess.run([BPE, "encode", str(directory), "--text", "hello"], capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"bpe: error: {path}: holds an empty token (id {vocab['']}), which no text can make"
    ]


def test_an_empty_special_token_in_the_manifest_is_named_in_the_file(saved, tmp_path):
    directory = Path(shutil.copytree(saved, tmp_path / "tok"))
    path = directory / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    manifest["tokenizer"]["special_tokens"][""] = 400
    path.write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(
        ExportError, match=r"^" + str(path) + r": tokenizer\.special_tokens holds an empty token \(id 400\)"
    ):
        Tokenizer.load(directory)


# -- more special tokens than any tokenizer has, named in the file that holds them --------------------


def too_many(count: int, bound: int) -> str:
    return (
        f"{count:,} special tokens, more than {bound:,}, the most a tokenizer may have (released ones have a few "
        "thousand at most, and each costs the encoder about 5 KB)"
    )


def test_a_tokenizer_json_with_more_added_tokens_than_any_tokenizer_is_refused_before_building_them(saved, tmp_path):
    """65,537 added tokens (a 2.6 MB file, well under the size bound): refused in one line rather
    than built into an encoder (tiktoken takes about 5 KB a special token; 1.6 million took 7.4 GB)."""
    directory = hf_directory(saved, tmp_path / "tok")
    path = directory / "tokenizer.json"
    document = json.loads(path.read_text(encoding="utf-8"))
    first = max(document["model"]["vocab"].values()) + 1
    count = pretokenize.MAX_SPECIAL_TOKENS + 1
    extra = count - len(document["added_tokens"])  # after <|endoftext|>
    document["added_tokens"] += [{"id": first + k, "content": f"<|extra_{k}|>"} for k in range(extra)]
    path.write_text(json.dumps(document), encoding="utf-8")
    done = subprocess.run([BPE, "encode", str(directory), "--text", "hello"], capture_output=True, text=True)
    assert_refused(done, path, f"added_tokens: {too_many(count, count - 1)}")


def test_special_tokens_beyond_the_bound_are_refused_in_every_file_that_lists_them(saved, tmp_path, monkeypatch):
    """With the bound lowered to 1: a vocab.json whose entries are two special tokens, a saved
    directory's manifest listing two, each named."""
    monkeypatch.setattr(pretokenize, "MAX_SPECIAL_TOKENS", 1)
    directory = gpt2_directory(saved, tmp_path / "gpt2")
    vocab = json.loads((directory / "vocab.json").read_text(encoding="utf-8"))
    vocab["<|pad|>"] = max(vocab.values()) + 1  # text the split pattern cuts: a special token, as <|endoftext|>
    (directory / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    with pytest.raises(ExportError) as raised:
        Tokenizer.load(directory)
    assert str(raised.value) == f"{directory / 'vocab.json'}: {too_many(2, 1)}"
    directory = Path(shutil.copytree(saved, tmp_path / "saved"))
    manifest = json.loads((directory / "manifest.json").read_text(encoding="utf-8"))
    manifest["tokenizer"]["special_tokens"]["<|pad|>"] = 400
    (directory / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(ExportError) as raised:
        Tokenizer.load(directory)
    assert str(raised.value) == f"{directory / 'manifest.json'}: tokenizer.special_tokens: {too_many(2, 1)}"


# -- object storage ----------------------------------------------------------------------------------


@pytest.mark.services
def test_a_tokenizer_in_object_storage_is_held_to_the_same_bound_before_it_is_downloaded(saved, s3_env, monkeypatch):
    boto3 = pytest.importorskip("boto3")
    from tests.conftest import unique_bucket

    bucket = unique_bucket()
    boto3.client("s3").create_bucket(Bucket=bucket)
    Tokenizer.load(saved).save(f"s3://{bucket}/tok/")
    assert Tokenizer.load(f"s3://{bucket}/tok/").merges == Tokenizer.load(saved).merges
    size = (saved / "merges.txt").stat().st_size
    monkeypatch.setattr(files, "MAX_FILE_BYTES", size - 1)  # the bound, as if merges.txt were past it
    with pytest.raises(ExportError) as raised:
        Tokenizer.load(f"s3://{bucket}/tok/")
    assert str(raised.value).startswith(f"s3://{bucket}/tok/merges.txt: holds {size:,} bytes, more than ")

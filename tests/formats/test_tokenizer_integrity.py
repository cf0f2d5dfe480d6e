"""A saved tokenizer loads as the tokenizer that was saved, or not at all: the manifest records each
file's size and SHA-256, and the files must agree with each other (merges.txt, vocab.json,
tokenizer.json and the tiktoken ranks hold the same merges and ids). A tampered or damaged file is
refused in one line naming it, with or without the checksums (a manifest from another tool has
none), never loaded as a different tokenizer; GPT-2-style files alone are held to the same checks."""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from pathlib import Path

import pytest

from bpe import Tokenizer, train
from bpe.cli import main
from bpe.errors import ExportError, InputError

SYLLABLES = "the an ka ro mi su ne to fé ße ïv 中 文 東 1 23 4 🙂 -".split()
SAMPLE = "The café on the Straße, naïve 中文 and 1234 others. " * 5


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[Tokenizer, Path]:
    """A tokenizer trained on ~20 KB of text and saved (every format, manifest with checksums)."""
    rng = random.Random(0)
    words = ["".join(rng.choices(SYLLABLES, k=rng.randint(1, 4))) for _ in range(400)]
    texts = [" ".join(rng.choices(words, k=40)) + "." for _ in range(100)]
    tok = train(texts, vocab_size=500, pattern="gpt2", special_tokens=["<|endoftext|>"])
    out = tmp_path_factory.mktemp("saved") / "tok"
    tok.save(out)
    return tok, out


def copy_of(saved, tmp_path: Path, checksums: bool = True) -> Path:
    """A copy of the saved tokenizer to tamper with; without `checksums` its manifest is one from
    before they were recorded (or from another tool), so only the files' agreement can tell."""
    target = tmp_path / "tok"
    shutil.copytree(saved[1], target)
    if not checksums:
        manifest = json.loads((target / "manifest.json").read_text())
        manifest.pop("files", None)
        (target / "manifest.json").write_text(json.dumps(manifest))
    return target


def edit_lines(path: Path, edit) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    path.write_text("\n".join(edit(lines)) + "\n", encoding="utf-8")


def swap(items: list, i: int, j: int) -> list:
    items[i], items[j] = items[j], items[i]
    return items


def edit_vocab(path: Path, edit) -> None:
    vocab = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps(edit(vocab), ensure_ascii=False), encoding="utf-8")


def swap_ids(vocab: dict) -> dict:
    a, b = list(vocab)[300], list(vocab)[301]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    return vocab


def respell(vocab: dict) -> dict:
    """Token 300 spelled with a plain space, which is not one of GPT-2's 256 byte characters."""
    spelling = next(s for s, i in vocab.items() if i == 300)
    return {(" " + spelling[1:] if s == spelling else s): i for s, i in vocab.items()}


def swap_ranks(lines: list[str]) -> list[str]:
    """tokenizer.tiktoken with tokens 300 and 301 given each other's rank (lines in any order are
    the same ranks, as tiktoken reads them: only a token's rank matters)."""
    (a, rank_a), (b, rank_b) = lines[300].split(" "), lines[301].split(" ")
    return lines[:300] + [f"{a} {rank_b}", f"{b} {rank_a}"] + lines[302:]


def swap_byte_merges(lines: list[str]) -> list[str]:
    """merges.txt with the first two adjacent merges of two single bytes swapped: still a valid
    order (each joins tokens that exist), but a different tokenizer."""
    joins_bytes = [i > 0 and all(len(p) == 1 for p in line.split(" ")) for i, line in enumerate(lines)]
    i = next(i for i in range(len(lines) - 1) if joins_bytes[i] and joins_bytes[i + 1])
    return swap(lines, i, i + 1)


def first_compound(lines: list[str]) -> int:
    """The first line of merges.txt whose merge joins a token some earlier merge made."""
    return next(i for i, line in enumerate(lines) if i > 0 and any(len(p) > 1 for p in line.split(" ")))


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def append(path: Path, text: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")


# name -> (tampering, the file at fault).
TAMPERINGS = {
    "last merge removed": (lambda d: edit_lines(d / "merges.txt", lambda ls: ls[:-1]), "merges.txt"),
    "middle merge removed": (lambda d: edit_lines(d / "merges.txt", lambda ls: ls[:100] + ls[101:]), "merges.txt"),
    "merges swapped": (
        lambda d: edit_lines(d / "merges.txt", swap_byte_merges),
        "merges.txt",
    ),
    "vocab ids swapped": (lambda d: edit_vocab(d / "vocab.json", swap_ids), "vocab.json"),
    "merges.txt truncated": (lambda d: truncate(d / "merges.txt"), "merges.txt"),
    "vocab.json truncated": (lambda d: truncate(d / "vocab.json"), "vocab.json"),
    "tokenizer.json truncated": (lambda d: truncate(d / "tokenizer.json"), "tokenizer.json"),
    "tiktoken truncated": (lambda d: truncate(d / "tokenizer.tiktoken"), "tokenizer.tiktoken"),
    "manifest truncated": (lambda d: truncate(d / "manifest.json"), "manifest.json"),
    "vocab.json invalid JSON": (lambda d: append(d / "vocab.json", ",}"), "vocab.json"),
    "tokenizer.json invalid JSON": (lambda d: append(d / "tokenizer.json", "x"), "tokenizer.json"),
    "merge line with 3 tokens": (
        lambda d: edit_lines(d / "merges.txt", lambda ls: ls[:50] + [ls[50] + " e"] + ls[51:]),
        "merges.txt",
    ),
    "vocab token outside GPT-2's alphabet": (lambda d: edit_vocab(d / "vocab.json", respell), "vocab.json"),
    "merge token outside GPT-2's alphabet": (
        lambda d: edit_lines(d / "merges.txt", lambda ls: ls[:50] + ["中 " + ls[50].split(" ")[1]] + ls[51:]),
        "merges.txt",
    ),
    "ranks of two tokens swapped": (
        lambda d: edit_lines(d / "tokenizer.tiktoken", swap_ranks),
        "tokenizer.tiktoken",
    ),
    "a rank missing": (
        lambda d: edit_lines(d / "tokenizer.tiktoken", lambda ls: ls[:300] + ls[301:]),
        "tokenizer.tiktoken",
    ),
}


def refused(directory: Path) -> str:
    """The one-line message with which loading `directory` fails."""
    with pytest.raises((ExportError, InputError)) as raised:
        Tokenizer.load(directory)
    message = str(raised.value)
    assert "\n" not in message, message
    return message


@pytest.mark.parametrize("checksums", [True, False], ids=["checksums", "no-checksums"])
@pytest.mark.parametrize("name", list(TAMPERINGS))
def test_a_tampered_tokenizer_is_refused_naming_the_file(saved, tmp_path, name, checksums):
    tamper, fault = TAMPERINGS[name]
    directory = copy_of(saved, tmp_path, checksums)
    tamper(directory)
    message = refused(directory)
    assert message.startswith(str(directory / fault)), message


def test_tiktoken_ranks_in_another_line_order_are_the_same_tokenizer(saved, tmp_path):
    """Ranks, not line order, are what a tiktoken file says (tiktoken's own reader agrees): two
    lines exchanged load as the tokenizer that was saved."""
    load_tiktoken_bpe = pytest.importorskip("tiktoken.load").load_tiktoken_bpe
    directory = copy_of(saved, tmp_path, checksums=False)
    ranks = directory / "tokenizer.tiktoken"
    before = load_tiktoken_bpe(str(ranks))
    edit_lines(ranks, lambda ls: swap(ls, 300, 301))
    assert load_tiktoken_bpe(str(ranks)) == before
    assert Tokenizer.load(directory).merges == saved[0].merges


def test_a_checksum_that_does_not_match_is_refused(saved, tmp_path):
    directory = copy_of(saved, tmp_path)
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest["files"]["vocab.json"]["sha256"] = "0" * 64
    (directory / "manifest.json").write_text(json.dumps(manifest))
    message = refused(directory)
    assert message.startswith(str(directory / "vocab.json")) and "manifest.json" in message, message


def test_a_change_the_files_agree_on_is_caught_by_the_checksums(saved, tmp_path):
    """Tokens 300 and 301 swapped in vocab.json and tokenizer.json alike: only the checksums tell."""
    directory = copy_of(saved, tmp_path)
    edit_vocab(directory / "vocab.json", swap_ids)
    doc = json.loads((directory / "tokenizer.json").read_text())
    doc["model"]["vocab"] = swap_ids(doc["model"]["vocab"])
    (directory / "tokenizer.json").write_text(json.dumps(doc, ensure_ascii=False))
    assert refused(directory).startswith(str(directory / "vocab.json"))


def test_the_manifest_records_each_files_checksum(saved):
    tok, directory = saved
    files = json.loads((directory / "manifest.json").read_text())["files"]
    assert set(files) == {
        "merges.txt",
        "vocab.json",
        "tokenizer.json",
        "tokenizer.tiktoken",
        "tokenizer_config.json",
        "special_tokens_map.json",
    }
    for name, entry in files.items():
        data = (directory / name).read_bytes()
        assert entry == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert tok.manifest["files"] == files


def test_untampered_files_without_checksums_load_as_the_same_tokenizer(saved, tmp_path):
    """With the checksums, tests/tokenizer/test_tokenizer.py's test_equality_and_repr loads what was saved."""
    tok, _ = saved
    loaded = Tokenizer.load(copy_of(saved, tmp_path, checksums=False))
    assert loaded.merges == tok.merges and loaded.special_tokens == tok.special_tokens
    text = SAMPLE + "<|endoftext|>"
    assert loaded.encode(text, allowed_special="all") == tok.encode(text, allowed_special="all")


def test_the_optional_formats_may_be_deleted_but_not_the_gpt2_files(saved, tmp_path):
    directory = copy_of(saved, tmp_path)
    (directory / "tokenizer.json").unlink()
    (directory / "tokenizer.tiktoken").unlink()
    assert Tokenizer.load(directory).encode(SAMPLE) == saved[0].encode(SAMPLE)
    (directory / "vocab.json").unlink()
    assert refused(directory) == f"{directory / 'vocab.json'}: missing"


def gpt2_style(saved, tmp_path: Path) -> Path:
    """Only vocab.json + merges.txt, as GPT-2 released them (read with the file's own ids)."""
    directory = tmp_path / "gpt2-style"
    directory.mkdir()
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(saved[1] / name, directory / name)
    return directory


GPT2_STYLE_TAMPERINGS = {
    "invalid JSON": (lambda d: append(d / "vocab.json", ",}"), "vocab.json"),
    "an id that is not a number": (lambda d: edit_vocab(d / "vocab.json", lambda v: {**v, "Ġthe": "7"}), "vocab.json"),
    "a byte token missing": (
        lambda d: edit_vocab(d / "vocab.json", lambda v: {s: i for s, i in v.items() if s != "a"}),
        "vocab.json",
    ),
    "a merged token missing": (
        lambda d: edit_vocab(d / "vocab.json", lambda v: {s: i for s, i in v.items() if i != 300}),
        "merges.txt",
    ),
    "a merge of a token not made yet": (
        lambda d: edit_lines(d / "merges.txt", lambda ls: [ls[0], ls[first_compound(ls)]]),
        "merges.txt",
    ),
    "a merge line with 3 tokens": (
        lambda d: edit_lines(d / "merges.txt", lambda ls: ls[:50] + [ls[50] + " e"] + ls[51:]),
        "merges.txt",
    ),
}


@pytest.mark.parametrize("name", list(GPT2_STYLE_TAMPERINGS))
def test_damaged_gpt2_style_files_are_refused_naming_the_file(saved, tmp_path, name):
    tamper, fault = GPT2_STYLE_TAMPERINGS[name]
    directory = gpt2_style(saved, tmp_path)
    Tokenizer.load(directory)  # loads before the damage
    tamper(directory)
    assert refused(directory).startswith(str(directory / fault))


def test_encode_and_decode_commands_refuse_a_tampered_tokenizer_in_one_line(saved, tmp_path, capsys):
    directory = copy_of(saved, tmp_path, checksums=False)
    TAMPERINGS["vocab ids swapped"][0](directory)
    for argv in (["encode", str(directory), "some text"], ["decode", str(directory), "300", "301"]):
        assert main(argv) == 1
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1, err
        assert err.startswith(f"bpe: error: {directory / 'vocab.json'}: disagrees with"), err

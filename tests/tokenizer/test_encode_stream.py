"""Encoding at scale: `Tokenizer.encode_batch_to_numpy` and `bpe encode TOK FILE...` (streamed
input, txt/jsonl/npy/bin output, --eot, --offsets; files, arguments or stdin that are not UTF-8
refused in one line), checked against `Tokenizer.encode` per document and against tiktoken on the
same ranks (`to_tiktoken()`)."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import bpe.tokenizer.stream as stream
import bpe.tokenizer.stream.reader as reader
from bpe import Tokenizer, train
from bpe.cli import main
from bpe.errors import SettingsError, SpecialTokenError
from tests.conftest import REPO, write_parquet

DOCS = [
    "The cat sat on the mat.\nThe dog sat on the log.",
    "naïve café 中文, 1234 emoji 🙂 and <|endoftext|> inside",
    "",
    "   spaces   and\ttabs\r\nand CRLF",
    "It's 2024; they'll say HTTPServer isn't WordPress.",
]


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[Tokenizer, Path]:
    texts = [d for d in DOCS if d] * 20 + ["the quick brown fox jumps over the lazy dog " * 3] * 10
    tok = train(texts, vocab_size=400, pattern="cl100k", special_tokens=["<|endoftext|>"])
    out = tmp_path_factory.mktemp("encode") / "tok"
    tok.save(out)
    return Tokenizer.load(out), out


def bpe(*args: object) -> int:
    return main([str(a) for a in args])


def expected(tok: Tokenizer, docs: list[str]) -> list[list[int]]:
    """What each document must encode to, special tokens' text as the special tokens (the command's
    --allow-special): ours one at a time, equal to tiktoken's on the same ranks."""
    ours = [tok.encode(d, allowed_special="all") for d in docs]
    assert ours == [tok.to_tiktoken().encode(d, allowed_special="all") for d in docs]
    return ours


def no_leftovers(directory: Path) -> None:
    assert [p.name for p in directory.iterdir() if ".tmp-" in p.name] == []


# -- the library ----------------------------------------------------------------------------------


def test_encode_batch_to_numpy_equals_encode_batch(saved):
    tok, _ = saved
    texts = DOCS * 3
    ids, offsets = tok.encode_batch_to_numpy(texts, num_threads=2, allowed_special="all")
    assert ids.dtype == np.uint16 and offsets.dtype == np.int64 and len(offsets) == len(texts) + 1
    lists = tok.encode_batch(texts, num_threads=2, allowed_special="all")
    assert [ids[offsets[i] : offsets[i + 1]].tolist() for i in range(len(texts))] == lists == expected(tok, texts)
    ordinary, at = tok.encode_batch_to_numpy(texts, special_as_text=True, allowed_special=())
    assert np.split(ordinary, at[1:-1])[1].tolist() == tok.encode_ordinary(DOCS[1])
    plain = Tokenizer(tok.merges, tok.pattern, tok.special_tokens)
    plain._encoder.encoding = False  # the plain Python encoder, where tiktoken cannot take a tokenizer
    again, again_at = plain.encode_batch_to_numpy(texts, num_threads=2, allowed_special="all")
    assert again.tolist() == ids.tolist() and again_at.tolist() == offsets.tolist()
    empty, empty_at = tok.encode_batch_to_numpy([])
    assert empty.size == 0 and empty_at.tolist() == [0]
    with pytest.raises(SettingsError, match="^texts: expected a list of strings"):
        tok.encode_batch_to_numpy("one string")


def test_ids_are_uint32_when_one_does_not_fit_in_16_bits(saved):
    tok, _ = saved
    wide = Tokenizer(tok.merges, tok.pattern, {"<|endoftext|>": 70_000})
    assert wide.ids_dtype == np.uint32 and tok.ids_dtype == np.uint16
    ids, offsets = wide.encode_batch_to_numpy(["the cat<|endoftext|>", "sat"], allowed_special="all")
    assert ids.dtype == np.uint32 and ids[offsets[1] - 1] == 70_000
    assert np.split(ids, offsets[1:-1])[0].tolist() == wide.encode("the cat<|endoftext|>", allowed_special="all")


# -- reading in bounded batches -------------------------------------------------------------------


class CountingReader(io.RawIOBase):
    """A byte stream that counts what was read from it (as stdin's buffer)."""

    def __init__(self, data: bytes) -> None:
        super().__init__()
        self.source, self.consumed = io.BytesIO(data), 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self.source.readinto(buffer)
        self.consumed += n
        return n


@pytest.mark.parametrize("text_format", ["doc", "lines"])
def test_stdin_is_read_in_bounded_batches_not_at_once(saved, monkeypatch, text_format):
    tok, _ = saved
    data = ("the cat sat on the mat, naïve café 🙂\n" * 20_000).encode()  # 0.8 MB
    source = CountingReader(data)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(source), encoding="utf-8"))
    monkeypatch.setattr(reader, "PIECE_BYTES", 4096)
    shards, _ = reader.find_shards(reader.Inputs(specs=("-",)), text_format, "text")
    batches = reader.read_texts(shards, "text", tok, batch_bytes=8192, drop_final_newline=True)
    first = next(batches)
    assert first.text_bytes <= 8192 + 4096 and source.consumed < len(data) // 20
    rest = list(batches)
    assert len(rest) > 50 and max(b.text_bytes for b in rest) <= 8192 + 4096
    assert sum(b.text_bytes for b in [first, *rest]) == len(data) - (1 if text_format == "doc" else 20_000)


def test_a_text_file_in_pieces_encodes_as_the_whole_text(saved, tmp_path, monkeypatch):
    tok, out = saved
    text = "".join(f"{d} {i}<|endoftext|>\n\n" if i % 7 == 0 else f"{d}\n" for i, d in enumerate(DOCS * 200))
    (tmp_path / "big.txt").write_text(text, encoding="utf-8")
    monkeypatch.setattr(reader, "PIECE_BYTES", 512)  # hundreds of pieces, in batches of a few
    monkeypatch.setattr(stream, "BATCH_BYTES", 2048)
    assert bpe("encode", out, tmp_path / "big.txt", "--allow-special", "--out", tmp_path / "ids.npy", "--quiet") == 0
    assert np.load(tmp_path / "ids.npy").tolist() == expected(tok, [text])[0]
    lines_out = ["--text-format", "lines", "--allow-special", "--out", tmp_path / "l.jsonl"]
    assert bpe("encode", out, tmp_path / "big.txt", *lines_out) == 0
    lines = [json.loads(line)["ids"] for line in (tmp_path / "l.jsonl").read_text().splitlines()]
    assert lines == expected(tok, [line.rstrip("\r") for line in text.split("\n") if line.rstrip("\r")])


# -- the command ----------------------------------------------------------------------------------


def test_a_file_argument_is_encoded_not_its_name(saved, tmp_path, capsys):
    """`bpe encode tok ten.txt` encodes the file's text, never the string "ten.txt"."""
    tok, out = saved
    (tmp_path / "ten.txt").write_text(DOCS[0] + "\n", encoding="utf-8")
    assert bpe("encode", out, tmp_path / "ten.txt") == 0
    printed, err = capsys.readouterr()
    assert [int(i) for i in printed.split()] == tok.encode(DOCS[0] + "\n") != tok.encode(str(tmp_path / "ten.txt"))
    assert err.startswith("encoded 1 document(s) from 1 input(s)") and "tokens/s" in err


def test_text_arguments_still_work_and_a_missing_file_is_an_error(saved, tmp_path, capsys, monkeypatch):
    tok, out = saved
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ten.txt").write_text("ten")
    assert bpe("encode", out, "some", "text") == 0
    printed, err = capsys.readouterr()
    assert [int(i) for i in printed.split()] == tok.encode("some text") and err == ""
    for argv in (["nine.txt"], ["data/part", "x"], ["ten.txt", "nine.txt"]):
        assert bpe("encode", out, *argv) == 1
        assert capsys.readouterr().err == (
            f"bpe: error: {'data/part' if 'x' in argv else 'nine.txt'}: no such file or directory (to encode the "
            "arguments as text, pass --text)\n"
        )
    assert bpe("encode", out, "--text", "ten.txt") == 0
    assert [int(i) for i in capsys.readouterr().out.split()] == tok.encode("ten.txt")


@pytest.mark.parametrize("fmt", ["txt", "jsonl", "npy", "bin"])
def test_every_format_holds_the_ids_of_each_document_in_order(saved, tmp_path, capsys, fmt):
    tok, out = saved
    write_parquet(tmp_path / "b.parquet", [DOCS[0], None, DOCS[1], DOCS[2]])
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in DOCS[3:]))
    (tmp_path / "c.txt").write_text("first line\n\nsecond line\r\n")
    docs = [DOCS[0], DOCS[1], DOCS[2], *DOCS[3:], "first line", "second line"]  # argument order; null skipped
    target = tmp_path / f"ids.{fmt}"
    inputs = [tmp_path / "b.parquet", tmp_path / "a.jsonl", tmp_path / "c.txt"]
    options = ["--text-format", "lines", "--allow-special", "--out", target, "--offsets", tmp_path / "o.npy"]
    assert bpe("encode", out, *inputs, *options) == 0
    assert "(1 null rows skipped) from 3 input(s)" in capsys.readouterr().err
    want = expected(tok, docs)
    offsets = np.load(tmp_path / "o.npy")
    if fmt == "txt":
        got = [[int(i) for i in line.split()] for line in target.read_text().split("\n")[:-1]]
    elif fmt == "jsonl":
        got = [json.loads(line)["ids"] for line in target.read_text().splitlines()]
    else:
        flat = np.load(target) if fmt == "npy" else np.fromfile(target, dtype="<u2")
        assert flat.dtype == np.uint16
        got = [flat[offsets[i] : offsets[i + 1]].tolist() for i in range(len(offsets) - 1)]
    assert got == want and offsets.tolist() == np.cumsum([0] + [len(ids) for ids in want]).tolist()
    assert [tok.decode(ids) for ids in got] == docs
    no_leftovers(tmp_path)


def test_eot_ends_each_document_and_offsets_include_it(saved, tmp_path):
    tok, out = saved
    write_parquet(tmp_path / "d.parquet", DOCS)
    assert (
        bpe(
            "encode",
            out,
            tmp_path / "d.parquet",
            "--eot",
            "--allow-special",
            "--out",
            tmp_path / "ids.npy",
            "--offsets",
            tmp_path / "o.npy",
            "--quiet",
        )
        == 0
    )
    flat, offsets = np.load(tmp_path / "ids.npy", mmap_mode="r"), np.load(tmp_path / "o.npy")
    eot = tok.eot_token
    assert [flat[offsets[i] : offsets[i + 1]].tolist() for i in range(len(DOCS))] == [
        ids + [eot] for ids in expected(tok, DOCS)
    ]
    plain = Tokenizer(tok.merges, tok.pattern)
    plain.save(tmp_path / "plain")
    assert bpe("encode", tmp_path / "plain", tmp_path / "d.parquet", "--eot") == 1


def number(pattern: str, line: str) -> int:
    """The number (`9,483`) that `pattern`'s group matches in `line`."""
    return int(re.search(pattern, line)[1].replace(",", ""))


def test_the_summary_counts_the_ids_written_end_of_text_included(saved, tmp_path, capsys, monkeypatch):
    """The summary counts every id written, the end-of-text ids included, and says how many are which."""
    _, out = saved
    docs = [d.replace("<|endoftext|>", "the end") for d in DOCS]  # no special token in the text
    inputs = [write_parquet(tmp_path / f"{i}.parquet", [f"{d} {i}" for d in docs * 4]) for i in range(5)]
    monkeypatch.setattr(stream, "BATCH_BYTES", 512)  # a batch per file at least
    for eot in ([], ["--eot"]):
        target = tmp_path / f"ids{len(eot)}.npy"
        assert bpe("encode", out, *inputs, *eot, "--out", target) == 0
        line = capsys.readouterr().err.strip().splitlines()[-1]
        written = len(np.load(target))
        assert number(r" -> ([\d,]+) tokens", line) == written, line
        assert number(r"encoded ([\d,]+) document", line) == len(DOCS) * 20
    assert f"({written - len(DOCS) * 20:,} of text + {len(DOCS) * 20:,} end-of-text;" in line


@pytest.mark.parametrize("offsets", ["same.npy", "./same.npy", "{tmp}/same.npy", "here/same.npy"])
def test_out_and_offsets_naming_one_file_are_refused_before_writing(saved, tmp_path, capsys, monkeypatch, offsets):
    _, out = saved
    monkeypatch.chdir(tmp_path)
    write_parquet(tmp_path / "d.parquet", ["one document", "and another"])
    offsets = offsets.format(tmp=tmp_path)
    os.symlink(".", "here")  # a directory by another name
    message = f"bpe: error: --out same.npy and --offsets {offsets} name the same file; give each its own path\n"
    assert bpe("encode", out, "d.parquet", "--out", "same.npy", "--offsets", offsets) == 1
    assert capsys.readouterr().err == message and not os.path.exists("same.npy")
    Path("same.npy").write_text("keep me")
    for force in ([], ["--force"]):  # an existing one is left untouched
        assert bpe("encode", out, "d.parquet", "--out", "same.npy", "--offsets", offsets, *force) == 1
        assert capsys.readouterr().err == message and Path("same.npy").read_text() == "keep me"
    no_leftovers(tmp_path)


def stdin_of(data: bytes) -> io.TextIOWrapper:
    """Standard input holding `data`, as Python opens it under a C/UTF-8 locale."""
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="surrogateescape")


def test_stdin_streamed_with_dash_or_when_no_argument(saved, monkeypatch, capsys):
    tok, out = saved
    data = "one line, naïve café\ntwo line 中文 🙂\n"
    monkeypatch.setattr(sys, "stdin", stdin_of(data.encode()))
    assert bpe("encode", out, "-", "--text-format", "lines", "--format", "jsonl") == 0
    printed, err = capsys.readouterr()
    assert [json.loads(x)["ids"] for x in printed.splitlines()] == expected(tok, data.splitlines())
    assert err.startswith("encoded 2 document(s) from 1 input(s)")
    monkeypatch.setattr(sys, "stdin", stdin_of(data.encode()))
    assert bpe("encode", out) == 0  # no argument: one document, its final newline dropped, no summary
    printed, err = capsys.readouterr()
    assert [int(i) for i in printed.split()] == tok.encode(data[:-1]) and err == ""
    assert bpe("encode", out, "-", "-") == 1
    assert "stdin is given twice" in capsys.readouterr().err


def test_the_command_streams_real_pipes_to_stdout(saved, tmp_path):
    tok, out = saved
    text = "\n".join(DOCS[:2] * 500) + "\n"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "bpe.cli", "encode", str(out), "-", "--format", "bin", "--allow-special"]
    done = subprocess.run(command, input=text.encode(), capture_output=True, env=env, check=True)
    assert np.frombuffer(done.stdout, dtype="<u2").tolist() == tok.encode(text[:-1], allowed_special="all")
    assert b"encoded 1 document(s) from 1 input(s)" in done.stderr


PROGRESS = re.compile(
    r"encoding: (\d+)% of ([\d.,]+) MB read, ([\d.,]+) MB of text, ([\d,]+) tokens, [\d.,]+ MB of text/s"
)


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl.gz"])
def test_progress_and_summary_tell_the_bytes_read_from_the_text_encoded(saved, tmp_path, suffix):
    """The progress line said `48.0 MB (98% of 30.7 MB read)`: text MB beside a share of the
    Parquet file's bytes, as if one were a share of the other. Each figure names its own bytes."""
    import gzip

    from tests.test_progress import documents, on_a_terminal

    _, tok = saved
    docs = documents(36_000, distinct=300)  # about 8.6 MB of text, stored smaller
    path = tmp_path / f"d{suffix}"
    if suffix == ".parquet":
        write_parquet(path, docs)
    else:
        path.write_bytes(gzip.compress("".join(json.dumps({"text": d}) + "\n" for d in docs).encode()))
    size, text = path.stat().st_size, sum(len(d.encode()) for d in docs)
    assert size < text / 2  # stored compressed: the two differ
    command = [sys.executable, "-m", "bpe.cli", "encode", str(tok), str(path), "--out", str(tmp_path / "ids.npy")]
    code, shown = on_a_terminal(command, 24, 200, cwd=REPO)
    assert code == 0, shown[-2000:]
    progress = [m.groups() for m in PROGRESS.finditer(shown)]
    assert progress, shown[-2000:]  # drawn from the first batch on
    for share, stored, encoded, _ in progress:
        assert stored == f"{size / 1e6:,.1f}" and 0 <= int(share) <= 100
        assert float(encoded) <= text / 1e6 + 0.05
        assert abs(int(share) - 100 * float(encoded) * 1e6 / text) <= 15  # alike documents: both shares agree
    final = shown.strip().splitlines()[-1]
    assert f" from 1 input(s) ({size / 1e6:,.1f} MB read): {text / 1e6:,.1f} MB of text -> " in final, final
    assert f" -> {len(np.load(tmp_path / 'ids.npy')):,} tokens " in final


def test_an_existing_output_is_kept_without_force(saved, tmp_path, capsys):
    _, out = saved
    (tmp_path / "a.txt").write_text("hello")
    (tmp_path / "ids.npy").write_text("keep me")
    assert bpe("encode", out, tmp_path / "a.txt", "--out", tmp_path / "ids.npy") == 1
    err = capsys.readouterr().err
    assert err == f"bpe: error: --out {tmp_path / 'ids.npy'}: already exists (use --force to replace it)\n"
    assert (tmp_path / "ids.npy").read_text() == "keep me"
    assert bpe("encode", out, tmp_path / "a.txt", "--out", tmp_path / "ids.npy", "--force", "--quiet") == 0
    assert np.load(tmp_path / "ids.npy").size > 0
    no_leftovers(tmp_path)


def test_invalid_utf8_names_the_file_and_offset_and_writes_nothing(saved, tmp_path, capsys):
    _, out = saved
    (tmp_path / "a.txt").write_text("fine text\n" * 100)
    (tmp_path / "b.txt").write_bytes(b"ok\nnot \xff ok\n")
    for fmt in ("npy", "txt"):
        target = tmp_path / f"ids.{fmt}"
        assert bpe("encode", out, tmp_path / "a.txt", tmp_path / "b.txt", "--out", target) == 1
        assert capsys.readouterr().err == f"bpe: error: {tmp_path / 'b.txt'}: invalid UTF-8 at byte 7\n"
        assert not target.exists()
    no_leftovers(tmp_path)


def test_stdin_that_is_not_utf8_is_refused(saved, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", stdin_of(b"caf\xc3\xa9 ab\xffcd\n"))
    assert bpe("encode", saved[1]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err == "bpe: error: <stdin>: invalid UTF-8 at byte 8\n"


def test_arguments_that_are_not_utf8_are_refused(saved, capsys):
    # Python hands the command invalid UTF-8 in its arguments as lone surrogates (surrogateescape).
    assert bpe("encode", saved[1], "ab", "c\udcffd") == 1
    assert capsys.readouterr().err == "bpe: error: arguments: invalid UTF-8 at byte 4\n"


def test_invalid_utf8_on_a_real_stdin_is_refused(saved):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "bpe.cli", "encode", str(saved[1])]
    done = subprocess.run(command, input=b"ab\xed\xa0\x80c", env=env, capture_output=True)
    assert done.returncode == 1 and done.stdout == b""
    assert done.stderr == b"bpe: error: <stdin>: invalid UTF-8 at byte 2\n"


def test_options_before_the_files_and_format_rules(saved, tmp_path, capsys):
    tok, out = saved
    (tmp_path / "a.txt").write_text("alpha")
    (tmp_path / "b.txt").write_text("beta")
    assert bpe("encode", out, "--out", tmp_path / "ids.bin", "--quiet", tmp_path / "a.txt", tmp_path / "b.txt") == 0
    assert np.fromfile(tmp_path / "ids.bin", dtype="<u2").tolist() == tok.encode("alpha") + tok.encode("beta")
    assert bpe("encode", out, tmp_path / "a.txt", "--format", "npy") == 1
    assert "--format npy needs --out" in capsys.readouterr().err
    assert bpe("encode", out, tmp_path / "a.txt", "--out", os.devnull, "--quiet") == 0  # written to, never replaced
    assert os.path.exists(os.devnull) and not os.path.isfile(os.devnull)


def test_a_corpus_shard_encodes_as_tiktoken_does(corpus, corpus_rows, tmp_path):
    tok = train(corpus_rows[:1500], vocab_size=1000, pattern="cl100k", special_tokens=["<|endoftext|>"])
    tok.save(tmp_path / "tok")
    shard = corpus / "part-00005.parquet"
    assert (
        bpe(
            "encode", tmp_path / "tok", shard, "--out", tmp_path / "ids.npy", "--offsets", tmp_path / "o.npy", "--quiet"
        )
        == 0
    )
    rows = [t for t in pq.read_table(shard).column("text").to_pylist() if t is not None]
    reference = tok.to_tiktoken().encode_ordinary_batch(rows, num_threads=2)
    flat, offsets = np.load(tmp_path / "ids.npy"), np.load(tmp_path / "o.npy")
    assert len(offsets) == len(rows) + 1 and flat.tolist() == [i for ids in reference for i in ids]


def test_the_library_names_its_parameters_and_the_command_its_flags(saved, tmp_path, capsys):
    """`encode_inputs` is called from Python, where there is no `--format`: its errors named the
    command's flags. Each names the parameter now, and `bpe encode` the flag, for the same fault."""
    tok, out = saved
    plain = tmp_path / "plain"  # a tokenizer without an end-of-text token
    Tokenizer(tok.merges, tok.pattern).save(plain)
    (tmp_path / "a.txt").write_text("alpha <|endoftext|> beta")
    (tmp_path / "old.npy").write_text("keep me")
    same = str(tmp_path / "same.npy")
    cases = [  # (tokenizer, parameters, the library's message, the command's flags, the command's message)
        (tok, {"format": "npy"}, "format npy needs out: ", ["--format", "npy"], "--format npy needs --out: "),
        (tok, {"format": "csv"}, "format: expected one of txt, jsonl, npy, bin, got 'csv'", None, None),
        (Tokenizer.load(plain), {"eot": True}, "eot: this tokenizer has no end-of-text token", ["--eot"], "--eot: "),
        (tok, {"out": same, "offsets": same}, f"out {same} and offsets {same} name the same file",
         ["--out", same, "--offsets", same], f"--out {same} and --offsets {same} name the same file"),
        (tok, {"out": str(tmp_path / "old.npy")}, f"out {tmp_path / 'old.npy'}: already exists (use force=True ",
         ["--out", tmp_path / "old.npy"], f"--out {tmp_path / 'old.npy'}: already exists (use --force "),
        (tok, {"out": str(tmp_path / "ids.npy")}, f"{tmp_path / 'a.txt'}: holds the special token '<|endoftext|>' as "
         "text; pass allow_special=True to encode it as the special token, or special_as_text=True as ordinary text",
         ["--out", tmp_path / "ids.npy"], "pass --allow-special to encode it as the special token, or "
         "--special-as-text as ordinary text"),
    ]  # fmt: skip
    inputs = reader.Inputs(specs=(str(tmp_path / "a.txt"),))
    for tokenizer, parameters, message, flags, shown in cases:
        with pytest.raises((SettingsError, SpecialTokenError, FileExistsError)) as raised:
            stream.encode_inputs(tokenizer, inputs, progress=False, **parameters)
        assert str(raised.value).startswith(message) and "--" not in str(raised.value), str(raised.value)
        if flags is not None:
            directory = plain if tokenizer is not tok else out
            assert bpe("encode", directory, tmp_path / "a.txt", *flags) == 1
            err = capsys.readouterr().err
            assert err.startswith("bpe: error: ") and shown in err and err.count("\n") == 1, err
    assert (tmp_path / "old.npy").read_text() == "keep me"
    no_leftovers(tmp_path)

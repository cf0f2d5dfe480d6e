"""Inputs at the edges: symbolic links and loops, files that are not regular files, large .txt files
read in pieces, byte order marks, Arrow string layouts, empty corpora and the threads setting."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

import bpe.shards as bpe_shards
from bpe import train
from bpe.engine.count import WordCounter, count_shards
from bpe.errors import InputError, SettingsError
from bpe.pretokenize import Pretokenizer
from bpe.settings import check_setting
from bpe.shards import Shard, discover, read_batches

REPO = Path(__file__).resolve().parent.parent
NAMED = ["gpt2", "cl100k", "o200k", "whitespace"]


def whole_counts(text: str, pretokenizer: Pretokenizer) -> tuple[dict[bytes, int], int, dict[str, int]]:
    """Counts of `text` as one document: words, pre-tokens and special tokens."""
    counter = WordCounter(pretokenizer)
    counter.add_texts([text])
    return counter.result().to_dict(), counter.stats.pretokens, counter.stats.special_tokens


def chunked_counts(texts, pretokenizer: Pretokenizer) -> tuple[dict[bytes, int], int, dict[str, int]]:
    counter = WordCounter(pretokenizer)
    for text in texts:
        counter.add_texts([text])
    return counter.result().to_dict(), counter.stats.pretokens, counter.stats.special_tokens


# --- 8: symbolic links -------------------------------------------------------------------------


@pytest.fixture
def looped(tmp_path) -> Path:
    """dir/a.txt, dir/sub/b.txt, and dir/loop -> dir."""
    d = tmp_path / "dir"
    (d / "sub").mkdir(parents=True)
    (d / "a.txt").write_text("alpha beta")
    (d / "sub" / "b.txt").write_text("gamma")
    (d / "loop").symlink_to(d, target_is_directory=True)
    return d


def test_a_glob_through_a_symlink_loop_lists_each_file_once(looped):
    shards = discover([f"{looped}/loop/**/*.txt"])
    assert sorted(os.path.realpath(s.path) for s in shards) == [str(looped / "a.txt"), str(looped / "sub" / "b.txt")]
    assert [s.path for s in shards] == [str(looped / "loop" / "a.txt"), str(looped / "loop" / "sub" / "b.txt")]


def test_a_file_reached_by_several_paths_is_one_shard_under_its_shortest_path(looped):
    for inputs in ([looped / "loop" / "a.txt", looped / "a.txt"], [looped / "a.txt", looped / "loop" / "a.txt"]):
        assert [s.path for s in discover([str(p) for p in inputs])] == [str(looped / "a.txt")]


def test_two_symlink_loops_end_for_globs_and_directory_walks(looped):
    (looped / "sub" / "up").symlink_to(looped, target_is_directory=True)
    outside = looped.parent / "outside"
    outside.mkdir()
    (outside / "c.txt").write_text("delta")
    (looped / "linked").symlink_to(outside, target_is_directory=True)
    script = (
        "import json, sys; from bpe.shards import discover; print(json.dumps([s.path for s in discover(sys.argv[1:])]))"
    )
    for spec in (f"{looped}/**/*.txt", str(looped)):
        # The standard glob follows two loops for ever; a subprocess can be stopped if it does.
        done = subprocess.run(
            [sys.executable, "-c", script, spec], capture_output=True, text=True, timeout=60, cwd=REPO
        )
        assert done.returncode == 0, done.stderr
        listed = json.loads(done.stdout)
        assert listed == [str(looped / "a.txt"), str(looped / "linked" / "c.txt"), str(looped / "sub" / "b.txt")]


def test_training_through_a_symlink_loop_counts_each_file_once(looped):
    tok = train(files=[f"{looped}/loop/**/*.txt"], vocab_size=260, pattern="whitespace")
    assert tok.manifest["counts"]["pretokens"] == 3
    assert len(tok.manifest["data"]["shards"]) == 2


# --- 15: files that are not regular files ------------------------------------------------------


def special_files(tmp_path):
    fifo = tmp_path / "x.txt"
    os.mkfifo(fifo)
    device = tmp_path / "dev.txt"
    device.symlink_to("/dev/null")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "s.jsonl"))
    return [(fifo, "a FIFO"), (device, "a character device"), (tmp_path / "s.jsonl", "a socket")], sock


def test_inputs_that_are_not_regular_files_are_refused_naming_them(tmp_path):
    found, sock = special_files(tmp_path)
    try:
        for path, kind in found:
            with pytest.raises(InputError, match=rf"^{regex.escape(str(path))}: not a regular file \({kind}\)$"):
                discover([str(path)])
        with pytest.raises(InputError, match="not a regular file"):
            discover([str(tmp_path)])  # in a directory walk too
        with pytest.raises(InputError, match="not a regular file"):
            discover([f"{tmp_path}/*.txt"])  # and in a glob
    finally:
        sock.close()


def test_opening_a_fifo_as_a_shard_fails_at_once_rather_than_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "x.txt"
    os.mkfifo(fifo)
    outcome: list[BaseException | None] = []

    def read() -> None:
        try:
            with Shard(str(fifo), "txt", 0).open() as f:
                f.read()
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(10)
    if reader.is_alive():  # blocked in open(): let it go, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(10)
        pytest.fail("opening a FIFO waited for a writer")
    assert isinstance(outcome[0], InputError) and "x.txt: not a regular file (a FIFO)" in str(outcome[0])


# --- 15: large .txt files in pieces --------------------------------------------------------------

# Characters around the cut rules: ASCII letters, digits, punctuation (' / .), every kind of
# whitespace the patterns treat differently, non-ASCII letters, a combining mark, and the
# characters of the special tokens; plus runs the patterns join (punctuation with newlines and `/`,
# contractions, digits, whitespace runs) and whole special tokens. Cutting after a newline between
# non-spaces, say, fails here: o200k takes ".\n/" as one piece.
ALPHABET = list("aZ9'./-< |>\n\r\t\x0b\x1c\u00a0\u3000é中\u0301") + [" ", " ", "a", "a", "\n"]
FRAGMENTS = ALPHABET + [".\n/", "!\r\n", "'s", "'ll", " \n", "\r\n", "  ", "12345", "<|e|>", "a a", "<| |>"]
SPECIALS = [(), ("<|e|>",), ("a a", "<| |>"), (" ", "a\n")]
TEXTS = st.lists(st.sampled_from(FRAGMENTS), max_size=60).map("".join)


@settings(max_examples=300, deadline=None)
@given(
    text=TEXTS,
    pattern=st.sampled_from(NAMED),
    special_tokens=st.sampled_from(SPECIALS),
    chunk_bytes=st.integers(1, 24),
)
def test_counting_a_txt_in_pieces_equals_counting_it_whole(text, pattern, special_tokens, chunk_bytes):
    pretokenizer = Pretokenizer(pattern, special_tokens)
    pieces = list(bpe_shards.txt_chunks(io.BytesIO(text.encode()), "x.txt", pretokenizer, chunk_bytes))
    chunks = [chunk for chunk, _ in pieces]
    assert "".join(chunks) == text and sum(share for _, share in pieces) == len(text.encode())
    # the regex (the definition) and the compiled scanners (what counts) both agree
    assert Counter(p for c in chunks for p in pretokenizer.split(c)) == Counter(pretokenizer.split(text))
    assert chunked_counts(chunks, pretokenizer) == whole_counts(text, pretokenizer)


@settings(max_examples=50, deadline=None)
@given(text=TEXTS, chunk_bytes=st.integers(1, 8))
def test_a_custom_regex_reads_the_whole_file(text, chunk_bytes):
    # Pieces of `[^\n]+` run across any space: a custom regex cannot be cut safely, so it is not cut.
    pretokenizer = Pretokenizer(r"[^\n]+")
    chunks = [c for c, _ in bpe_shards.txt_chunks(io.BytesIO(text.encode()), "x.txt", pretokenizer, chunk_bytes)]
    assert chunks == [text]


def test_a_single_line_txt_is_read_in_bounded_pieces(tmp_path):
    words = [f"w{i % 997} x{i % 13}," for i in range(100_000)]
    text = " ".join(words)
    path = tmp_path / "one-line.txt"
    path.write_text(text)
    shard = discover([str(path)])[0]
    for pattern in NAMED:
        pretokenizer = Pretokenizer(pattern)
        batches = list(read_batches(shard, pretokenizer=pretokenizer, chunk_bytes=1 << 16))
        sizes = [len(b[0].as_py().encode()) for b, _ in batches]
        assert len(sizes) >= len(text) >> 16 and max(sizes) <= 1 << 16
        assert sum(share for _, share in batches) == shard.size
        assert chunked_counts((b[0].as_py() for b, _ in batches), pretokenizer) == whole_counts(text, pretokenizer)


def test_text_without_cut_points_is_read_until_the_next_one(tmp_path):
    text = "中文" * 5000 + " end of it" + "字" * 100
    pretokenizer = Pretokenizer("cl100k")
    chunks = [c for c, _ in bpe_shards.txt_chunks(io.BytesIO(text.encode()), "x.txt", pretokenizer, 64)]
    # no cut in the first 64 bytes: up to the first one after them; then the last one within 64 bytes
    assert chunks == ["中文" * 5000 + " end", " of", " it" + "字" * 100]


def test_count_shards_on_a_txt_in_pieces_equals_the_whole_file(tmp_path, monkeypatch):
    text = "The cat sat.\nOn the mat, 12345 times! Don't  stop\n\n  now.<|endoftext|> é中 " * 300
    path = tmp_path / "big.txt"
    path.write_text(text)
    pretokenizer = Pretokenizer("o200k", ["<|endoftext|>"])
    monkeypatch.setattr(bpe_shards, "TXT_CHUNK_BYTES", 100)
    counts, stats, _ = count_shards(discover([str(path)]), pretokenizer, threads=2)
    assert stats.documents > 100  # it was read in pieces
    assert (counts.to_dict(), stats.pretokens, stats.special_tokens) == whole_counts(text, pretokenizer)
    assert stats.bytes == len(text.encode())


def test_invalid_utf8_in_a_later_piece_is_reported_at_its_byte_in_the_file(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"\xef\xbb\xbf" + b"word " * 1000 + b"\xc3(")
    shard = discover([str(path)])[0]
    with pytest.raises(InputError, match=r"bad.txt: invalid UTF-8 at byte 5003$"):
        list(read_batches(shard, pretokenizer=Pretokenizer("gpt2"), chunk_bytes=64))


# --- 17: byte order marks, Arrow string layouts, empty corpora, threads ------------------------


def test_a_byte_order_mark_is_not_text_in_txt_or_jsonl(tmp_path):
    (tmp_path / "bom.txt").write_bytes(b"\xef\xbb\xbfhello world")
    (tmp_path / "bom.jsonl").write_bytes(b'\xef\xbb\xbf{"text": "hello world"}\n{"text": "again"}\n')
    for name in ("bom.txt", "bom.jsonl"):
        tok = train(files=[str(tmp_path / name)], vocab_size=300, pattern="gpt2")
        assert not any(b"\xbb\xbf" in token for token in tok.vocab), name  # no merge of the mark's bytes
        counts = tok.manifest["counts"]
        assert (counts["bytes"], counts["pretokens"]) == ((11, 2) if name == "bom.txt" else (16, 3)), name


@pytest.mark.parametrize("layout", ["dictionary", "string_view", "large_string"])
def test_dictionary_encoded_and_string_view_columns_are_read(tmp_path, layout):
    texts = ["the cat sat", None, "the cat sat", "on the mat"]
    plain = pa.array(texts, pa.string())
    column = {"dictionary": plain.dictionary_encode(), "string_view": plain.cast(pa.string_view()),
              "large_string": plain.cast(pa.large_string())}[layout]  # fmt: skip
    pq.write_table(pa.table({"text": column}), tmp_path / "t.parquet")
    tok = train(files=[str(tmp_path / "t.parquet")], vocab_size=270, pattern="gpt2")
    reference = train([t for t in texts if t], vocab_size=270, pattern="gpt2")
    assert tok.merges == reference.merges and tok.manifest["counts"]["null_rows"] == 1


def test_word_counter_reads_every_string_layout_and_refuses_other_types():
    dictionary = pa.DictionaryArray.from_arrays(pa.array([0, 1, 0]), pa.array(["a b", None]))
    counter = WordCounter(Pretokenizer("gpt2"))
    counter.add_arrow(dictionary)  # a null among the dictionary's values is a null row
    counter.add_arrow(pa.array(["a"], pa.string_view()))
    counter.add_arrow(pa.array([None, None]))  # an all-null column has Arrow type null
    assert counter.result().to_dict() == {b"a": 3, b" b": 2}
    assert counter.stats.null_rows == 3 and counter.stats.documents == 3
    with pytest.raises(TypeError, match="expected an Arrow array of strings, got int64"):
        counter.add_arrow(pa.array([1, 2]))


@pytest.mark.parametrize(
    "name, make",
    [
        ("empty.txt", lambda p: p.write_bytes(b"")),
        ("bom-only.txt", lambda p: p.write_bytes(b"\xef\xbb\xbf")),
        ("spaces.txt", lambda p: p.write_text("   \n\t ")),
        ("nulls.parquet", lambda p: pq.write_table(pa.table({"text": pa.array([None, None], pa.string())}), p)),
        ("no-rows.parquet", lambda p: pq.write_table(pa.table({"text": pa.array([], pa.string())}), p)),
        ("blank.jsonl", lambda p: p.write_text('{"text": null}\n\n')),
    ],
)
def test_an_empty_corpus_is_an_error_naming_the_inputs(tmp_path, name, make):
    make(tmp_path / name)
    with pytest.raises(InputError, match=rf"^{regex.escape(str(tmp_path / name))}: no text to train on"):
        train(files=[str(tmp_path / name)], vocab_size=300, pattern="whitespace")


def test_empty_texts_are_an_error_too():
    with pytest.raises(InputError, match="^texts: no text to train on"):
        train(["", None], vocab_size=300)
    with pytest.raises(InputError, match="no text to train on"):
        train(["<|endoftext|>"], vocab_size=300, special_tokens=["<|endoftext|>"])


@pytest.mark.parametrize("threads", [0, -5, 1.5, True, "2"])
def test_threads_must_be_a_positive_integer(tmp_path, threads):
    with pytest.raises(SettingsError, match=r"^threads: expected an integer >= 1") as caught:
        check_setting("threads", threads)
    assert caught.value.parameter == "threads"
    with pytest.raises(SettingsError, match="^threads: "):
        train(["some text"], vocab_size=260, threads=threads)
    (tmp_path / "a.txt").write_text("some text")
    with pytest.raises(SettingsError, match="^threads: "):
        count_shards(discover([str(tmp_path / "a.txt")]), Pretokenizer("gpt2"), threads=threads)


def test_threads_none_means_one_per_core_and_one_is_allowed():
    check_setting("threads", None)
    assert train(["some text"], vocab_size=260, threads=1).merges

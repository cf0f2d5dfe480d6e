"""Inputs at the edges: symbolic links and loops, files that are not regular files, large .txt files
read in pieces, byte order marks, Arrow string layouts, empty corpora and the threads setting; and
the inputs users already have: any suffix as text, one document per file or per line, compressed
files, JSON arrays, CSV, stdin, directory walks that say what they skip, Python iterables of str or
dicts and `datasets`, --limit and --sample, on both engines."""

from __future__ import annotations

import io
import json
import os
import random
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

import bpe.inputs.readers as readers
from bpe import train
from bpe.engine.cores import BusyCores, available_cores
from bpe.errors import InputError, InvalidTextError, SettingsError
from bpe.inputs.discover import discover
from bpe.inputs.read import read_batches
from bpe.inputs.shard import Shard, with_options
from bpe.pretokenize import NAMED_PATTERNS, Pretokenizer
from bpe.schema import check as check_setting
from bpe.training.counting import ShardReader, WordCounter, count_shards
from bpe.training.trainer import THREADED_MERGE_MIN_WORDS
from tests.conftest import write_parquet
from tests.reference import train_reference

REPO = Path(__file__).resolve().parents[2]
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


# --- symbolic links -------------------------------------------------------------------------------


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
        "import json, sys; from bpe.inputs.discover import discover; "
        "print(json.dumps([s.path for s in discover(sys.argv[1:])]))"
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


# --- files that are not regular files -------------------------------------------------------------


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
        with pytest.raises(InputError, match=rf"^{regex.escape(str(found[0][0]))}: not a regular file \(a FIFO\)$"):
            train(files=[str(found[0][0])], vocab_size=300)  # at once: never opened to wait for a writer
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


# --- large .txt files in pieces -------------------------------------------------------------------

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
    pieces = list(readers.txt_chunks(io.BytesIO(text.encode()), "x.txt", pretokenizer, chunk_bytes))
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
    chunks = [c for c, _ in readers.txt_chunks(io.BytesIO(text.encode()), "x.txt", pretokenizer, chunk_bytes)]
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
    chunks = [c for c, _ in readers.txt_chunks(io.BytesIO(text.encode()), "x.txt", pretokenizer, 64)]
    # no cut in the first 64 bytes: up to the first one after them; then the last one within 64 bytes
    assert chunks == ["中文" * 5000 + " end", " of", " it" + "字" * 100]


def test_count_shards_on_a_txt_in_pieces_equals_the_whole_file(tmp_path, monkeypatch):
    text = "The cat sat.\nOn the mat, 12345 times! Don't  stop\n\n  now.<|endoftext|> é中 " * 300
    path = tmp_path / "big.txt"
    path.write_text(text)
    pretokenizer = Pretokenizer("o200k", ["<|endoftext|>"])
    monkeypatch.setattr(readers, "TXT_CHUNK_BYTES", 100)
    counts, stats, _ = count_shards(discover([str(path)]), pretokenizer, threads=2)
    assert stats.documents > 100  # it was read in pieces
    assert (counts.to_dict(), stats.pretokens, stats.special_tokens) == whole_counts(text, pretokenizer)
    assert stats.bytes == len(text.encode())


def test_a_reader_far_ahead_of_its_counters_counts_every_batch_once(tmp_path, monkeypatch):
    """The reader runs ahead while the counters load the compiled engine (`ReadAhead`): with room
    for a few batches or for none, on any number of threads, or started before the engine loads,
    every batch is counted once; a reader closed while it waits for room stops; and a bad file
    after many good ones is still the error, named."""
    import bpe.training.counting as counting

    texts = [f"doc {i} says {'la' * (i % 7)} to {i * 31 % 1000}!" for i in range(3000)]
    for k in range(30):
        write_parquet(tmp_path / "data" / f"part-{k:02d}.parquet", texts[k * 100 : (k + 1) * 100])
    expected = Counter(w.encode() for text in texts for w in regex.findall(NAMED_PATTERNS["gpt2"], text))
    shards = discover([str(tmp_path / "data")])
    for ahead in (1, 1 << 20):
        monkeypatch.setattr(counting, "READ_AHEAD_BYTES", ahead)
        for threads in (1, 2, 3):
            counts, stats, fingerprints = count_shards(shards, Pretokenizer("gpt2"), threads=threads)
            assert counts.to_dict() == expected and stats.documents == len(texts) and len(fingerprints) == 30
    # As a run starts it: before the engine loads, after the load window is read.
    counts, _, fingerprints = count_shards(
        shards, Pretokenizer("gpt2"), threads=2, reader=ShardReader(shards, "text", Pretokenizer("gpt2"), BusyCores())
    )
    assert counts.to_dict() == expected and len(fingerprints) == 30
    monkeypatch.setattr(counting, "READ_AHEAD_BYTES", 1)
    waiting = ShardReader(shards, "text", Pretokenizer("gpt2"))  # waits for room after its first batch
    waiting.close()  # what a run that fails before counting does: no reader left behind
    assert not [t for t in threading.enumerate() if t.name == "bpe-reader" and t.is_alive()]
    pq.write_table(pa.table({"body": ["no text column"]}), tmp_path / "data" / "part-99.parquet")
    with pytest.raises(InputError, match="part-99.parquet"):
        count_shards(discover([str(tmp_path / "data")]), Pretokenizer("gpt2"), threads=2)
    bad = discover([str(tmp_path / "data")])
    with pytest.raises(InputError, match="part-99.parquet"):
        count_shards(bad, Pretokenizer("gpt2"), threads=2, reader=ShardReader(bad, "text", Pretokenizer("gpt2")))


def test_invalid_utf8_in_a_later_piece_is_reported_at_its_byte_in_the_file(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"\xef\xbb\xbf" + b"word " * 1000 + b"\xc3(")
    shard = discover([str(path)])[0]
    with pytest.raises(InputError, match=r"bad.txt: invalid UTF-8 at byte 5003$"):
        list(read_batches(shard, pretokenizer=Pretokenizer("gpt2"), chunk_bytes=64))


# --- byte order marks, Arrow string layouts, empty corpora, threads -------------------------------


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
    column = {
        "dictionary": plain.dictionary_encode(),
        "string_view": plain.cast(pa.string_view()),
        "large_string": plain.cast(pa.large_string()),
    }[layout]
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


def not_utf8_parquet(path: Path, bad_row: int = 45) -> Path:
    """60 rows in row groups of 20, one of them not UTF-8 (Parquet does not check its strings)."""
    rows = [f"document {i} has a few words in it".encode() for i in range(60)]
    rows[bad_row] = b"bad \xff\xfe row"
    pq.write_table(pa.table({"text": pa.array(rows, pa.binary()).view(pa.string())}), path, row_group_size=20)
    return path


def test_parquet_text_that_is_not_utf8_is_named_by_file_and_row_however_it_is_counted(tmp_path):
    """Arrow checks Parquet's strings as the regex path reads them; the compiled scanners check them
    as they decode them, and the error names the same file and row all the same."""
    path = not_utf8_parquet(tmp_path / "bad-row.parquet", bad_row=45)
    said = []
    for compiled in (False, True):
        with pytest.raises(InputError) as caught:
            count_shards(discover([str(path)]), Pretokenizer("cl100k"), threads=2, compiled=compiled)
        said.append(str(caught.value))
    found = regex.match(
        rf"{regex.escape(str(path))}: rows (\d+)-\d+: Invalid UTF8 sequence at string index (\d+)$", said[0]
    )
    assert found and int(found[1]) + int(found[2]) == 45, said
    assert said[1] == said[0]


def test_a_counter_names_the_first_row_of_its_batch_that_is_not_utf8():
    """Rows are counted out of order (nulls dropped, documents holding special tokens cut apart last):
    the row named is the batch's own."""
    from bpe.errors import NotUtf8Error

    rows = [b"fine", None, b"ok <|endoftext|> \xc3(", b"caf\xc3\xa9", b"bad \xed\xa0\x80"]
    batch = pa.array(rows, pa.binary()).view(pa.string())
    for pattern in ("cl100k", r"\S+"):  # a compiled scanner, and the regex module
        counter = WordCounter(Pretokenizer(pattern, ["<|endoftext|>"]))
        with pytest.raises(NotUtf8Error, match=r"^a batch of documents: row 2 is not valid UTF-8$"):
            counter.add_arrow(batch)
    with pytest.raises(NotUtf8Error, match=r"row 1 is not valid UTF-8$"):
        WordCounter(Pretokenizer("gpt2")).add_arrow(batch[3:])


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
    """threads=None: the merge loop over a word table large enough to share runs a thread per
    core this process may use (`available_cores()`: its affinity mask and cgroup quota, not the
    machine's count) that no other process keeps busy, as the manifest's engine record says;
    pinned to one core, one thread. threads=1 is allowed and recorded, and every count learns the
    same merges. (The documents come from a generator: their size unknown, they do not take the
    path for small corpora, which runs no threads.)"""
    check_setting("threads", None)
    rng = random.Random(0)
    words = sorted({"".join(rng.choices("abcdefghij", k=7)) for _ in range(2 * THREADED_MERGE_MIN_WORDS)})
    assert len(words) > THREADED_MERGE_MIN_WORDS
    texts = [" ".join(words[i : i + 100]) for i in range(0, len(words), 100)]
    auto = train(iter(texts), vocab_size=300)
    assert auto.manifest.engine.threads == "auto" and auto.manifest.engine.compiled
    assert 1 <= auto.manifest.engine.merge_threads <= available_cores()
    one = train(texts, vocab_size=300, threads=1)
    assert (one.manifest.engine.threads, one.manifest.engine.merge_threads) == (1, 1)
    assert one.merges == auto.merges
    if not hasattr(os, "sched_setaffinity"):
        return
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(before)})
        pinned = train(iter(texts), vocab_size=300)
    finally:
        os.sched_setaffinity(0, before)
    assert pinned.manifest.engine.merge_threads == 1 and pinned.merges == auto.merges


# --- the inputs users already have ----------------------------------------------------------------
# Every format trains the merges of the same documents given as Parquet rows (proven elsewhere
# against the reference trainer), and lines mode is checked against the reference trainer over the
# `regex` module's split of each line. Errors are one line naming the file, row or setting.

# Documents of every kind the readers must keep intact: several lines, CR LF, quotes, commas and
# tabs (CSV/TSV), non-ASCII, an empty one, leading and trailing spaces, a JSON-looking string.
ROWS = [
    "The cat sat on the mat.\nIt was a sunny day, and the cat was happy.",
    "Don't stop now: 12345 times!\r\nSay \"hello\", then 'goodbye'.",
    "é中文 — naïve café, 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 🙂",
    "",
    "  tabs\tand  spaces  ",
    '{"text": "not a record"}',
] + [f"line {i}: the quick brown fox jumps over the lazy dog {i * 7}" for i in range(40)]
# One document per line: lines mode reads these from a text file.
LINES = [row.replace("\r\n", " ").replace("\n", " ") for row in ROWS if row]
VOCAB = 330
CODECS = {
    "": lambda data: data,
    ".gz": lambda data: __import__("gzip").compress(data),
    ".bz2": lambda data: __import__("bz2").compress(data),
    ".xz": lambda data: __import__("lzma").compress(data),
    ".zst": lambda data: __import__("zstandard").ZstdCompressor().compress(data),
}


def as_parquet(path: Path, rows, column: str = "text") -> Path:
    pq.write_table(pa.table({column: pa.array(list(rows), pa.string())}), path)
    return path


def write_format(root: Path, fmt: str, rows: list[str], suffix: str = "") -> tuple[Path, dict]:
    """The rows written in format `fmt` (compressed by `suffix`); returns the input and train() options."""
    import csv as csv_module

    def save(name: str, data: bytes) -> Path:
        path = root / (name + suffix)
        path.write_bytes(CODECS[suffix](data))
        return path

    if fmt == "jsonl":
        return save("rows.jsonl", "".join(json.dumps({"text": r, "n": 1}) + "\n" for r in rows).encode()), {}
    if fmt == "json strings":
        return save("rows.json", json.dumps(rows, ensure_ascii=False).encode()), {}
    if fmt == "json objects":
        data = json.dumps([{"id": i, "body": r} for i, r in enumerate(rows)], indent=1).encode()
        return save("rows.json", data), {"text_column": "body"}
    if fmt == "json lines in .json":
        return save("rows.json", "".join(json.dumps({"text": r}) + "\n" for r in rows).encode()), {}
    if fmt in ("csv", "tsv"):
        out = io.StringIO(newline="")
        writer = csv_module.writer(out, delimiter="," if fmt == "csv" else "\t")
        writer.writerow(["id", "body"])
        writer.writerows([i, r] for i, r in enumerate(rows))
        return save(f"rows.{fmt}", out.getvalue().encode()), {"text_column": "body"}
    if fmt == "text, one file per document":
        folder = root / "docs"
        folder.mkdir()
        for i, r in enumerate(rows):
            (folder / f"doc-{i:03d}.txt{suffix}").write_bytes(CODECS[suffix](r.encode()))
        return folder, {}
    if fmt == "text lines (corpus.en)":
        return save("corpus.en", "\r\n".join(rows).encode() + b"\n\n"), {"text_format": "lines"}
    raise ValueError(fmt)


FORMATS = [
    "jsonl",
    "json strings",
    "json objects",
    "json lines in .json",
    "csv",
    "tsv",
    "text, one file per document",
    "text lines (corpus.en)",
]


@pytest.mark.parametrize("suffix", list(CODECS))
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_trains_the_merges_of_the_same_rows_as_parquet(tmp_path, fmt, suffix):
    rows = LINES if fmt.startswith("text lines") else ROWS
    oracle = train(files=as_parquet(tmp_path / "oracle.parquet", rows), vocab_size=VOCAB, pattern="cl100k")
    (tmp_path / "in").mkdir()
    path, options = write_format(tmp_path / "in", fmt, rows, suffix)
    tok = train(files=[str(path)], vocab_size=VOCAB, pattern="cl100k", **options)
    assert tok.merges == oracle.merges
    counts, expected = tok.manifest["counts"], oracle.manifest["counts"]
    assert (counts["bytes"], counts["pretokens"], counts["unique_words"]) == (
        expected["bytes"],
        expected["pretokens"],
        expected["unique_words"],
    )
    assert counts["documents"] == len(rows)
    assert tok.manifest["settings"]["text_format"] == options.get("text_format", "doc")


def test_a_peer_style_corpus_en_trains_from_the_command(tmp_path, capsys):
    from bpe.cli import main

    (tmp_path / "corpus.en").write_text("\n".join(LINES) + "\n")
    assert main(["train", str(tmp_path / "corpus.en"), "--vocab-size", "300", "--out", str(tmp_path / "tok")]) == 0
    printed = capsys.readouterr().out
    assert "inputs    1 text; text files read one document per file (--text-format doc)" in printed
    assert (
        train(files=str(tmp_path / "corpus.en"), vocab_size=300).merges
        == train(["\n".join(LINES) + "\n"], vocab_size=300).merges
    )
    assert (
        main(
            [
                "train",
                str(tmp_path / "corpus.en"),
                "--vocab-size",
                "300",
                "--out",
                str(tmp_path / "tok2"),
                "--text-format",
                "lines",
            ]
        )
        == 0
    )
    assert "text files read one document per line (--text-format lines)" in capsys.readouterr().out


# --- lines mode: exact counts, pieces never cross a line ---------------------------------------

LINE_FRAGMENTS = FRAGMENTS + ["\n", "\r\n", "\n\n", " \n ", "\r", "word\n", ".\n/"]
LINE_TEXTS = st.lists(st.sampled_from(LINE_FRAGMENTS), max_size=80).map("".join)


def reference_lines(text: str) -> list[str]:
    """The definition of lines mode: split at \\n, drop one \\r before it, drop empty lines."""
    return [line for line in (part.removesuffix("\r") for part in text.split("\n")) if line]


@settings(max_examples=200, deadline=None)
@given(text=LINE_TEXTS, pattern=st.sampled_from(NAMED), block=st.integers(1, 16), bom=st.booleans())
def test_lines_mode_counts_equal_a_regex_split_of_each_line(tmp_path_factory, text, pattern, block, bom):
    path = tmp_path_factory.mktemp("lines") / "train.en"
    path.write_bytes(b"\xef\xbb\xbf" * bom + text.encode())
    shard = with_options(discover([str(path)]), text_format="lines")[0]
    saved = readers.TXT_CHUNK_BYTES
    readers.TXT_CHUNK_BYTES = block  # blocks cut anywhere: lines longer than a block, CR LF across blocks
    try:
        counts, stats, _ = count_shards([shard], Pretokenizer(pattern), threads=2)
    finally:
        readers.TXT_CHUNK_BYTES = saved
    lines = reference_lines(text)
    expected = Counter(p.encode() for line in lines for p in regex.findall(NAMED_PATTERNS[pattern], line))
    assert counts.to_dict() == dict(expected)
    assert (stats.documents, stats.bytes) == (len(lines), sum(len(line.encode()) for line in lines))


def test_lines_mode_trains_the_reference_trainers_merges(tmp_path):
    text = "\n".join(LINES[:20]) + "\r\nlast line without an ending"
    (tmp_path / "train.en.gz").write_bytes(CODECS[".gz"](text.encode()))
    tok = train(files=str(tmp_path / "train.en.gz"), vocab_size=VOCAB, pattern="gpt2", text_format="lines")
    words = Counter(p.encode() for line in reference_lines(text) for p in regex.findall(NAMED_PATTERNS["gpt2"], line))
    assert tok.merges == train_reference(dict(words), VOCAB - 256)
    assert not any(b"\n" in tok.vocab[256 + i] for i in range(len(tok.merges)))  # no line ending is text


# --- the directory walk, stdin -------------------------------------------------------------------


def test_a_walk_reads_any_text_and_reports_what_it_skipped_in_one_line(tmp_path, capsys):
    from bpe.cli import main

    data = tmp_path / "data"
    (data / ".git").mkdir(parents=True)
    (data / ".git" / "HEAD").write_text("ref: x")
    (data / "_delta_log").mkdir()
    (data / "_delta_log" / "0.json").write_text('{"add": {}}\n')
    (data / "sub").mkdir()
    (data / "sub" / "train.en").write_text("the cat sat on the mat")
    (data / "README").write_text("a readme is text too")
    (data / ".DS_Store").write_bytes(b"\0\0\1Bud1")
    (data / "_SUCCESS").write_text("")
    (data / "logo.png").write_bytes(b"\x89PNG\r\n")
    (data / "model.weights").write_bytes(b"\x01\x02\0\0binary")
    (data / "old.parquet.gz").write_bytes(b"")
    as_parquet(data / "rows.parquet", ["a parquet row"])
    skipped: list[tuple[str, str]] = []
    shards = discover([str(data)], skipped)
    assert [(os.path.relpath(s.path, data), s.kind) for s in shards] == [
        ("README", "txt"),
        ("rows.parquet", "parquet"),
        ("sub/train.en", "txt"),
    ]
    reasons = {os.path.relpath(p.rstrip("/"), data): r for p, r in skipped}
    assert reasons == {
        ".git": "hidden",
        ".DS_Store": "hidden",
        "_delta_log": "_-prefixed metadata",
        "_SUCCESS": "_-prefixed metadata",
        "logo.png": "binary by suffix",
        "model.weights": "binary by content (a NUL byte)",
        "old.parquet.gz": "compressed Parquet",
    }
    assert main(["train", str(data), "--vocab-size", "270", "--out", str(tmp_path / "tok"), "--quiet"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bpe: skipped 7 file(s) or folder(s) in directory walks and globs: ")
    assert "2 hidden (.git/, .DS_Store)" in err[0] and "1 binary by content (a NUL byte) (model.weights)" in err[0]
    with pytest.warns(UserWarning, match="^skipped 7 file"):
        train(files=str(data), vocab_size=270)
    # a glob follows the same rules; named explicitly, a file is read whatever its suffix
    assert [os.path.basename(s.path) for s in discover([f"{data}/*"])] == ["README", "rows.parquet"]
    assert discover([str(data / "model.weights")])[0].kind == "txt"


def test_a_walk_or_glob_with_nothing_to_read_says_what_it_skipped(tmp_path):
    (tmp_path / "logo.png").write_bytes(b"\x89PNG")
    with pytest.raises(InputError, match=r"holds no file to read \(skipped 1 file\(s\) .*1 binary by suffix"):
        discover([str(tmp_path)], [])
    with pytest.raises(InputError, match=r"\*\.png: matches no file to read"):
        discover([f"{tmp_path}/*.png"])


class FakeStdin:
    """stdin with bytes behind it; a second read gets nothing, as a pipe's would."""

    def __init__(self, data: bytes, tty: bool = False) -> None:
        self.buffer, self.tty = io.BytesIO(data), tty

    def isatty(self) -> bool:
        return self.tty

    def read(self) -> str:
        return self.buffer.read().decode()


def test_stdin_is_read_once_and_fingerprinted_by_its_content(tmp_path, monkeypatch, capsys):
    import hashlib

    from bpe.cli import main

    data = ("\n".join(LINES) + "\n").encode()
    monkeypatch.setattr(sys, "stdin", FakeStdin(data))
    assert (
        main(
            [
                "train",
                "-",
                "--vocab-size",
                str(VOCAB),
                "--text-format",
                "lines",
                "--out",
                str(tmp_path / "tok"),
                "--quiet",
            ]
        )
        == 0
    )
    manifest = json.loads((tmp_path / "tok" / "manifest.json").read_text())
    assert manifest["data"]["shards"] == [
        {"path": "<stdin>", "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    ]
    oracle = train(files=as_parquet(tmp_path / "o.parquet", LINES), vocab_size=VOCAB)
    assert json.loads((tmp_path / "tok" / "manifest.json").read_text())["result"]["merges"] == len(oracle.merges)
    from bpe.tokenizer import Tokenizer

    assert Tokenizer.load(tmp_path / "tok").merges == oracle.merges
    monkeypatch.setattr(sys, "stdin", FakeStdin(b"ok \xff", tty=False))
    assert main(["train", "-", "--vocab-size", "300", "--out", str(tmp_path / "bad"), "--quiet"]) == 1
    assert capsys.readouterr().err.strip() == "bpe: error: <stdin>: invalid UTF-8 at byte 3"
    monkeypatch.setattr(sys, "stdin", FakeStdin(b"", tty=True))
    with pytest.raises(InputError, match="^-: stdin is a terminal"):
        discover(["-"])
    assert not (tmp_path / "bad").exists()


# --- one-line errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, content, options, message",
    [
        ("train.en", b"good text \xff\xfe more", [], r"train.en: invalid UTF-8 at byte 10$"),
        (
            "a.txt.gz",
            CODECS[".gz"](b"ok\n" * 5 + b"\xc3("),
            [],
            r"a.txt.gz \(decompressed\): invalid UTF-8 at byte 15$",
        ),
        (
            "b.en.xz",
            CODECS[".xz"](b"ok\nok\n\xff\n"),
            ["--text-format", "lines"],
            r"b.en.xz \(decompressed\): invalid UTF-8 at byte 6$",
        ),
        ("c.txt.gz", b"not gzip at all", [], r"c.txt.gz: cannot read it as gzip data \(BadGzipFile: .*\)$"),
        (
            "d.jsonl.zst",
            CODECS[".zst"](b'{"text": "ok"}\n' * 50)[:-4],
            [],
            r"d.jsonl.zst: cannot read it as zstd data \(EOFError: the file ends inside a zstd frame",
        ),
        ("d2.txt.gz", CODECS[".gz"](b"ok " * 100)[:-9], [], r"d2.txt.gz: cannot read it as gzip data \(EOFError: "),
        ("d3.txt.zst", b"\x28\xb5\x2f\xfdgarbage", [], r"d3.txt.zst: cannot read it as zstd data \(ZstdError: "),
        (
            "e.json",
            b'[{"text": "ok"}, {"body": "x"}]',
            [],
            r"e.json: element 1: no field 'text'; choose one with --text-column$",
        ),
        ("f.json", b'["ok", 3]', [], r"f.json: element 1: holds int, not a string$"),
        ("g.json", b'["ok",\n oops]', [], r"g.json:2: invalid JSON \(Expecting value\)$"),
        (
            "h.csv",
            b"id,body\n1,x\n",
            [],
            r"h.csv: no column 'text' \(columns: id, body\); choose one with --text-column$",
        ),
        ("i.csv", b"id,text\n1,x\n2\n", [], r"i.csv:3: 1 field\(s\), no 'text'$"),
        ("j.csv", b"text\nok\n\xff\n", [], r"j.csv: invalid UTF-8 at byte 8$"),
        ("k.parquet.gz", b"", [], r"k.parquet.gz: a compressed Parquet file cannot be read"),
        ("l.txt", b"text", ["--limit", "10"], r"--limit: expected a size such as 10MB, .* got '10'$"),
        ("l.txt", b"text", ["--limit", "1.5rows"], r"--limit: expected .* got '1.5rows'$"),
        ("l.txt", b"text", ["--sample", "0"], r"--sample: expected a fraction of rows to keep, above 0 and at most 1"),
        ("l.txt", b"text", ["--seed", "-1"], r"--seed: expected an integer >= 0, got -1$"),
    ],
    ids=lambda value: value if isinstance(value, str) and len(value) < 16 else "",
)
def test_bad_inputs_and_settings_fail_in_one_line_writing_nothing(tmp_path, capsys, name, content, options, message):
    from bpe.cli import main

    (tmp_path / name).write_bytes(content)
    out = tmp_path / "tok"
    assert main(["train", str(tmp_path / name), "--vocab-size", "300", "--out", str(out), "--quiet", *options]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and regex.search(message, err[0]), err
    assert not out.exists()


def test_a_missing_codec_package_is_named_in_one_line(tmp_path, monkeypatch):
    import fsspec.compression

    (tmp_path / "a.txt.zst").write_bytes(CODECS[".zst"](b"some text"))
    monkeypatch.delitem(fsspec.compression.compr, "zstd")
    with pytest.raises(
        InputError, match=r"a.txt.zst: reading zstd files needs the zstandard package: pip install zstandard$"
    ):
        train(files=str(tmp_path / "a.txt.zst"), vocab_size=300)


def test_text_format_must_be_doc_or_lines(tmp_path):
    with pytest.raises(SettingsError, match="^text_format: expected one of doc, lines, got 'line'$"):
        train(["x y"], vocab_size=300, text_format="line")


# --- train() in Python: str, iterables of str or dicts, datasets -----------------------------------


@pytest.mark.parametrize("bad", ["some text", b"some bytes", {"text": "a dict"}])
def test_a_bare_string_is_refused_with_a_clear_type_error(bad):
    with pytest.raises(TypeError, match=r"^texts: expected an iterable of documents.*got a (str|bytes|dict)"):
        train(bad, vocab_size=300)


def test_iterables_of_strings_and_of_dicts_train_as_the_same_rows(tmp_path):
    oracle = train(files=as_parquet(tmp_path / "o.parquet", ROWS), vocab_size=VOCAB).merges
    assert train((r for r in ROWS), vocab_size=VOCAB).merges == oracle
    assert train(tuple(ROWS), vocab_size=VOCAB).merges == oracle
    assert train([{"text": r, "id": i} for i, r in enumerate(ROWS)], vocab_size=VOCAB).merges == oracle
    assert train(({"body": r} for r in ROWS), vocab_size=VOCAB, text_column="body").merges == oracle
    assert train(pa.table({"body": ROWS}), vocab_size=VOCAB, text_column="body").merges == oracle
    with pytest.raises(InputError, match=r"^texts: row 1 has no field 'text' \(fields: body\)"):
        train([{"text": "x"}, {"body": "y"}], vocab_size=300)
    with pytest.raises(TypeError, match=r"^texts: row 2 is a int, not a str or a dict$"):
        train(["a", "b", 3], vocab_size=300)


def test_a_hugging_face_dataset_is_read_in_batches_never_whole(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    oracle = train(files=as_parquet(tmp_path / "o.parquet", ROWS), vocab_size=VOCAB).merges
    dataset = datasets.Dataset.from_dict({"id": list(range(len(ROWS))), "text": ROWS})
    batch_sizes: list[int] = []
    for cls in (datasets.Dataset, datasets.IterableDataset):
        real_iter = cls.iter

        def spy(self, batch_size, *args, real_iter=real_iter, **kwargs):
            batch_sizes.append(batch_size)
            return real_iter(self, batch_size, *args, **kwargs)

        monkeypatch.setattr(cls, "iter", spy)
        for whole in ("to_list", "to_dict", "to_pandas", "__iter__"):  # what converting it whole would call
            if hasattr(cls, whole):
                monkeypatch.setattr(cls, whole, lambda *a, **k: pytest.fail("the dataset was converted whole"))
    assert train(dataset, vocab_size=VOCAB).merges == oracle
    assert train(dataset.to_iterable_dataset(num_shards=2), vocab_size=VOCAB).merges == oracle
    assert batch_sizes.count(8192) == 2  # once each, in batches of 8,192 rows
    renamed = dataset.rename_column("text", "body")
    assert train(renamed, vocab_size=VOCAB, text_column="body").merges == oracle
    with pytest.raises(InputError, match=r"^texts: the dataset has no column 'text' \(columns: id, body\)"):
        train(renamed, vocab_size=VOCAB)


# --- --limit and --sample --------------------------------------------------------------------------


def fnv_sample(rows, fraction: float, seed: int) -> list:
    """The documented --sample rule, written out independently: FNV-1a 64 of
    "bpe-sample:{seed}:" + the row's UTF-8 bytes, modulo a million, below fraction x a million."""

    def fnv(data: bytes) -> int:
        h = 0xCBF29CE484222325
        for byte in data:
            h = ((h ^ byte) * 0x100000001B3) % (1 << 64)
        return h

    return [r for r in rows if fnv(f"bpe-sample:{seed}:{r}".encode()) % 1_000_000 < round(fraction * 1_000_000)]


def cut_to_bytes(rows, n: int) -> list[str]:
    """The first n bytes of the documents, in order: the one crossing n cut at a character boundary."""
    kept = []
    for row in rows:
        size = len(row.encode())
        if size > n:
            kept.append(row.encode()[:n].decode("utf-8", "ignore"))
            break
        kept.append(row)
        n -= size
        if n == 0:
            break
    return kept


def three_shards(root: Path) -> list[Path]:
    """ROWS over three files of three formats, in path order: a.parquet, b.jsonl.gz, c.en (lines)."""
    as_parquet(root / "a.parquet", ROWS[:10])
    (root / "b.jsonl.gz").write_bytes(
        CODECS[".gz"]("".join(json.dumps({"text": r}) + "\n" for r in ROWS[10:25]).encode())
    )
    (root / "c.en").write_text("\n".join(ROWS[25:]) + "\n")
    return [root / "a.parquet", root / "b.jsonl.gz", root / "c.en"]


@pytest.mark.parametrize(
    "limit, kept",
    [
        ("3rows", ROWS[:3]),
        ("12rows", ROWS[:12]),
        ("30rows", ROWS[:30]),
        ("150B", cut_to_bytes(ROWS, 150)),
        ("1KB", cut_to_bytes(ROWS, 1000)),
        ("1.5KiB", cut_to_bytes(ROWS, 1536)),
        ("1GB", ROWS),
    ],
)
def test_limit_trains_on_the_first_rows_or_bytes_in_input_order(tmp_path, limit, kept):
    files = three_shards(tmp_path)
    tok = train(files=[str(f) for f in reversed(files)], vocab_size=VOCAB, text_format="lines", limit=limit)
    oracle = train(kept, vocab_size=VOCAB)
    assert tok.merges == oracle.merges
    assert tok.manifest["counts"]["bytes"] == sum(len(r.encode()) for r in kept)
    assert tok.manifest["settings"]["limit"] == limit
    assert tok.manifest["counts"]["documents"] == len(kept)
    read = [os.path.basename(s["path"]) for s in tok.manifest["data"]["shards"]]  # the files after it are not read
    assert read == ["a.parquet", "b.jsonl.gz", "c.en"][: 1 if len(kept) <= 10 else 2 if len(kept) <= 25 else 3]


def test_limit_cuts_a_large_document_exactly_where_the_text_reaches_it(tmp_path, monkeypatch):
    text = "The cat sat.\nOn the mat, 12345 times! é中 Don't  stop\n\n  now. " * 400
    (tmp_path / "big.txt").write_text(text)
    monkeypatch.setattr(readers, "TXT_CHUNK_BYTES", 64)  # read in pieces: the cut falls inside one
    for n in (1000, 5003, 12345):
        tok = train(files=str(tmp_path / "big.txt"), vocab_size=VOCAB, pattern="o200k", limit=f"{n}B")
        assert tok.merges == train(cut_to_bytes([text], n), vocab_size=VOCAB, pattern="o200k").merges
        assert tok.manifest["counts"]["bytes"] == len(cut_to_bytes([text], n)[0].encode())


@pytest.mark.parametrize("fraction, seed", [(0.5, 0), (0.5, 1), (0.3, 7), (1.0, 0)])
def test_sample_keeps_the_rows_a_seeded_hash_chooses_in_every_format(tmp_path, fraction, seed):
    files = three_shards(tmp_path)
    kept = fnv_sample(ROWS, fraction, seed)
    tok = train(files=[str(f) for f in files], vocab_size=VOCAB, text_format="lines", sample=fraction, seed=seed)
    assert tok.merges == train(kept, vocab_size=VOCAB).merges
    assert tok.manifest["counts"]["documents"] == len(fnv_sample(ROWS, fraction, seed))  # "" of a.parquet too
    assert train(ROWS, vocab_size=VOCAB, sample=fraction, seed=seed).merges == tok.merges  # in-memory texts too
    settings_ = tok.manifest["settings"]
    assert (settings_["sample"], settings_["seed"]) == (fraction, seed)


def test_samples_differ_by_seed_and_sample_before_limit(tmp_path):
    files = three_shards(tmp_path)
    rows = [r for r in ROWS if r]
    assert fnv_sample(rows, 0.5, 0) != fnv_sample(rows, 0.5, 1)  # the seed matters
    tok = train(files=[str(f) for f in files], vocab_size=VOCAB, text_format="lines", sample=0.5, seed=1, limit="7rows")
    assert tok.merges == train(fnv_sample(ROWS, 0.5, 1)[:7], vocab_size=VOCAB).merges
    assert tok.manifest["counts"]["documents"] == 7


def test_sample_in_doc_mode_keeps_whole_files_by_their_content_hash(tmp_path):
    import hashlib

    folder = tmp_path / "docs"
    folder.mkdir()
    for i, row in enumerate(ROWS):
        (folder / f"{i:03d}.txt").write_text(row)
    digests = {hashlib.sha256(r.encode()).hexdigest(): r for r in ROWS}
    kept = [digests[d] for d in fnv_sample(list(digests), 0.5, 3)]
    tok = train(files=str(folder), vocab_size=VOCAB, sample=0.5, seed=3)
    assert tok.merges == train(kept, vocab_size=VOCAB).merges
    assert tok.manifest["counts"]["documents"] == len(kept)


# --- both engines read the same: the Dask engine on a real local cluster ------------------------


@pytest.fixture
def dask_client(two_workers):
    """The test process's LocalCluster on two workers (tests/conftest.py)."""
    return two_workers


def on_both_engines(client, oracle: list, keys=("documents", "bytes", "pretokens"), **options) -> None:
    """Train on the local engine and on the Dask cluster: both give the merges of `oracle`'s rows
    (trained in memory), and count the same documents, bytes and pre-tokens."""
    options = {"vocab_size": VOCAB, "pattern": "cl100k", **options}
    expected = train(oracle, vocab_size=VOCAB, pattern="cl100k")
    local = train(**options)
    on_dask = train(**options, engine="dask", client=client)
    assert local.merges == expected.merges and on_dask.merges == expected.merges
    for key in keys:
        assert on_dask.manifest["counts"][key] == local.manifest["counts"][key] == expected.manifest["counts"][key], key


@pytest.mark.services
@pytest.mark.parametrize("case", ["compressed formats", "lines mode", "limit and sample", "stdin and dicts"])
def test_the_dask_engine_reads_every_input_as_the_local_engine_does(dask_client, tmp_path, case, monkeypatch):
    if case == "compressed formats":
        for fmt, suffix in (("jsonl", ".zst"), ("csv", ".gz"), ("json objects", ".xz")):
            folder = tmp_path / fmt.replace(" ", "-")
            folder.mkdir()
            path, options = write_format(folder, fmt, ROWS, suffix)
            on_both_engines(dask_client, ROWS, files=str(path), **options)
    elif case == "lines mode":
        path, options = write_format(tmp_path, "text lines (corpus.en)", LINES, ".bz2")
        on_both_engines(dask_client, LINES, files=str(path), **options)
        # and one document per file, cut by --limit: read in 64-byte pieces here, whole on the workers
        text = "\n".join(ROWS) * 20
        (tmp_path / "big.txt.gz").write_bytes(CODECS[".gz"](text.encode()))
        monkeypatch.setattr(readers, "TXT_CHUNK_BYTES", 64)
        cut = cut_to_bytes([text], 7777)  # (the local engine counts each piece as a document: not compared)
        on_both_engines(dask_client, cut, ("bytes", "pretokens"), files=str(tmp_path / "big.txt.gz"), limit="7777B")
    elif case == "limit and sample":
        files = [str(f) for f in three_shards(tmp_path)]
        pq.write_table(pa.table({"text": ROWS[:10]}), files[0], row_group_size=3)  # Dask reads row groups apart
        for options, oracle in (
            ({"sample": 0.6, "seed": 2}, fnv_sample(ROWS, 0.6, 2)),
            ({"sample": 0.7, "seed": 2, "limit": "700B"}, cut_to_bytes(fnv_sample(ROWS, 0.7, 2), 700)),
            ({"limit": "5rows"}, ROWS[:5]),
        ):
            on_both_engines(dask_client, oracle, files=files, text_format="lines", **options)
    else:
        monkeypatch.setattr(sys, "stdin", FakeStdin(("\n".join(LINES) + "\n").encode()))
        on_both_engines(dask_client, LINES, files=discover(["-"]), text_format="lines")
        on_both_engines(dask_client, LINES, texts=[{"text": t} for t in LINES])


# --- a lone surrogate in in-memory texts: refused naming its row, on both engines ---------------

SURROGATE_AT = 9000  # past the first batch of 8192 documents: the row counts across batches


def texts_with_a_surrogate(shape: str):
    rows = ["ok", None] + ["fine text"] * (SURROGATE_AT - 2) + ["bad \ud800 text", "after"]
    if shape == "dicts":
        return [{"text": row} for row in rows]
    return iter(rows) if shape == "generator" else rows


@pytest.mark.parametrize("options", [{}, {"sample": 1.0}, {"limit": "10MB"}], ids=["all", "sample", "limit"])
@pytest.mark.parametrize("shape", ["list", "dicts", "generator"])
def test_a_lone_surrogate_in_texts_is_refused_naming_its_row(shape, options):
    with pytest.raises(InvalidTextError) as raised:
        train(texts_with_a_surrogate(shape), vocab_size=300, **options)
    message = str(raised.value)
    assert message.startswith(f"texts: row {SURROGATE_AT} (0-based): lone surrogate U+D800 at character 4"), message
    assert "\n" not in message


@pytest.mark.services
def test_the_dask_engine_refuses_a_lone_surrogate_naming_its_row(dask_client):
    with pytest.raises(InvalidTextError) as raised:
        train(["ok", "bad \ud800 text"], vocab_size=VOCAB, engine="dask", client=dask_client)
    assert str(raised.value).startswith("texts: row 1 (0-based): lone surrogate U+D800")

"""Word counts out and in: `bpe count` / `bpe.count()` write a corpus's pre-token counts as Parquet,
and `train(counts=...)` / `bpe train --counts` learn from them, or from counts another engine
(DuckDB here) wrote, exactly the merges of the text they were counted from."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bpe import count, train
from bpe.errors import InputError, SettingsError
from bpe.pretokenize import Pretokenizer
from tests.conftest import any_text, stdlib_paragraphs, write_parquet
from tests.reference import train_reference

BPE = str(Path(sys.executable).with_name("bpe"))


def word_counts(texts: list[str], pattern: str = "cl100k", special_tokens: tuple[str, ...] = ()) -> Counter:
    """The reference's counts: each document split by the `regex` module, as the textbook does."""
    split = Pretokenizer(pattern, special_tokens)
    return Counter(word.encode() for text in texts for word in split.words(text))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(any_text("ab <|x|>"), min_size=1, max_size=8), st.integers(257, 320), st.sampled_from(["gpt2", "cl100k"])
)
def test_counts_saved_and_read_back_train_the_merges_of_their_text(tmp_path_factory, texts, vocab_size, pattern):
    out = tmp_path_factory.mktemp("counts") / "counts"
    counted = count(texts, pattern=pattern, special_tokens=["<|x|>"])
    assert counted.counts.to_dict() == word_counts(texts, pattern, ("<|x|>",))
    counted.save(out)
    if not counted.counts.to_dict():
        with pytest.raises(InputError):
            train(counts=out, vocab_size=vocab_size)
        return
    from_counts = train(counts=out, vocab_size=vocab_size)
    from_text = train(texts, vocab_size=vocab_size, pattern=pattern, special_tokens=["<|x|>"])
    assert from_counts.merges == from_text.merges
    assert from_counts.pattern == pattern and from_counts.special_tokens == from_text.special_tokens
    expected = train_reference(dict(word_counts(texts, pattern, ("<|x|>",))), vocab_size - 257)
    assert [(a, b) for a, b in from_counts.merges] == expected


def on_engine(engine: str, request) -> dict:
    """`train()`'s engine options: the local engine, or the Dask engine on the test process's cluster."""
    return {} if engine == "local" else {"engine": "dask", "client": request.getfixturevalue("two_workers")}


@pytest.mark.parametrize("engine", ["local", pytest.param("dask", marks=pytest.mark.services)])
def test_counts_from_elsewhere_are_summed_across_rows_and_files_whatever_their_order(tmp_path, request, engine):
    """Another engine's partitions repeat a word in several rows and files, as strings or bytes,
    in any order, with any integer type: the merges are those of the counts summed, on the local
    engine and on Dask workers that each read some of the files."""
    texts = stdlib_paragraphs()[:400]
    words = list(word_counts(texts).items())
    counts = tmp_path / "counts"
    counts.mkdir()
    halves = [(word, n // 2) for word, n in words if n // 2] + [(word, n - n // 2) for word, n in words]
    for i in range(3):  # three partitions, each a third of the rows, reversed: order does not matter
        part = halves[i::3][::-1]
        strings = i == 1
        pq.write_table(
            pa.table({
                "word": pa.array([w.decode() if strings else w for w, _ in part], pa.string() if strings else None),
                "count": pa.array([n for _, n in part], pa.int32() if i == 2 else pa.int64()),
            }),
            counts / f"part-{i:05d}.parquet",
        )  # fmt: skip
    (counts / "_SUCCESS").write_text("")  # what Spark leaves beside its output
    tok = train(counts=counts, vocab_size=800, **on_engine(engine, request))
    assert tok.merges == train(texts, vocab_size=800).merges
    assert [(a, b) for a, b in tok.merges] == train_reference(dict(words), 800 - 256)
    assert tok.manifest.counts.pretokens == sum(n for _, n in words)


def test_duckdb_counting_with_our_pretokenizer_trains_the_merges_of_the_text(tmp_path):
    """The recipe of docs/training/counts.md: DuckDB reads the Parquet text, splits each row with
    our pre-tokenizer as a Python function, counts and writes Parquet; we train on it."""
    duckdb = pytest.importorskip("duckdb")
    texts = stdlib_paragraphs()[:600] + ["two<|endoftext|>documents", None]
    data = write_parquet(tmp_path / "data" / "part-0.parquet", texts)
    split = Pretokenizer("o200k", ["<|endoftext|>"]).words
    con = duckdb.connect()
    con.create_function("pretokens", split, ["VARCHAR"], "VARCHAR[]")
    (tmp_path / "counts").mkdir()
    con.sql(f"""
        COPY (
            SELECT encode(word) AS word, count(*) AS count
            FROM (SELECT unnest(pretokens(text)) AS word FROM read_parquet('{tmp_path}/data/*.parquet'))
            GROUP BY word
        ) TO '{tmp_path}/counts/part-0.parquet' (FORMAT parquet)
    """)
    tok = train(counts=tmp_path / "counts", vocab_size=1000, pattern="o200k", special_tokens=["<|endoftext|>"])
    assert tok.merges == train(files=data, vocab_size=1000, pattern="o200k", special_tokens=["<|endoftext|>"]).merges


def test_bpe_count_then_train_on_the_counts_equals_training_on_the_text(tmp_path):
    data = write_parquet(tmp_path / "data.parquet", stdlib_paragraphs()[:500] + ["a<|endoftext|>b"])
    special = ["--special-token", "<|endoftext|>"]
    done = run("count", data, "--pattern", "gpt2", *special, "--out", tmp_path / "counts")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.startswith("counted ") and done.stdout.rstrip().endswith(
        f"wrote {tmp_path}/counts/counts.parquet"
    )
    record = json.loads((tmp_path / "counts" / "counts.json").read_text())
    assert record["pattern"] == "gpt2" and record["special_tokens"] == ["<|endoftext|>"]
    assert record["stats"]["special_tokens"] == {"<|endoftext|>": 1}
    table = pq.read_table(tmp_path / "counts" / "counts.parquet")
    assert (
        table.schema.field("word").type in (pa.binary(), pa.large_binary())
        and table.schema.field("count").type == pa.int64()
    )

    # The pattern and special tokens come from the record: the same merges as the text's.
    trained = run(
        "train", "--counts", tmp_path / "counts", "--vocab-size", "700", *special, "--out", tmp_path / "a", "--quiet"
    )
    assert trained.returncode == 0, trained.stderr
    from_text = run(
        "train", data, "--pattern", "gpt2", "--vocab-size", "700", *special, "--out", tmp_path / "b", "--quiet"
    )
    assert from_text.returncode == 0, from_text.stderr
    assert (tmp_path / "a" / "merges.txt").read_text() == (tmp_path / "b" / "merges.txt").read_text()
    data = json.loads((tmp_path / "a" / "manifest.json").read_text())["data"]  # what it was trained on
    assert [shard["path"] for shard in data["shards"]] == [str(tmp_path / "counts" / "counts.parquet")]

    # Written once: an existing counts directory is kept unless --force.
    again = run("count", data, "--out", tmp_path / "counts")
    assert again.returncode == 1 and again.stderr.count("\n") == 1 and "--force" in again.stderr, again.stderr
    assert json.loads((tmp_path / "counts" / "counts.json").read_text())["pattern"] == "gpt2"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"token": pa.array([b"a"]), "count": pa.array([1])}, "has no 'word' column"),
        ({"word": pa.array([b"a"]), "n": pa.array([1])}, "has no 'count' column"),
        ({"word": pa.array([b"a", b"b"]), "count": pa.array([3, -1])}, "row 1 counts -1; counts must be positive"),
        ({"word": pa.array([b"a", b"b"]), "count": pa.array([3, 0])}, "row 1 counts 0; counts must be positive"),
        ({"word": pa.array([b"a"]), "count": pa.array([1.5])}, "column 'count' is double"),
        ({"word": pa.array([1]), "count": pa.array([1])}, "column 'word' is int64"),
        ({"word": pa.array([b"a", None]), "count": pa.array([1, 2])}, "a row has no word or no count"),
        ({"word": pa.array([b"a", b""]), "count": pa.array([1, 2])}, "row 1 has an empty word"),
        ({"word": pa.array([b"a", b"b"]), "count": pa.array([2**62, 2**62])}, "sum to more than an int64 holds"),
    ],
)
def test_counts_that_cannot_be_word_counts_are_one_line_naming_the_file(tmp_path, table, message):
    path = tmp_path / "counts.parquet"
    pq.write_table(pa.table(table), path)
    done = run("train", "--counts", path, "--vocab-size", "300", "--out", tmp_path / "tok")
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"bpe: error: {path}") and message in done.stderr, done.stderr
    assert not (tmp_path / "tok").exists()


@pytest.mark.services  # a Dask cluster
def test_a_file_that_is_not_word_counts_fails_a_dask_run_in_one_line_naming_it(tmp_path, two_workers):
    counts = tmp_path / "counts"
    counts.mkdir()
    pq.write_table(pa.table({"word": [b"a", b"b"], "count": [2, 1]}), counts / "part-0.parquet")
    pq.write_table(pa.table({"word": [b"a", b"b"], "count": [2, -7]}), counts / "part-1.parquet")
    with pytest.raises(InputError) as raised:
        train(counts=counts, vocab_size=300, engine="dask", client=two_workers)
    assert str(raised.value) == f"{counts / 'part-1.parquet'}: row 1 counts -7; counts must be positive"


def test_counts_beside_text_or_settings_that_need_it_are_refused_as_the_caller_spells_them(tmp_path):
    out = tmp_path / "counts"
    count(["some text to count"]).save(out)
    with pytest.raises(SettingsError, match=r"^counts: trains on word counts, which hold no text; leave out texts"):
        train(["more text"], counts=out, vocab_size=300)
    for name, value in {"files": "x.txt", "superwords": True, "limit": "1MB", "mix": "temperature=0.3"}.items():
        with pytest.raises(SettingsError, match=f"leave out {name}"):
            train(counts=out, vocab_size=300, **{name: value})
    with pytest.raises(SettingsError, match=r"pattern: the word counts were split with 'cl100k', not 'gpt2'"):
        train(counts=out, vocab_size=300, pattern="gpt2")
    done = run("train", tmp_path / "x.txt", "--counts", out, "--vocab-size", "300", "--out", tmp_path / "tok")
    assert done.returncode == 1 and done.stderr == (
        f"bpe: error: --counts: trains on word counts, which hold no text; leave out INPUT {tmp_path / 'x.txt'}\n"
    )
    done = run("train", "--counts", out, "--superwords", "--vocab-size", "300", "--out", tmp_path / "tok")
    assert done.returncode == 1 and done.stderr.endswith("leave out --superwords\n"), done.stderr
    (tmp_path / "notes.txt").write_text("not counts")
    done = run("train", "--counts", tmp_path / "notes.txt", "--vocab-size", "300", "--out", tmp_path / "tok")
    assert done.returncode == 1 and "notes.txt: not a Parquet file" in done.stderr, done.stderr


def test_counts_split_around_special_tokens_need_them_given(tmp_path):
    out = tmp_path / "counts"
    count(["a<|endoftext|>b"], special_tokens=["<|endoftext|>"]).save(out)
    assert "<|endoftext|>" in train(counts=out, vocab_size=300).special_tokens  # taken from the record
    with pytest.raises(SettingsError, match=r"split around <\|endoftext\|> too"):
        train(counts=out, vocab_size=300, special_tokens=["<|pad|>"])


def run(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run([BPE, *map(str, args)], capture_output=True, text=True, timeout=300)

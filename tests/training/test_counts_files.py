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


def test_text_by_language_is_counted_into_a_file_per_language(tmp_path):
    """`count(files={code: inputs})`: each language's file holds the counts of its text alone, and
    the directory trains the merges of all the text."""
    paragraphs = stdlib_paragraphs()
    texts = {"eng": paragraphs[:300], "deu": paragraphs[300:500]}
    files = {code: write_parquet(tmp_path / "text" / f"{code}.parquet", rows) for code, rows in texts.items()}
    counted = count(files=files, pattern="gpt2")
    counted.save(tmp_path / "counts")
    assert sorted(p.name for p in (tmp_path / "counts").iterdir()) == ["counts.json", "deu.parquet", "eng.parquet"]
    for code, rows in texts.items():
        table = pq.read_table(tmp_path / "counts" / f"{code}.parquet")
        assert dict(zip(table.column("word").to_pylist(), table.column("count").to_pylist(), strict=True)) == (
            word_counts(rows, "gpt2")
        )
    record = json.loads((tmp_path / "counts" / "counts.json").read_text())
    assert record["languages"]["deu"]["stats"]["documents"] == 200 and record["stats"]["documents"] == 500
    everything = word_counts(texts["eng"] + texts["deu"], "gpt2")
    tok = train(counts=tmp_path / "counts", vocab_size=700)
    assert tok.pattern == "gpt2" and [(a, b) for a, b in tok.merges] == train_reference(dict(everything), 700 - 256)


def test_bpe_count_by_language_then_all_at_once_replaces_the_language_files(tmp_path):
    """`bpe count --lang CODE=INPUT` writes CODE.parquet each; counting again into the same
    directory with --force leaves none of them behind to be summed with the new counts."""
    paragraphs = stdlib_paragraphs()
    eng = write_parquet(tmp_path / "eng.parquet", paragraphs[:200])
    deu = write_parquet(tmp_path / "deu.parquet", paragraphs[200:300])
    done = run("count", "--lang", f"eng={eng}", "--lang", f"deu={deu}", "--out", tmp_path / "counts")
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith(f"wrote a file per language (deu, eng) in {tmp_path}/counts")
    both = run("count", "--lang", f"eng={eng}", eng, "--out", tmp_path / "other")
    assert both.returncode == 1 and both.stderr == (
        "bpe: error: give INPUT, --lang CODE=INPUT or --lang-dir DIR, one of them (got INPUT and --lang)\n"
    )
    again = run("count", eng, "--out", tmp_path / "counts", "--force")
    assert again.returncode == 0, again.stderr
    assert sorted(p.name for p in (tmp_path / "counts").iterdir()) == ["counts.json", "counts.parquet"]
    tok = train(counts=tmp_path / "counts", vocab_size=600)
    assert tok.merges == train(files=eng, vocab_size=600).merges


def bucket_files(directory) -> dict[str, dict[bytes, int]]:
    """Each `part-*.parquet` of a counts directory, as {word: count}."""
    found = {}
    for path in sorted(Path(directory).glob("part-*.parquet")):
        table = pq.read_table(path)
        found[path.name] = dict(zip(table.column("word").to_pylist(), table.column("count").to_pylist(), strict=True))
    return found


@pytest.mark.services  # a Dask cluster
def test_dask_workers_write_the_word_buckets_that_train_the_merges_of_the_text(tmp_path, two_workers):
    """`count(engine="dask")`: each worker writes the bucket it summed, the buckets share no word
    and together hold the text's counts; they train the textbook's merges, and a second count
    into the same place is refused unless forced."""
    rows = stdlib_paragraphs()[:400]
    data = [write_parquet(tmp_path / "data" / f"part-{i}.parquet", rows[i::2]) for i in range(2)]
    scheduler = two_workers.scheduler.address
    found = count(files=data, pattern="gpt2", engine="dask", scheduler=scheduler, out=tmp_path / "counts")
    buckets = bucket_files(tmp_path / "counts")
    assert sorted(buckets) == ["part-00000.parquet", "part-00001.parquet"]
    assert not set(buckets["part-00000.parquet"]) & set(buckets["part-00001.parquet"])
    assert {**buckets["part-00000.parquet"], **buckets["part-00001.parquet"]} == word_counts(rows, "gpt2")
    assert found.pattern == "gpt2" and found.record["stats"]["documents"] == 400
    tok = train(counts=tmp_path / "counts", vocab_size=700)
    assert [(a, b) for a, b in tok.merges] == train_reference(dict(word_counts(rows, "gpt2")), 700 - 256)
    with pytest.raises(FileExistsError, match="already holds a counts directory"):
        count(files=data, engine="dask", scheduler=scheduler, out=tmp_path / "counts")


@pytest.mark.services  # a Dask cluster started here, and the session's S3 server
def test_bpe_count_on_dask_writes_an_object_store_prefix_whole(tmp_path, s3_env):
    """`bpe count --engine dask --out s3://...`: the workers upload the buckets, the record and
    the COMPLETE marker come last; --force over counts by language leaves none of their files."""
    from tests.conftest import unique_bucket

    rows = stdlib_paragraphs()[:300]
    data = write_parquet(tmp_path / "data.parquet", rows)
    boto3 = pytest.importorskip("boto3")
    bucket = unique_bucket("bpe-counts")
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=bucket)
    url = f"s3://{bucket}/counts"
    by_language = run("count", "--lang", f"eng={data}", "--out", url)
    assert by_language.returncode == 0, by_language.stderr
    done = run("count", data, "--engine", "dask", "--workers", "2", "--out", url, "--force", "--quiet")
    assert done.returncode == 0, done.stderr
    names = sorted(item["Key"].rsplit("/", 1)[1] for item in s3.list_objects_v2(Bucket=bucket)["Contents"])
    assert names == ["COMPLETE", "counts.json", "part-00000.parquet", "part-00001.parquet"]
    tok = train(counts=url, vocab_size=600)
    assert tok.merges == train(files=data, vocab_size=600).merges


def test_counts_of_several_directories_are_trained_as_their_records_say(tmp_path):
    """A record speaks for its directory's files beside another engine's: its pattern is taken (or
    a pattern given otherwise refused); two records of different patterns are refused."""
    rows = stdlib_paragraphs()[:400]
    count(rows[:200], pattern="gpt2").save(tmp_path / "ours")
    theirs = word_counts(rows[200:], "gpt2")
    (tmp_path / "theirs").mkdir()
    pq.write_table(pa.table({"word": list(theirs), "count": list(theirs.values())}), tmp_path / "theirs" / "a.parquet")
    both = [tmp_path / "ours", tmp_path / "theirs"]
    assert train(counts=both, vocab_size=600).merges == train(rows, vocab_size=600, pattern="gpt2").merges
    with pytest.raises(SettingsError, match="^pattern: the word counts were split with 'gpt2', not 'cl100k'"):
        train(counts=both, vocab_size=600, pattern="cl100k")
    count(rows[200:], pattern="o200k").save(tmp_path / "other")
    with pytest.raises(InputError, match="the word counts were split with different patterns"):
        train(counts=[tmp_path / "ours", tmp_path / "other"], vocab_size=600)

"""Evaluation and held-out rows: one training gives every smaller vocabulary, held-out rows are
deterministic and never counted, every version is measured on the evaluation set the first one
froze (never trained on, whatever the data becomes), and the reports show the trend."""

from __future__ import annotations

import base64
import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import regex

from bpe import Tokenizer, storage, train
from bpe.formats.manifest_json import write as write_manifest
from bpe.manifest import Manifest
from bpe.pipeline.evaluate import (
    EvalSetDamaged,
    bytes_per_token,
    compared_with_previous,
    compression_curve,
    default_sizes,
    eval_rows,
    eval_set_location,
    evaluate_version_on_set,
    freeze_eval_set,
    plot_curve,
    read_eval_set,
    text_fingerprint,
    trend_rows,
    truncated,
)
from bpe.pipeline.report import metrics_table, one_line, summary_markdown
from bpe.pipeline.store import VersionStore
from bpe.pretokenize import NAMED_PATTERNS, Pretokenizer
from bpe.training.counting import WordCounter, holdout_mask
from tests.conftest import stdlib_paragraphs, unique_bucket

TEXTS = stdlib_paragraphs()[:1500]


def test_a_truncated_tokenizer_is_the_smaller_training():
    big = train(TEXTS, vocab_size=700, pattern="cl100k", special_tokens=["<|endoftext|>"])
    small = train(TEXTS, vocab_size=500, pattern="cl100k", special_tokens=["<|endoftext|>"])
    cut = truncated(big, 500)
    assert cut.merges == small.merges and cut.vocab_size == 500 and cut.special_tokens == small.special_tokens


def test_compression_grows_with_the_vocabulary():
    tok = train(TEXTS[:1000], vocab_size=2048, pattern="cl100k")
    held = TEXTS[1000:]
    curve = compression_curve(tok, held, default_sizes(2048))
    assert [r["vocab_size"] for r in curve] == [512, 1024, 2048]
    values = [r["bytes_per_token"] for r in curve]
    assert values == sorted(values) and values[-1] == bytes_per_token(tok, held)
    assert values[-1] == round(sum(len(t.encode()) for t in held) / sum(len(tok.encode(t)) for t in held), 4)


def test_held_out_rows_are_deterministic_and_not_counted():
    array = pa.array(TEXTS, pa.large_string())
    mask = holdout_mask(array, 0.1)
    assert 0.05 < mask.mean() < 0.15
    assert (holdout_mask(pa.array(TEXTS[::-1], pa.large_string()), 0.1)[::-1] == mask).all()
    counter = WordCounter(Pretokenizer("gpt2"), holdout=0.1)
    counter.add_arrow(array)
    kept = [t for t, held in zip(TEXTS, mask) if not held]
    expected = Counter(p.encode() for t in kept for p in regex.findall(NAMED_PATTERNS["gpt2"], t))
    assert counter.result().to_dict() == dict(expected)
    assert counter.stats.held_out_rows == int(mask.sum()) and counter.stats.documents == len(kept)
    assert counter.held_out == [t for t, held in zip(TEXTS, mask) if held][: len(counter.held_out)]


def report_manifest(
    version: str = "v0001", vocab_size: int = 300, evaluation: dict | None = None, **settings
) -> Manifest:
    """A version's manifest as the reports read it; `settings` change the training settings."""
    manifest = {
        "name": "tok",
        "version": version,
        "created": "2026-01-01T00:00:00+00:00",
        "settings": {
            "vocab_size": vocab_size,
            "pattern": "cl100k",
            "special_tokens": [],
            "min_frequency": 1,
            **settings,
        },
        "counts": {"bytes": 10**6, "documents": 10, "held_out_rows": 1 if evaluation else 0},
        "result": {"merges": vocab_size - 256, "vocab_size": vocab_size, "stop_reason": "vocab_size"},
        "seconds": {"count": 1.0},
        "data": {"shards": [{}], "fingerprint": "ab" * 32, "counted_shards": 1},
    }
    if evaluation is not None:
        manifest["evaluation"] = evaluation
    return Manifest.from_json(manifest)


def test_plot_and_report(tmp_path):
    curve = [{"vocab_size": 512, "bytes_per_token": 2.0}, {"vocab_size": 1024, "bytes_per_token": 2.6}]
    png = plot_curve(tmp_path / "c.png", curve, "t", previous=[{"vocab_size": 512, "bytes_per_token": 1.9}])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    manifest = report_manifest(
        "v0002",
        1024,
        {
            "bytes_per_token": 2.6,
            "rows": 1,
            "curve": curve,
            "previous_version": "v0001",
            "previous_bytes_per_token": 1.9,
            "previous_curve": [curve[0]],
            "plot": "compression.png",
        },
    )
    text = summary_markdown(manifest, "/artifacts/tok/v0002")
    assert "# tok v0002" in text and "| 1,024 | 2.600 |" in text and "/artifacts/tok/v0002/compression.png" in text
    assert metrics_table(manifest)[0] == {"vocab_size": 512, "bytes_per_token": 2.0, "previous_version": 2.0}


def test_a_version_with_no_held_out_rows_gets_a_report(tmp_path):
    """holdout_fraction 0: nothing to evaluate on. The report says so rather than failing (which
    failed the run after its version was already in place)."""
    manifest = report_manifest(
        evaluation={
            "rows": 0,
            "bytes": 0,
            "bytes_per_token": None,
            "curve": [],
            "previous_version": None,
            "previous_bytes_per_token": None,
            "previous_curve": None,
        }
    )
    text = summary_markdown(manifest, "/artifacts/tok/v0001")
    assert "| compression | no held-out rows to evaluate on |" in text
    assert metrics_table(manifest) == []


def table_cells(row: str) -> list[str]:
    """The cells of a markdown table row, split as GitHub-flavoured markdown does (on unescaped pipes)."""
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", row.strip())[1:-1]]


def test_the_summary_table_keeps_its_cells_whatever_the_special_tokens_and_pattern_hold():
    tokens = ["<|endoftext|>", "a`b", "*bold*", "`edge`"]
    manifest = report_manifest(pattern=r"\w+|\s+", special_tokens=tokens)
    rows = [line for line in summary_markdown(manifest, "/a/tok/v0001").splitlines() if line.startswith("|")]
    assert all(len(table_cells(row)) == 2 for row in rows), rows
    settings = next(table_cells(row)[1] for row in rows if table_cells(row)[0] == "settings")
    assert r"`\w+\|\s+`" in settings and r"`<\|endoftext\|>`" in settings
    assert "``a`b``" in settings and "`*bold*`" in settings and "`` `edge` ``" in settings


# -- the fixed evaluation set and the trend -------------------------------------------------------

FRACTION = 0.1


def split_by_holdout(texts: list[str], fraction: float = FRACTION) -> tuple[list[str], list[str]]:
    """(rows trained on, rows held out), as the counting splits them at `fraction`."""
    mask = holdout_mask(pa.array(texts, pa.large_string()), fraction)
    return [t for t, held in zip(texts, mask) if not held], [t for t, held in zip(texts, mask) if held]


def publish(
    store: VersionStore, texts: list[str], vocab_size: int = 400, fraction: float = FRACTION, channel: str | None = None
) -> tuple[str, dict]:
    """Train on the rows of `texts` that are not held out, evaluate as the pipeline does, and
    commit the version with its manifest; returns (version, manifest)."""
    trained_on, held_out = split_by_holdout(texts, fraction)
    tok = train(trained_on, vocab_size=vocab_size, pattern="cl100k")
    staged = store.stage()
    tok.write_files(staged.directory)
    evaluation = evaluate_version_on_set(
        tok, held_out, store, staged.version, fraction, plot_path=staged.directory / "compression.png"
    )
    manifest = {**report_manifest(staged.version, tok.vocab_size, evaluation), "tokenizer": tok.describe()}
    if channel:
        manifest["channel"] = channel
    write_manifest(staged.directory, Manifest.from_json(manifest))
    store.commit(staged)
    return staged.version, manifest


def measured(tok: Tokenizer, texts: list[str]) -> float:
    """Bytes per token of `texts`, counted here from the tokenizer's own encoding."""
    return round(sum(len(t.encode("utf-8")) for t in texts) / sum(len(tok.encode_ordinary(t)) for t in texts), 4)


def stored_rows(store: VersionStore) -> list[str]:
    """The evaluation set's rows, read straight from its Parquet file (not through our reader)."""
    directory = Path(eval_set_location(store))
    record = json.loads((directory / "eval-set.json").read_text())
    return pq.read_table(directory / record["parquet"]).column("text").to_pylist()


def test_every_version_is_measured_on_the_rows_the_first_one_froze(tmp_path):
    """Two versions on growing data: each has its own held-out rows, but both are measured on the
    rows v0001 froze, and what each manifest says is what encoding those rows gives."""
    store = VersionStore(str(tmp_path), "tok")
    v1, m1 = publish(store, TEXTS[:900])
    v2, m2 = publish(store, TEXTS[:1500])
    frozen = stored_rows(store)
    assert frozen == split_by_holdout(TEXTS[:900])[1]  # v0001's held-out rows, in order
    e1, e2 = m1["evaluation"], m2["evaluation"]
    assert e1["eval_set"]["fingerprint"] == e2["eval_set"]["fingerprint"]
    assert e1["rows"] == e2["rows"] == len(frozen) and e2["eval_set"]["frozen_by"] == v1
    assert e1["bytes_per_token"] == measured(Tokenizer.load(store.location(v1)), frozen)
    assert e2["bytes_per_token"] == measured(Tokenizer.load(store.location(v2)), frozen)
    # v0002's own held-out rows are more than the set's; their figure is kept apart.
    own = split_by_holdout(TEXTS[:1500])[1]
    assert e2["run_held_out"]["rows"] == len(own) > len(frozen)
    assert e2["run_held_out"]["bytes_per_token"] == measured(Tokenizer.load(store.location(v2)), own)
    # The comparison and the trend are on the same rows, read from v0001's manifest.
    assert e2["previous_version"] == v1 and e2["previous_bytes_per_token"] == e1["bytes_per_token"]
    assert e2["previous_source"] == "manifest"
    assert [(r["version"], r["bytes_per_token"]) for r in e2["trend"]] == [(v1, e1["bytes_per_token"])]


def test_the_previous_version_is_compared_at_this_versions_size(tmp_path):
    """v0001 at 450 tokens, v0002 at 400: v0002 is compared with v0001's first 400 tokens (cut with
    `truncated` and encoded here), never with its 450; v0003 at 500 has nothing in v0002 to meet."""
    store = VersionStore(str(tmp_path), "tok")
    v1, _ = publish(store, TEXTS[:900], vocab_size=450)
    _, m2 = publish(store, TEXTS[:1200], vocab_size=400)
    e2 = m2["evaluation"]
    assert e2["previous_version"] == v1
    first_400 = Tokenizer.load(store.location(v1)).truncated(400)
    assert e2["previous_bytes_per_token"] == measured(first_400, stored_rows(store))
    _, m3 = publish(store, TEXTS[:1500], vocab_size=500)
    assert m3["evaluation"]["previous_bytes_per_token"] is None
    assert compared_with_previous(m3["evaluation"], 500).endswith("no figure at 500 tokens to compare with)")


def test_the_trend_lists_only_versions_on_the_same_rows(tmp_path):
    store = VersionStore(str(tmp_path), "tok")
    v1, _ = publish(store, TEXTS[:900])
    v2, m2 = publish(store, TEXTS[:1200], channel="experiment")
    shutil.rmtree(eval_set_location(store))  # the set is lost: the next version freezes another
    v3, m3 = publish(store, TEXTS[:1500])
    v4, m4 = publish(store, TEXTS[:1500], vocab_size=450)
    assert m3["evaluation"]["eval_set"]["frozen_by"] == v3
    assert m3["evaluation"]["eval_set"]["fingerprint"] != m2["evaluation"]["eval_set"]["fingerprint"]
    assert m3["evaluation"]["trend"] == []  # nothing earlier was measured on the new set
    # ... but the previous version is still compared, by encoding the new rows with it.
    assert m3["evaluation"]["previous_source"] == "recomputed"
    previous = m3["evaluation"]["previous_version"]
    assert previous in (v1, v2)  # the promoted one (v0002 is an experiment: whether it moved `latest` is the store's)
    assert m3["evaluation"]["previous_bytes_per_token"] == measured(
        Tokenizer.load(store.location(previous)), stored_rows(store)
    )
    assert [r["version"] for r in m4["evaluation"]["trend"]] == [v3]
    v5, m5 = publish(store, TEXTS[:1600])
    assert [(r["version"], r["vocab_size"]) for r in m5["evaluation"]["trend"]] == [(v3, 400), (v4, 450)]
    manifests = [(v, store.manifest(v)) for v in store.versions()]
    assert [r["channel"] for r in trend_rows(manifests, m2["evaluation"]["eval_set"]["fingerprint"])] == [
        None,
        "experiment",
    ]
    assert [r["version"] for r in trend_rows(manifests, m5["evaluation"]["eval_set"]["fingerprint"], limit=2)] == [
        v4,
        v5,
    ]


def test_the_evaluation_set_is_never_rewritten(tmp_path):
    location = str(tmp_path / "tok" / "eval-set")
    first = freeze_eval_set(location, ["one row", "another row"], 0.05, "v0001")
    again = freeze_eval_set(location, ["something else"], 0.05, "v0002")
    assert again.texts == first.texts == ["one row", "another row"] and again.frozen_by == "v0001"
    assert read_eval_set(location).fingerprint == first.fingerprint == text_fingerprint(first.texts)
    assert text_fingerprint(["ab", "c"]) != text_fingerprint(["a", "bc"])  # row boundaries count


def test_a_damaged_set_is_reported_and_left_alone(tmp_path):
    location = str(tmp_path / "tok" / "eval-set")
    _, held = split_by_holdout(TEXTS)
    freeze_eval_set(location, held, FRACTION, "v0001")
    [rows_file] = Path(location).glob("rows-*.parquet")
    pq.write_table(pa.table({"text": pa.array(held[1:], pa.large_string())}), rows_file)  # a row lost
    before = {p.name: p.read_bytes() for p in Path(location).iterdir()}
    with pytest.raises(EvalSetDamaged, match="do not match their fingerprint"):
        read_eval_set(location)
    rows = eval_rows(location, held, FRACTION, "v0002")
    assert rows.texts == [] and rows.description is None
    assert any(f"remove {location}" in warning for warning in rows.warnings)
    assert {p.name: p.read_bytes() for p in Path(location).iterdir()} == before  # not rewritten
    rows_file.unlink()
    with pytest.raises(EvalSetDamaged, match="cannot read"):
        read_eval_set(location)


def test_a_smaller_holdout_fraction_leaves_out_the_rows_it_would_train_on(tmp_path):
    """The set was frozen at 0.1; at 0.05 the counting trains on some of its rows, which must then
    not be evaluated on; at 0.2 every row is still held out."""
    location = str(tmp_path / "tok" / "eval-set")
    _, held = split_by_holdout(TEXTS, 0.1)
    freeze_eval_set(location, held, 0.1, "v0001")
    assert eval_rows(location, [], 0.2, "v0002").texts == held
    smaller = eval_rows(location, [], 0.05, "v0002")

    def trained_on(text: str, fraction: float) -> bool:  # what the counting does with the row
        counter = WordCounter(Pretokenizer("cl100k"), holdout=fraction)
        counter.add_texts([text])
        return counter.stats.held_out_rows == 0

    assert smaller.texts == [t for t in held if not trained_on(t, 0.05)]
    assert 0 < len(smaller.texts) < len(held)
    assert smaller.description["subset_of"] == text_fingerprint(held)
    assert smaller.description["fingerprint"] == text_fingerprint(smaller.texts)
    assert smaller.warnings and "subset" in smaller.warnings[0]
    assert eval_rows(location, [], 0.0, "v0002").texts == []


def test_the_evaluation_rows_never_reach_the_training_counts(tmp_path):
    """The data grows, and the new shard repeats some evaluation rows verbatim: the counting holds
    them out again (same hash), so no word of theirs is counted. The bound used is checked to
    catch a leak: counting without a holdout breaks it."""
    location = str(tmp_path / "tok" / "eval-set")
    first = TEXTS[:900]
    counter = WordCounter(Pretokenizer("cl100k"), holdout=FRACTION)
    counter.add_texts(first)
    frozen = freeze_eval_set(location, counter.held_out, FRACTION, "v0001").texts
    assert frozen
    grown = first + TEXTS[900:1500] + frozen[::2]  # a later shard holding copies of evaluation rows

    def counted(holdout: float) -> Counter:
        c = WordCounter(Pretokenizer("cl100k"), holdout=holdout)
        c.add_texts(grown)
        return Counter(c.result().to_dict())

    eval_texts = set(frozen)
    without_eval = Counter(w.encode() for t in grown if t not in eval_texts for w in Pretokenizer("cl100k").split(t))
    in_eval = Counter(w.encode() for t in frozen for w in Pretokenizer("cl100k").split(t))
    trained = counted(FRACTION)
    assert all(trained[w] <= without_eval[w] for w in trained)  # nothing beyond the non-evaluation rows
    assert not all(counted(0.0)[w] <= without_eval[w] for w in in_eval)  # a leak would show


def test_summary_embeds_the_plot_links_the_version_and_shows_the_trend(tmp_path):
    trend = [
        {
            "version": "v0001",
            "created": "2026-01-01",
            "vocab_size": 1024,
            "bytes_per_token": 2.5,
            "channel": "main",
            "curve": [{"vocab_size": 512, "bytes_per_token": 2.0}, {"vocab_size": 1024, "bytes_per_token": 2.5}],
        },
        {
            "version": "v0002",
            "created": "2026-01-02",
            "vocab_size": 2048,
            "bytes_per_token": 2.9,
            "channel": "experiment",
            "curve": [{"vocab_size": 512, "bytes_per_token": 2.1}, {"vocab_size": 1024, "bytes_per_token": 2.55}],
        },
    ]
    curve = [{"vocab_size": 512, "bytes_per_token": 2.05}, {"vocab_size": 1024, "bytes_per_token": 2.6}]
    png_path = plot_curve(
        tmp_path / "c.png", curve, "t", previous=trend[0]["curve"], trend=[*trend, {"version": "v0003", "curve": curve}]
    )
    png = png_path.read_bytes()
    evaluation = {
        "bytes_per_token": 2.6,
        "rows": 40,
        "bytes": 9000,
        "curve": curve,
        "previous_version": "v0001",
        "previous_bytes_per_token": 2.5,
        "previous_curve": trend[0]["curve"],
        "plot": "compression.png",
        "eval_set": {"fingerprint": "cd" * 32, "rows": 40, "bytes": 9000, "frozen_by": "v0001"},
        "trend": trend,
        "run_held_out": {"rows": 55, "bytes": 12000, "bytes_per_token": 2.7},
    }
    location = str(tmp_path / "my tok" / "v0003")
    text = summary_markdown(report_manifest("v0003", 1024, evaluation), location, png)
    [uri] = re.findall(r"!\[[^\]]*\]\((data:image/png;base64,[^)]+)\)", text)
    assert base64.b64decode(uri.split(",", 1)[1]) == png and png.startswith(b"\x89PNG\r\n\x1a\n")
    assert f"[`{location}`](file://{location.replace(' ', '%20')})" in text
    rows = {table_cells(line)[0]: table_cells(line) for line in text.splitlines() if line.startswith("| v0")}
    assert rows["v0001"][2:] == ["1,024", "2.5000", ""]
    assert rows["v0002 (experiment)"][2:] == ["2,048", "2.9000", "+0.4000"]
    this = next(table_cells(line) for line in text.splitlines() if line.startswith("| **v0003**"))
    assert this[2:] == ["1,024", "2.6000", "-0.3000"]
    compression = next(line for line in text.splitlines() if line.startswith("| compression |"))
    assert "2.600 bytes per token on the evaluation set: 40 held-out rows" in compression and "cdcdcdcd" in compression
    assert "| this run's held-out rows | 2.700 bytes per token" in text
    assert "bytes per token on held-out text (evaluation set `cdcdcdcdcdcdcdcd`, 40 rows)" in one_line(
        report_manifest("v0003", 1024, evaluation), location
    )


def png_width(png: bytes) -> int:
    """The width in pixels a PNG's header gives."""
    return int.from_bytes(png[16:20], "big")


def test_the_plot_gains_a_trend_panel_once_there_are_two_versions(tmp_path):
    curve = [{"vocab_size": 512, "bytes_per_token": 2.0}, {"vocab_size": 1024, "bytes_per_token": 2.6}]
    alone = plot_curve(tmp_path / "a.png", curve, "t", trend=[{"version": "v0001", "curve": curve}]).read_bytes()
    two = [{"version": "v0001", "curve": curve}, {"version": "v0002", "curve": curve}]
    both = plot_curve(tmp_path / "b.png", curve, "t", trend=two).read_bytes()
    assert alone.startswith(b"\x89PNG") and both.startswith(b"\x89PNG")
    assert png_width(both) > 1.4 * png_width(alone)


@pytest.fixture
def s3_bucket(s3_env):
    """A bucket of this test's own on the session's moto S3 server (see tests/conftest.py `s3_server`)."""
    import boto3

    bucket = unique_bucket("evalset")
    boto3.client("s3").create_bucket(Bucket=bucket)
    return f"s3://{bucket}"


@pytest.mark.services
def test_the_evaluation_set_lives_on_object_storage_too(s3_bucket):
    store = VersionStore(f"{s3_bucket}/artifacts", "tok")
    location = eval_set_location(store)
    assert location == f"{s3_bucket}/artifacts/tok/eval-set"
    first = freeze_eval_set(location, ["one row", "another row"], 0.05, "v0001")
    assert freeze_eval_set(location, ["other"], 0.05, "v0002").fingerprint == first.fingerprint
    assert read_eval_set(location).texts == ["one row", "another row"]
    assert "eval-set.json" in storage.listing(location)

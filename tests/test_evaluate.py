"""Evaluation and held-out rows: one training gives every smaller vocabulary, held-out rows are
deterministic and never counted."""

from __future__ import annotations

import re
from collections import Counter

import pyarrow as pa
import regex

from bpe import train
from bpe.engine.count import WordCounter, holdout_mask
from bpe.pipeline.demo import stdlib_paragraphs
from bpe.pipeline.evaluate import bytes_per_token, compression_curve, default_sizes, plot_curve, truncated
from bpe.pipeline.report import metrics_table, summary_markdown
from bpe.pretokenize import NAMED_PATTERNS, Pretokenizer

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


def report_manifest(version: str = "v0001", vocab_size: int = 300, evaluation: dict | None = None, **settings) -> dict:
    """A version's manifest as the reports read it; `settings` change the training settings."""
    manifest = {
        "name": "tok", "version": version, "created": "2026-01-01T00:00:00+00:00",
        "settings": {"vocab_size": vocab_size, "pattern": "cl100k", "special_tokens": [], "min_frequency": 1,
                     **settings},
        "counts": {"bytes": 10**6, "documents": 10, "held_out_rows": 1 if evaluation else 0},
        "result": {"merges": vocab_size - 256, "vocab_size": vocab_size, "stop_reason": "vocab_size"},
        "seconds": {"count": 1.0}, "data": {"shards": [{}], "fingerprint": "ab" * 32, "counted_shards": 1},
    }  # fmt: skip
    if evaluation is not None:
        manifest["evaluation"] = evaluation
    return manifest


def test_plot_and_report(tmp_path):
    curve = [{"vocab_size": 512, "bytes_per_token": 2.0}, {"vocab_size": 1024, "bytes_per_token": 2.6}]
    png = plot_curve(tmp_path / "c.png", curve, "t", previous=[{"vocab_size": 512, "bytes_per_token": 1.9}])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    manifest = report_manifest("v0002", 1024, {"bytes_per_token": 2.6, "rows": 1, "curve": curve,
                               "previous_version": "v0001", "previous_bytes_per_token": 1.9,
                               "previous_curve": [curve[0]], "plot": "compression.png"})  # fmt: skip
    text = summary_markdown(manifest, "/artifacts/tok/v0002")
    assert "# tok v0002" in text and "| 1,024 | 2.600 |" in text and "/artifacts/tok/v0002/compression.png" in text
    assert metrics_table(manifest)[0] == {"vocab_size": 512, "bytes_per_token": 2.0, "previous_version": 2.0}


def test_a_version_with_no_held_out_rows_gets_a_report(tmp_path):
    """holdout_fraction 0: nothing to evaluate on. The report says so rather than failing (which
    failed the run after its version was already in place)."""
    manifest = report_manifest(evaluation={"rows": 0, "bytes": 0, "bytes_per_token": None, "curve": [],
                               "previous_version": None, "previous_bytes_per_token": None,
                               "previous_curve": None})  # fmt: skip
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

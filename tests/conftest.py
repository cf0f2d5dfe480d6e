"""Shared fixtures: the shared English corpus (skipped when absent) and small inputs on disk."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("BPE_SHARED", REPO.parent / "shared"))
CORPUS = SHARED / "corpora" / "en"
GPT2 = SHARED / "gpt2"


def shared_corpus() -> Path:
    if not (CORPUS / "part-00000.parquet").exists():
        pytest.skip(f"shared corpus not found at {CORPUS}")
    return CORPUS


@pytest.fixture(scope="session")
def corpus() -> Path:
    return shared_corpus()


@pytest.fixture(scope="session")
def corpus_rows(corpus) -> list[str]:
    """A slice of real English paragraphs: the first 3,000 rows of the smallest shard."""
    table = pq.read_table(corpus / "part-00005.parquet")
    return [t for t in table.column("text").to_pylist()[:3000] if t]


def write_parquet(path: Path, texts, column: str = "text") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({column: pa.array(list(texts), pa.string())}), path)
    return path


def publish_as(store, channel: str = "main", promoted: bool | None = None, bpt: float = 3.0,
               eval_set: str = "set-a") -> str:  # fmt: skip
    """Publish a version as the flow does, without training: its manifest says its channel, whether
    it is promoted, and its bytes per token on the evaluation rows with fingerprint `eval_set`."""
    import json

    staged = store.stage()
    manifest = {"channel": channel, "promoted": channel == "main" if promoted is None else promoted,
                "evaluation": {"bytes_per_token": bpt, "eval_set": {"fingerprint": eval_set}},
                "created": "2026-11-30T08:50:18+00:00", "result": {"vocab_size": 600}, "counts": {"bytes": 1_500_000},
                "data": {"shards": [{}, {}]}}  # fmt: skip
    (staged.directory / "manifest.json").write_text(json.dumps(manifest))
    store.commit(staged)
    return staged.version

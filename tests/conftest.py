"""Shared fixtures: the shared English corpus (skipped when absent) and small inputs on disk."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("BPE_SHARED", REPO.parent / "shared"))
CORPUS = SHARED / "corpora" / "en"
GPT2 = SHARED / "gpt2"


def shared_corpus() -> Path:
    if not (CORPUS / "part-00000.parquet").exists():
        pytest.skip(f"shared corpus not found at {CORPUS}")
    return CORPUS


# Every character some split pattern treats as whitespace (regex's \s, str.split()'s \x1c-\x1f), which
# regex engines disagree on most often: mixed into the arbitrary text of the encoder property tests.
WHITESPACE = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B)))
WHITESPACE += "\u2028\u2029\u202f\u205f\u3000"


def any_text(extra: str = "ab1 ") -> st.SearchStrategy[str]:
    """Arbitrary Unicode text (no lone surrogates) up to 60 characters, rich in whitespace and `extra`."""
    return st.text(
        st.one_of(st.characters(exclude_categories=("Cs",)), st.sampled_from(WHITESPACE), st.sampled_from(extra)),
        max_size=60,
    )


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


@contextlib.contextmanager
def moto_s3(log_dir: Path):
    """moto's standalone S3 server on 127.0.0.1, for the `with` block: this process (and every
    process it starts) reaches it through the standard AWS_* variables, as any S3 client would.
    Yields those variables."""
    pytest.importorskip("boto3")
    pytest.importorskip("s3fs")
    pytest.importorskip("moto")
    import signal
    import subprocess
    import sys
    import time

    from bpe.pipeline.services import free_port, port_in_use, stop

    port = free_port()
    log = log_dir / f"moto-{port}.log"
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                   stdout=out, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not port_in_use(port):
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.1)
        env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
               "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}  # fmt: skip
        with pytest.MonkeyPatch.context() as patch:
            for key, value in env.items():
                patch.setenv(key, value)
            yield env
    finally:
        stop(process, first=signal.SIGTERM)

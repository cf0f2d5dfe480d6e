"""The README's first command: `bpe demo` runs the train-bpe flow with no server started by hand
(Prefect's ephemeral mode, a local Dask cluster) and says where the new version is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bpe import Tokenizer
from bpe.pipeline.store import VersionStore

pytestmark = pytest.mark.services  # starts real services: the slow tier

REPO = Path(__file__).resolve().parent.parent


def demo(tmp_path: Path, env: dict, vocab_size: int) -> subprocess.CompletedProcess:
    """`bpe demo` in a subprocess, as a newcomer runs it."""
    bpe = Path(sys.executable).parent / "bpe"
    done = subprocess.run(
        [str(bpe), "demo", "--data", str(tmp_path / "demo-data"), "--artifacts", str(tmp_path / "artifacts"),
         "--vocab-size", str(vocab_size)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return done


def test_demo_runs_the_flow_in_ephemeral_mode(tmp_path):
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")},
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    done = demo(tmp_path, env, 1024)
    location = tmp_path / "artifacts" / "demo" / "v0001"
    assert f"demo v0001 written to {location}:" in done.stdout and "bytes per token on held-out text" in done.stdout
    assert VersionStore(str(tmp_path / "artifacts"), "demo").latest() == "v0001"
    tok = Tokenizer.load(location)
    assert tok.vocab_size == 1024 and "<|endoftext|>" in tok.special_tokens
    assert (location / "compression.png").exists()

    # Another size, with a fresh Prefect database: a new version, and no shard counted again.
    env["PREFECT_HOME"] = str(tmp_path / "another-prefect-home")
    demo(tmp_path, env, 1100)
    manifest = VersionStore(str(tmp_path / "artifacts"), "demo").manifest("v0002")
    assert manifest["data"]["cached_shards"] == 4 and manifest["data"]["counted_shards"] == 0
    assert manifest["evaluation"]["previous_version"] == "v0001"

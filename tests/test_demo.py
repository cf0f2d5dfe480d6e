"""The README's first command: `bpe demo` runs the train-bpe flow with no server started by hand
(Prefect's ephemeral mode, a local Dask cluster) and says where the new version is."""

from __future__ import annotations

import os
import subprocess
import sys
import time
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
        [
            str(bpe),
            "demo",
            "--data",
            str(tmp_path / "demo-data"),
            "--artifacts",
            str(tmp_path / "artifacts"),
            "--vocab-size",
            str(vocab_size),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
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

    # The counts a later run reuses (tests/test_pipeline.py shows it does) are beside the versions,
    # not in Prefect's database or result storage, which ephemeral mode may start afresh.
    assert len(list((tmp_path / "artifacts" / ".cache" / "counts").glob("*.json"))) == 4
    results = tmp_path / "prefect-home" / "storage"
    assert not results.exists() or not any(results.rglob("*")), sorted(results.rglob("*"))


def _command_line(process) -> str:
    """A process's command line, or "" for one that exited (or became a zombie) meanwhile: the
    demo starts and reaps short-lived children while the test looks at them."""
    import psutil

    try:
        return " ".join(process.cmdline())
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return ""


def test_the_ephemeral_server_dies_with_a_killed_demo(tmp_path):
    """kill -9 of `bpe demo` mid-run must not leave Prefect's ephemeral server listening."""
    import psutil

    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")},
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    bpe = Path(sys.executable).parent / "bpe"
    demo = subprocess.Popen(
        [str(bpe), "demo", "--data", str(tmp_path / "demo-data"), "--artifacts", str(tmp_path / "artifacts")],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        servers: list = []
        while not servers:
            assert time.monotonic() < deadline and demo.poll() is None, "no ephemeral server was started"
            children = psutil.Process(demo.pid).children(recursive=True)
            servers = [c for c in children if "uvicorn" in _command_line(c)]
            time.sleep(0.2)
        demo.kill()
        demo.wait(30)
        gone, alive = psutil.wait_procs(servers, timeout=20)
        assert not alive, f"still listening after its parent was killed: {[p.pid for p in alive]}"
    finally:
        if demo.poll() is None:
            demo.kill()
        for child in psutil.Process().children(recursive=True):
            if "uvicorn" in _command_line(child):
                child.kill()

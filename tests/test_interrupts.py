"""Ctrl-C during training: sent as a terminal sends it (to the whole process group, with the
progress bars on a real pseudo-terminal), in the local merge loop and in the Dask engine's counting
and merging, it ends in one line, exit code 130, no traceback, and nothing written."""

from __future__ import annotations

import os
import pty
import random
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

BPE = str(Path(sys.executable).parent / "bpe")


@pytest.fixture(scope="module")
def slow_merges(tmp_path_factory) -> Path:
    """A corpus whose merge loop takes seconds: many unique random words."""
    rng = random.Random(1)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = lambda: " ".join("".join(rng.choice(letters) for _ in range(rng.randint(3, 12))) for _ in range(200))  # noqa: E731
    path = tmp_path_factory.mktemp("slow") / "words.parquet"
    pq.write_table(pa.table({"text": [words() for _ in range(3000)]}), path)
    return path


def interrupt_when(args: list[str], seen: bytes, cwd: Path, timeout: float = 120) -> tuple[int, str]:
    """Run `bpe args` on a pseudo-terminal; when `seen` shows on it, press Ctrl-C (SIGINT to the
    process group); returns the exit code and everything the terminal showed."""
    leader, follower = pty.openpty()
    # A shell gives a foreground command the default SIGINT; a test run started in the background
    # (as a CI job may be) would otherwise hand down "ignore SIGINT", which bpe rightly respects.
    process = subprocess.Popen(
        [BPE, *args],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        cwd=cwd,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    os.close(follower)
    shown = b""
    interrupted = False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                chunk = b""
            if not chunk and process.poll() is not None:
                break
            shown += chunk
        if not interrupted and seen in shown:
            os.killpg(process.pid, signal.SIGINT)
            interrupted = True
        if process.poll() is not None and not ready:
            break
    code = process.wait(timeout=60)
    os.close(leader)
    text = re.sub(r"\x1b\[[0-9;]*m", "", shown.decode(errors="replace"))  # colour resets some libraries print
    assert interrupted, text[-2000:]
    return code, text


def test_ctrl_c_in_the_local_merge_loop(slow_merges, tmp_path):
    code, shown = interrupt_when(
        ["train", str(slow_merges), "--vocab-size", "20000", "--out", "tok"], b"merge:", tmp_path
    )
    assert code == 130, shown[-3000:]
    assert "Traceback" not in shown and shown.rstrip().endswith("bpe: interrupted; nothing was written")
    assert not (tmp_path / "tok").exists() and not list(tmp_path.glob(".tok*"))


@pytest.mark.services
@pytest.mark.parametrize("phase", [b"count:", b"merge:"])
def test_ctrl_c_on_the_dask_engine(slow_merges, tmp_path, phase):
    args = ["train", str(slow_merges), "--vocab-size", "20000", "--out", "tok", "--engine", "dask", "--workers", "2"]
    code, shown = interrupt_when(args, phase, tmp_path)
    assert code == 130, shown[-3000:]
    assert "Traceback" not in shown, shown[-3000:]
    assert shown.rstrip().endswith("bpe: interrupted; nothing was written"), shown[-3000:]
    assert not (tmp_path / "tok").exists()

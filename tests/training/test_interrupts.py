"""Ctrl-C during training: sent as a terminal sends it (to the whole process group, with the
progress bars on a real pseudo-terminal), in the local merge loop and in the Dask engine's counting
and merging, it ends in one line, exit code 130, no traceback, and nothing written."""

from __future__ import annotations

import contextlib
import os
import pty
import random
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
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


def interrupt_when(
    args: list[str], seen: bytes | Callable[[int], bool], cwd: Path, timeout: float = 120
) -> tuple[int, str]:
    """Run `bpe args` on a pseudo-terminal; when `seen` shows on it (or `seen(pid)` is true), press
    Ctrl-C (SIGINT to the process group); returns the exit code and everything the terminal showed,
    once every process of the group has ended."""
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
        if not interrupted and (seen(process.pid) if callable(seen) else seen in shown):
            os.killpg(process.pid, signal.SIGINT)
            interrupted = True
        if process.poll() is not None and not ready:
            break
    code = process.wait(timeout=60)
    while True:  # what it wrote just before it ended: the loop above may stop before reading it
        ready, _, _ = select.select([leader], [], [], 0.5)
        try:
            chunk = os.read(leader, 65536) if ready else b""
        except OSError:  # the terminal's other side closed: all of it read
            chunk = b""
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    text = re.sub(r"\x1b\[[0-9;]*m", "", shown.decode(errors="replace"))  # colour resets some libraries print
    assert interrupted, text[-2000:]
    deadline = time.monotonic() + 30
    while group_alive(process.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not group_alive(process.pid), f"processes left behind: {text[-2000:]}"  # a worker, say
    return code, text


def group_alive(pgid: int) -> bool:
    """Whether a process of the group is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, 0)
        return True
    return False


def has_spawned_a_worker(pid: int) -> bool:
    """Whether `pid` has started a process of multiprocessing's spawn (a Dask worker's), rather than
    none or only its resource tracker (Linux: /proc/PID/task/*/children, their command lines)."""
    with contextlib.suppress(OSError):  # it, or a child, has ended
        for task in Path(f"/proc/{pid}/task").glob("*"):
            for child in task.joinpath("children").read_text().split():
                if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                    return True
    return False


def test_ctrl_c_in_the_local_merge_loop(slow_merges, tmp_path):
    code, shown = interrupt_when(
        ["train", str(slow_merges), "--vocab-size", "20000", "--out", "tok"], b"merge:", tmp_path
    )
    assert code == 130, shown[-3000:]
    assert "Traceback" not in shown, shown[shown.find("Traceback") - 300 :][:4000]
    assert shown.rstrip().endswith("bpe: interrupted; nothing was written"), shown[-3000:]
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


@pytest.mark.services
@pytest.mark.parametrize("languages", [False, True], ids=["one-corpus", "multilingual"])
def test_ctrl_c_while_the_dask_engine_starts_its_cluster(tmp_path, languages):
    """Ctrl-C once the local cluster's start has spawned a worker, before it has returned: the
    driver answers it as soon as the start returns (exit 130, nothing written, the cluster stopped),
    and the workers print nothing."""
    words = " ".join(f"word{i}" for i in range(2000))
    (tmp_path / "a.txt").write_text(words, encoding="utf-8")
    (tmp_path / "b.txt").write_text(words.upper(), encoding="utf-8")
    inputs = ["--lang", "eng=a.txt", "--lang", "fra=b.txt"] if languages else ["a.txt"]
    args = ["train", *inputs, "--vocab-size", "3000", "--engine", "dask", "--workers", "2", "--out", "o"]
    code, shown = interrupt_when(args, has_spawned_a_worker, tmp_path)
    assert code == 130, shown[-3000:]
    assert "started a local Dask cluster" not in shown  # it was still starting when Ctrl-C came
    assert "Traceback" not in shown and "KeyboardInterrupt" not in shown, shown[-3000:]
    assert shown.rstrip().endswith("bpe: interrupted; nothing was written"), shown[-3000:]
    assert not (tmp_path / "o").exists() and not list(tmp_path.glob(".o*"))

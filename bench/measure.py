"""Measuring a command from outside: wall time and peak memory of its whole process tree.

Peak memory is the larger of (a) the kernel's exact peak of the command's own process (`wait4`)
and (b) the sum of resident memory over the process and all its descendants, sampled every
20 ms, which is what counts for engines that start worker processes. Linux carries a process's peak
across fork and exec, so the command is started by a small process of its own (bench/launch.py,
about 8 MB), which waits for it and reports (a), its wall time and CPU time: a benchmark that holds
pyarrow and manifests would otherwise lend its own size to every command's peak.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
LAUNCH = Path(__file__).resolve().parent / "launch.py"


class TooLong(RuntimeError):
    """A command stopped because it ran past its `limit`."""


def run(command: list[str], env: dict | None = None, cwd: Path = REPO, limit: float | None = None) -> dict:
    """Run `command`; returns wall seconds, peak memory (MB) of the process tree and of its largest
    process (sampled), CPU seconds (the command's and its waited-for children's), stdout and stderr.
    Raises on failure; past `limit` seconds, stops the command and its children and raises TooLong."""
    environment = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    report, write = os.pipe()
    launch = [sys.executable, "-I", "-S", str(LAUNCH), str(write), *command]
    process = subprocess.Popen(  # a process group of its own, which `_stop` ends whole
        launch, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment, cwd=cwd, pass_fds=(write,),
        process_group=0,
    )  # fmt: skip
    os.close(write)
    outputs = {"stdout": b"", "stderr": b""}
    peak_sum, peak_one = [0], [0]
    stop = threading.Event()

    def drain(name: str, stream) -> None:
        outputs[name] = stream.read()

    def sample() -> None:
        try:
            launcher = psutil.Process(process.pid)
            while not stop.is_set():
                total = 0
                for p in launcher.children(recursive=True):  # the command and its descendants
                    try:
                        rss = p.memory_info().rss
                    except psutil.NoSuchProcess:
                        continue
                    total += rss
                    peak_one[0] = max(peak_one[0], rss)
                peak_sum[0] = max(peak_sum[0], total)
                stop.wait(0.02)
        except psutil.NoSuchProcess:
            return

    threads = [
        threading.Thread(target=drain, args=("stdout", process.stdout), daemon=True),
        threading.Thread(target=drain, args=("stderr", process.stderr), daemon=True),
        threading.Thread(target=sample, daemon=True),
    ]
    for t in threads:
        t.start()
    try:
        process.wait(limit)
    except subprocess.TimeoutExpired:
        _stop(process)
        stop.set()
        raise TooLong(f"{' '.join(command)} did not finish in {limit:,.0f} s; stopped") from None
    except BaseException:  # Ctrl-C reaches this process alone: its command's group is not the terminal's
        _stop(process)
        raise
    stop.set()
    for t in threads:
        t.join()
    with os.fdopen(report, "rb") as f:
        measured = json.loads(f.read() or b"{}")
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({process.returncode}):\n{outputs['stderr'].decode()[-3000:]}")
    own = measured["maxrss_kb"] / 1024
    return {
        "wall": measured["wall"],
        "peak_mb": max(peak_sum[0] / 2**20, own),
        "largest_process_mb": max(peak_one[0] / 2**20, own),
        "cpu": measured["cpu"],
        "stdout": outputs["stdout"].decode(),
        "stderr": outputs["stderr"].decode(),
    }


def _stop(process: subprocess.Popen) -> None:
    """Kill the launcher's process group (the command and everything it started, even a child
    started a moment ago), then any descendant that left the group, and reap the launcher."""
    descendants = psutil.Process(process.pid).children(recursive=True)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    for p in descendants:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    process.wait()


def python(*args: str) -> list[str]:
    return [sys.executable, *args]


def bpe_train(data: Path, vocab_size: int, out: Path, *extra: str) -> list[str]:
    """The command `bpe train` on `data` into `out` (replaced, quietly), with `extra` flags."""
    return python(
        "-m", "bpe.cli", "train", str(data), "--vocab-size", str(vocab_size), "--out", str(out), "--force", "--quiet",
        *extra,
    )  # fmt: skip

"""Measuring a command from outside: wall time and peak memory of its whole process tree.

Peak memory is the larger of (a) the kernel's exact peak of the command's own process (`wait4`)
and (b) the sum of resident memory over the process and all its descendants, sampled every
20 ms, which is what counts for engines that start worker processes. Linux carries a process's peak
across fork and exec, so (a) is never below the caller's own size: measure before holding data.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent


def run(command: list[str], env: dict | None = None, cwd: Path = REPO, timeout: float | None = None) -> dict:
    """Run `command`; returns wall seconds, peak memory (MB) of the process tree and of its largest
    process (sampled), stdout and stderr. Raises on failure."""
    environment = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment, cwd=cwd)
    outputs = {"stdout": b"", "stderr": b""}
    peak_sum, peak_one = [0], [0]
    stop = threading.Event()

    def drain(name: str, stream) -> None:
        outputs[name] = stream.read()

    def sample() -> None:
        try:
            root = psutil.Process(process.pid)
            while not stop.is_set():
                total = 0
                for p in [root, *root.children(recursive=True)]:
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
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    stop.set()
    for t in threads:
        t.join(timeout)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({process.returncode}):\n{outputs['stderr'].decode()[-3000:]}")
    peak = max(peak_sum[0] / 2**20, usage.ru_maxrss / 1024)
    return {
        "wall": wall,
        "peak_mb": peak,
        "largest_process_mb": max(peak_one[0] / 2**20, usage.ru_maxrss / 1024),
        "stdout": outputs["stdout"].decode(),
        "stderr": outputs["stderr"].decode(),
    }


def python(*args: str) -> list[str]:
    return [sys.executable, *args]


def bpe_train(data: Path, vocab_size: int, out: Path, *extra: str) -> list[str]:
    """The command `bpe train` on `data` into `out` (replaced, quietly), with `extra` flags."""
    return python(
        "-m", "bpe.cli", "train", str(data), "--vocab-size", str(vocab_size), "--out", str(out), "--force", "--quiet",
        *extra,
    )  # fmt: skip

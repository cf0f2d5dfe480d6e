"""Benchmark: a cluster larger than this machine, simulated. A real `dask scheduler` and `dask worker`
processes on 127.0.0.1, each worker with a memory limit below the local engine's peak, train the
corpus with `bpe train --engine dask --scheduler ...` at 1, 2, 4 and 8 workers; the table gives
whether the merges equal the local engine's, each worker's peak (the process's own, VmHWM), the
pauses and restarts Dask logged, wall time, and the driver's round trip per round and per holder.
The model of `docs/engines/cluster.md` is then fitted to these rows and its estimates printed.

    python -m bench.scale_out                     # the 500 MB corpus of bench.train --scale 500
    python -m bench.scale_out --scale 49 --workers 1,2,4 --vocab-size 8192   # a quicker look

Each worker's limit is the local engine's peak times `--limits` (by worker count: 0.9 at 1, 0.7
at 2, 0.5 at 4, 0.4 at 8 unless given). Every worker has one thread: this machine's cores are
shared by all of them, so wall time here is not what a cluster of that many machines takes; the
round trip per holder and the memory per worker are what carries over.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import psutil

from bench.measure import REPO, bpe_train, run
from bench.scale_corpus import scaled_corpus
from bpe.manifest import Manifest

DEFAULT_DATA = REPO.parent / "shared" / "corpora" / "en"
LIMITS = {1: 1.2, 2: 0.7, 4: 0.5, 8: 0.4}  # a worker's memory limit, as a fraction of the local engine's peak
GOALS = {4: 0.35, 8: 0.3}  # issue 50: each worker's peak, as a fraction of the local engine's peak
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Worker:
    """A `dask worker` (a nanny and its worker process), its log file, and what it logged."""

    process: subprocess.Popen
    log: Path

    def worker_pids(self) -> list[int]:
        try:
            return [p.pid for p in psutil.Process(self.process.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def peak_mb(self) -> float:
        """The worker process's own peak (VmHWM): the largest of the nanny's children (a restarted
        worker is a new child: the one running now)."""
        peaks = []
        for pid in self.worker_pids():
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            found = re.search(r"VmHWM:\s+(\d+) kB", status)
            if found:
                peaks.append(int(found.group(1)) / 1024)
        return max(peaks, default=0.0)

    def events(self) -> dict:
        """Pauses and restarts for memory in the worker's log, and when the first pause was."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        pauses = re.findall(r"^(\S+ \S+) - .*Pausing worker", text, re.M)
        first = datetime.strptime(pauses[0], "%Y-%m-%d %H:%M:%S,%f").timestamp() if pauses else None
        return {"paused": len(pauses), "restarted": text.count("memory budget. Restarting"), "first_pause": first}


@dataclass
class Cluster:
    """A scheduler and `n` workers, each limited to `limit_mb`, started here and stopped by close()."""

    n: int
    limit_mb: int
    directory: Path
    port: int = field(default_factory=free_port)
    scheduler: subprocess.Popen | None = None
    workers: list[Worker] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def start(self) -> Cluster:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        log = open(self.directory / "scheduler.log", "wb")
        self.scheduler = subprocess.Popen(
            [str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(self.port), "--no-dashboard"],
            stdout=log, stderr=log, env=env,
        )  # fmt: skip
        for i in range(self.n):
            path = self.directory / f"worker-{i}.log"
            with open(path, "wb") as out:
                process = subprocess.Popen(
                    [
                        str(BIN / "dask"), "worker", self.address, "--nthreads", "1", "--no-dashboard",
                        "--memory-limit", f"{self.limit_mb}MiB", "--name", f"w{i}", "--host", "127.0.0.1",
                        "--local-directory", str(self.directory / f"w{i}"),
                    ],
                    stdout=out, stderr=out, env=env,
                )  # fmt: skip
            self.workers.append(Worker(process, path))
        from distributed import Client

        with Client(self.address, timeout=30) as client:
            client.wait_for_workers(self.n, timeout=60)
        return self

    def close(self) -> None:
        for process in [w.process for w in self.workers] + [self.scheduler]:
            if process is not None and process.poll() is None:
                process.terminate()
        for process in [w.process for w in self.workers] + [self.scheduler]:
            if process is not None:
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()


def read_manifest(out: Path) -> Manifest:
    return Manifest.from_json(json.loads((out / "manifest.json").read_text()))


def empty_round_ms(address: str, holders: int, rounds: int = 300) -> float:
    """The driver's round trip alone: `holders` holders of a few words each, one a worker, sent
    `rounds` empty rounds; milliseconds per round (the median of three tries)."""
    import tempfile

    import numpy as np
    from distributed import Client

    from bpe.distributed.driver import Holders
    from bpe.engine.count import WordCounts

    with Client(address) as client, tempfile.TemporaryDirectory() as scratch:
        words = client.scatter([WordCounts.from_dict({b"hello": 1, f" {b}".encode(): 1}) for b in range(holders)])
        group = Holders(client, scratch, call_timeout=60, log=None)
        try:
            group.start(words)
            empty = np.zeros((0, 3), np.int64)
            tries = []
            for _ in range(3):
                started = time.perf_counter()
                for _ in range(rounds):
                    group.round(empty)
                tries.append(1e3 * (time.perf_counter() - started) / rounds)
        finally:
            group.close()
    return sorted(tries)[1]


def merges_of(out: Path) -> list[str]:
    return (out / "merges.txt").read_text(encoding="utf-8").splitlines()


def fit(rows: list[dict]) -> dict[str, float]:
    """Least squares over the runs that finished: an empty round's round trip = a + b * holders
    (the driver's fixed cost per round and its cost per holder: sending, waiting, reading), and a
    worker's peak = fixed + per_word * unique words it holds."""
    import numpy as np

    holders = np.array([r["holders"] for r in rows], float)
    wait = np.array([r["empty_ms"] for r in rows], float)
    a, b = np.linalg.lstsq(np.c_[np.ones_like(holders), holders], wait, rcond=None)[0]
    held = np.array([r["words_per_worker"] for r in rows], float)
    peak = np.array([r["peak_mb"] for r in rows], float)
    fixed, per_word = np.linalg.lstsq(np.c_[np.ones_like(held), held], peak, rcond=None)[0]
    deltas = float(np.mean([r["deltas_per_round"] for r in rows]))
    return {"round_ms": a, "holder_ms": b, "fixed_mb": fixed, "mb_per_million_words": per_word * 1e6, "deltas": deltas}


def heaps_exponent(source: Path, pattern: str) -> tuple[float, int, float]:
    """Unique words grow as (text size)^beta (Heaps' law): beta measured between one shard of the
    real corpus and all of it; returns beta, the unique words of all of it, and its MB."""
    import math

    import bpe

    shards = sorted(source.glob("*.parquet"))
    one, whole = bpe.count(files=[str(shards[0])], pattern=pattern), bpe.count(files=[str(source)], pattern=pattern)
    beta = math.log(len(whole.counts) / len(one.counts)) / math.log(whole.stats.bytes / one.stats.bytes)
    return beta, len(whole.counts), whole.stats.bytes / 1e6


def estimate(model: dict[str, float], gb: float, workers: int, words: float, rounds: int) -> str:
    per_worker = model["fixed_mb"] + model["mb_per_million_words"] * words / 1e6 / workers
    fan_out = rounds * (model["round_ms"] + model["holder_ms"] * workers) / 1e3
    return (
        f"{gb:,g} GB on {workers} workers: {words / 1e6:,.0f} million unique words, {per_worker:,.0f} MiB per "
        f"worker; the driver's round trips {fan_out:,.0f} s over {rounds:,} rounds"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--scale", type=float, default=500, help="MB of corpus built from --data (0: --data as is)")
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument("--pattern", default="cl100k")
    parser.add_argument("--workers", default="1,2,4,8", help="worker counts, comma-separated")
    parser.add_argument("--limits", help="each worker's memory limit as a fraction of the local peak, one per count")
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",")]
    limits = dict(zip(counts, map(float, args.limits.split(",")), strict=True)) if args.limits else LIMITS
    if not args.data.exists():
        sys.exit(f"no corpus at {args.data} (give --data)")
    data = scaled_corpus(args.data, args.scale) if args.scale else args.data
    work = Path(tempfile.mkdtemp(prefix="bpe-scale-out-"))
    pattern = ["--pattern", args.pattern]
    try:
        run(bpe_train(data, 300, work / "warm", *pattern))  # kernels compiled and files read once, untimed
        local = run(bpe_train(data, args.vocab_size, work / "local", *pattern))
        expected = merges_of(work / "local")
        manifest = read_manifest(work / "local")
        unique = manifest.counts.unique_words
        mb = manifest.counts.bytes / 1e6
        print(
            f"corpus {data}: {mb:,.0f} MB, {unique:,} unique words; vocabulary {args.vocab_size:,}; local engine "
            f"(default threads) {local['wall']:.1f} s, peak {local['peak_mb']:,.0f} MB"
        )
        print()
        print(
            "| workers | limit per worker (MiB) | same merges | worker peak (MiB) | peak / local peak | paused | "
            "restarted | wall (s) | count (s) | build (s) | merge loop (s) | rounds | wait per round (ms) | "
            "empty round (ms) | deltas per round |"
        )
        print(
            "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        )
        rows = []
        for n in counts:
            limit = int(local["peak_mb"] * limits[n])
            directory = work / f"cluster-{n}"
            directory.mkdir()
            cluster = Cluster(n, limit, directory).start()
            out = work / f"dask-{n}"
            command = bpe_train(
                data, args.vocab_size, out, *pattern, "--engine", "dask", "--scheduler", cluster.address
            )
            started = time.time()
            try:
                try:
                    result, failed = run(command), None
                except RuntimeError as error:
                    result, failed = None, str(error).strip().splitlines()[-1]
                ended = time.time()
                peaks = [w.peak_mb() for w in cluster.workers]
                events = [w.events() for w in cluster.workers]
                fan_out = empty_round_ms(cluster.address, n) if not failed else None
            finally:
                cluster.close()
            paused = sum(e["paused"] for e in events)
            restarted = sum(e["restarted"] for e in events)
            peak = max(peaks)
            cells = (
                f"| {n} | {limit:,} | {{}} | {peak:,.0f} | {peak / local['peak_mb']:.2f}x | {paused} | {restarted} |"
            )
            if failed:
                first = min((e["first_pause"] for e in events if e["first_pause"]), default=None)
                after = f", {ended - first:.0f} s after the first pause" if first else ""
                print(cells.format(f"failed in {ended - started:.0f} s{after}: {failed}") + " |" * 8)
                continue
            m = read_manifest(out)
            phases, engine = m.seconds.phases, m.engine
            wait_ms = 1e3 * engine.seconds_waiting_for_buckets / engine.rounds
            row = {
                "workers": n, "holders": engine.word_buckets, "peak_mb": peak, "wait_ms": wait_ms,
                "words_per_worker": unique / n, "deltas_per_round": (engine.pair_deltas or 0) / engine.rounds,
                "rounds": engine.rounds, "paused": paused, "restarted": restarted, "empty_ms": fan_out,
            }  # fmt: skip
            rows.append(row)
            same = "yes" if merges_of(out) == expected else "NO"
            print(
                cells.format(same) + f" {result['wall']:.1f} | {phases['count']:.1f} | {phases['build']:.1f} | "
                f"{phases['merge_loop']:.1f} | {engine.rounds:,} | {wait_ms:.2f} | "
                f"{fan_out:.2f} | {row['deltas_per_round']:,.0f} |"
            )
        print()
        for n, goal in GOALS.items():
            row = next((r for r in rows if r["workers"] == n), None)
            if row:
                quiet = "no worker paused or restarted" if not row["paused"] + row["restarted"] else "workers paused"
                met = "met" if row["peak_mb"] <= goal * local["peak_mb"] else "NOT met"
                print(f"goal at {n} workers, each worker's peak at most {goal}x the local engine's: {met}; {quiet}")
        if len(rows) >= 2:
            model = fit(rows)
            print(
                f"fitted: an empty round costs the driver {model['round_ms']:.2f} ms + {model['holder_ms']:.3f} ms "
                f"per holder; a worker holds {model['fixed_mb']:,.0f} MiB + "
                f"{model['mb_per_million_words']:,.0f} MiB per million unique words; {model['deltas']:,.0f} pair "
                "deltas per round"
            )
            beta, en_words, en_mb = heaps_exponent(args.data, args.pattern)
            print(
                f"unique words: {en_words:,} in the {en_mb:,.0f} MB of {args.data}, growing as size^{beta:.2f} "
                "(Heaps' law, between one of its shards and all of them)"
            )
            for gb, n in ((100, 64), (1000, 256)):
                words = en_words * (gb * 1e3 / en_mb) ** beta
                print("estimate: " + estimate(model, gb, n, words, rows[-1]["rounds"]))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

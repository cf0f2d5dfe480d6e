"""Benchmark: whole `bpe train` runs against rustbpe, Hugging Face `tokenizers` and sentencepiece,
on the same data in one run: the four comparisons of issue 40 (the fixed cost of a run, superwords
against plain BPE, threads, and the peers on a corpus).

    python -m bench.train [--data ../shared/corpora/en] [--vocab-size 32768] [--pattern cl100k] [--repeat 3]
    python -m bench.train --scale 500 --repeat 1 --no-dask    # a 500 MB corpus built from --data
    python -m bench.train --only floor,threads                # some of the parts

The parts (`--only`, all by default):
  floor    the fixed cost of a run: a 1 KB text file (whole lines of the corpus's first rows, written
           to a temporary directory), 300 tokens; sentencepiece at the smallest vocabulary it accepts
           for that file (it needs every covered character and the 256 bytes as pieces).
  superwords  a superword tokenizer (SuperBPE, transition at 0.7 of `--vocab-size`) against plain
           BPE on the corpus, both the local engine with default threads: wall time and peak memory.
  corpus   the corpus at `--vocab-size`: the local engine (default threads, and `--threads 1`), the
           Dask engine on a local 2-worker cluster (unless --no-dask), Hugging Face, rustbpe, sentencepiece.
  threads  the local engine's default threads against `--threads 1` on the corpus, with nothing else
           started by the benchmark, and again while a CPU-bound process it starts keeps one core busy.
`--scale MB` runs them on a corpus of that many MB built (once; kept in ~/.cache/bpe/bench/) from
--data, whose unique words keep growing with size (bench/scale_corpus.py).

Every trainer runs as its own process; wall time is from start to exit (the Dask run includes
starting its cluster), peak memory covers the process and all its children (bench/measure.py).
Our numba kernels are compiled once before timing: a first run compiles them, later runs load
them from the cache, which is what users see after their first run; every trainer also runs once
on the 1 KB file before timing, so that no one's first import reads its modules from disk. The
machines are noisy: the runs are interleaved and the ratios, measured in the same run, matter more
than the seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from importlib.metadata import version
from pathlib import Path

from bench.measure import REPO, TooLong, bpe_train, python, run
from bench.peers import hf_split, parquet_texts, sentencepiece_smallest_vocab
from bench.scale_corpus import scaled_corpus
from bpe.manifest import Manifest

DEFAULT_DATA = REPO.parent / "shared" / "corpora" / "en"
PARTS = ("floor", "superwords", "threads", "corpus")
SUPERWORD_TRANSITION = 0.7  # of the vocabulary size: where the superword stage starts
FLOOR_BYTES, FLOOR_VOCAB = 1000, 300
PEERS = ("hf", "rustbpe", "sentencepiece")


def peer(trainer: str, data: Path, vocab_size: int, pattern: str) -> list[str]:
    """The command of a peer's run; its split resolved here, so that it loads none of our modules."""
    split = [] if trainer == "sentencepiece" else ["--split", *hf_split(pattern)]
    return python("-m", "bench.peers", trainer, str(data), "--vocab-size", str(vocab_size), *split)


def with_manifest(result: dict, out: Path) -> dict:
    result["manifest"] = Manifest.from_json(json.loads((out / "manifest.json").read_text()))
    return result


def with_vocab(result: dict) -> dict:
    """A peer's run with the vocabulary size it printed (a small corpus may end a trainer early)."""
    result["vocab_size"] = json.loads(result["stdout"].strip().splitlines()[-1])["vocab_size"]
    return result


def median(runs: list[dict]) -> dict:
    return sorted(runs, key=lambda r: r["wall"])[len(runs) // 2]


def first_lines(data: Path, size: int = FLOOR_BYTES) -> str:
    """Whole non-empty lines of the first rows of `data`, at most `size` bytes of UTF-8 (the start
    of the first line alone if it is longer)."""
    text = ""
    for row in parquet_texts(str(data)):
        for line in row.split("\n"):
            if not line:
                continue
            if len((text + line + "\n").encode()) > size:
                return text or line.encode()[: size - 1].decode(errors="ignore") + "\n"
            text += line + "\n"
    return text


@contextmanager
def one_core_busy():
    """A CPU-bound process spinning on one core while the block runs."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument("--pattern", default="cl100k")
    parser.add_argument("--repeat", type=int, default=3, help="runs per trainer; the median is reported")
    parser.add_argument("--no-dask", action="store_true", help="skip the Dask engine")
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    parser.add_argument(
        "--peer-limit", type=float, help="stop a peer's corpus run after this many seconds (reported as stopped)"
    )
    parser.add_argument("--scale", type=float, help="build a corpus of this many MB from --data, and use it")
    parser.add_argument(
        "--only", default=",".join(PARTS), help=f"the parts to run, comma-separated: {', '.join(PARTS)} (all)"
    )
    args = parser.parse_args()
    parts = set(args.only.split(","))
    if not parts or parts - set(PARTS):
        sys.exit(f"--only takes some of {', '.join(PARTS)}, not {args.only!r}")
    if not args.data.exists():
        sys.exit(f"no corpus at {args.data} (give --data)")
    load = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="bpe-bench-"))
    try:
        floor = work / "floor.txt"
        floor.write_text(first_lines(args.data), encoding="utf-8")
        floor_sp_vocab = sentencepiece_smallest_vocab([floor.read_text(encoding="utf-8")])
        if args.scale:
            args.data = scaled_corpus(args.data, args.scale)
        pattern = ["--pattern", args.pattern]
        run(bpe_train(floor, FLOOR_VOCAB, work / "warm", *pattern))  # compile once, outside the timing
        for name in PEERS:  # and read everyone's modules from disk once
            run(peer(name, floor, floor_sp_vocab if name == "sentencepiece" else FLOOR_VOCAB, args.pattern))
        if parts & {"corpus", "threads", "superwords"}:
            run(bpe_train(args.data, 300, work / "warm", *pattern))
        superwords = ["--superwords", "--transition", str(round(SUPERWORD_TRANSITION * args.vocab_size))]
        if "superwords" in parts:
            run(bpe_train(args.data, 300, work / "warm", *pattern, "--superwords", "--transition", "280"))
        dask = "corpus" in parts and not args.no_dask
        if dask:
            run(bpe_train(args.data, 300, work / "warm", *pattern, "--engine", "dask", "--workers", "2"))
        runs: dict[str, list[dict]] = {}

        def measure(key: str, command: list[str], out: Path | None = None, limit: float | None = None) -> None:
            if any(r.get("unfinished") for r in runs.get(key, [])):
                return  # stopped once at its limit: not run again
            try:
                result = run(command, limit=limit)
            except TooLong as stopped:
                print(stopped, flush=True)
                runs.setdefault(key, []).append({"wall": limit, "peak_mb": 0.0, "cpu": 0.0, "unfinished": True})
                return
            runs.setdefault(key, []).append(with_manifest(result, out) if out else with_vocab(result))

        out = work / "tok"
        for _ in range(args.repeat):  # interleaved, so that drifts in machine load hit every trainer
            if "floor" in parts:
                measure("floor_local", bpe_train(floor, FLOOR_VOCAB, out, *pattern), out)
                for name in PEERS:
                    vocab = floor_sp_vocab if name == "sentencepiece" else FLOOR_VOCAB
                    measure(f"floor_{name}", peer(name, floor, vocab, args.pattern))
            if parts & {"corpus", "threads", "superwords"}:
                measure("local", bpe_train(args.data, args.vocab_size, out, *pattern), out)
            if parts & {"corpus", "threads"}:
                measure("local1", bpe_train(args.data, args.vocab_size, out, *pattern, "--threads", "1"), out)
            if "superwords" in parts:
                measure("superwords", bpe_train(args.data, args.vocab_size, out, *pattern, *superwords), out)
            if dask:
                cmd = bpe_train(args.data, args.vocab_size, out, *pattern, "--engine", "dask", "--workers", "2")
                measure("dask", cmd, out)
                measure("dask1", bpe_train(args.data, 1000, out, *pattern, "--engine", "dask", "--workers", "1"), out)
            if "corpus" in parts:
                for name in PEERS:
                    measure(name, peer(name, args.data, args.vocab_size, args.pattern), limit=args.peer_limit)
            if "threads" in parts:
                with one_core_busy():
                    measure("busy_local", bpe_train(args.data, args.vocab_size, out, *pattern), out)
                    cmd = bpe_train(args.data, args.vocab_size, out, *pattern, "--threads", "1")
                    measure("busy_local1", cmd, out)
        if "floor" in parts:
            report_floor(args, runs, floor, floor_sp_vocab)
        if "superwords" in parts:
            report_superwords(args, runs)
        if "threads" in parts:
            report_threads(args, runs, load)
        if "corpus" in parts:
            report_corpus(args, runs)
        walls = {k: [round(r["wall"], 2) for r in v] for k, v in runs.items()}
        print(f"every wall time (s): {walls}")
        if args.json:
            keep = ("wall", "peak_mb", "cpu", "unfinished")
            measured = {k: [{x: r[x] for x in keep if x in r} for r in v] for k, v in runs.items()}
            if "local" in runs:
                text_mb = median(runs["local"])["manifest"].counts.bytes / 1e6
                measured["corpus"] = {"path": str(args.data), "mb": text_mb}
            args.json.write_text(json.dumps(measured))
    finally:
        shutil.rmtree(work, ignore_errors=True)


SENTENCEPIECE_NOTE = (
    "sentencepiece {version} is another algorithm: BPE over NFKC-normalized characters with spaces as "
    "U+2581 and runs of whitespace collapsed, no pre-tokenization regex (it splits only at whitespace, "
    "at changes of script and around digits), bytes only for the characters beyond its 99.95% coverage; "
    "trained on the documents' non-empty lines with byte fallback, on all cores"
)


def table(rows: list[tuple[str, dict]], runs: dict[str, list[dict]], prefix: str = "") -> None:
    """Rows of trainers with their ratios to the peers' medians of `runs` (keys `prefix` + peer)."""
    rust, hf = median(runs[prefix + "rustbpe"]), median(runs[prefix + "hf"])
    sp = median(runs[prefix + "sentencepiece"])
    print(
        "| trainer | wall (s) | peak memory (MB) | wall / rustbpe | wall / sentencepiece | wall / HF "
        "| memory / rustbpe | memory / HF |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, r in rows:
        wall = f"> {r['wall']:,.0f} (stopped)" if r.get("unfinished") else f"{r['wall']:.2f}"
        peak = "-" if r.get("unfinished") else f"{r['peak_mb']:,.0f}"
        print(
            f"| {name} | {wall} | {peak} | {ratio(r, rust, 'wall')} | {ratio(r, sp, 'wall')} | "
            f"{ratio(r, hf, 'wall')} | {ratio(r, rust, 'peak_mb')} | {ratio(r, hf, 'peak_mb')} |"
        )


def ratio(ours: dict, peer: dict, key: str) -> str:
    """ours[key] / peer[key]; against a run stopped at its limit, the wall ratio is an upper bound."""
    if ours.get("unfinished") or (peer.get("unfinished") and key != "wall"):
        return "-"
    return f"{'< ' if peer.get('unfinished') else ''}{ours[key] / peer[key]:.2f}x"


def peer_rows(runs: dict[str, list[dict]], prefix: str, sentencepiece: str) -> list[tuple[str, dict]]:
    return [
        ("Hugging Face tokenizers", median(runs[prefix + "hf"])),
        ("rustbpe", median(runs[prefix + "rustbpe"])),
        (sentencepiece, median(runs[prefix + "sentencepiece"])),
    ]


def report_floor(args, runs: dict[str, list[dict]], floor: Path, sp_vocab: int) -> None:
    ours = median(runs["floor_local"])
    size, lines = floor.stat().st_size, len(floor.read_text(encoding="utf-8").splitlines())
    print(
        f"## 1. The fixed cost of a run: a {size:,}-byte text file ({lines} lines of the corpus's first rows), "
        f"{FLOOR_VOCAB} tokens; median of {args.repeat} interleaved run(s)"
    )
    print()
    sp = f"sentencepiece (BPE) at {sp_vocab} pieces, the smallest it accepts for this file*"
    table([("bpe train, local engine", ours), *peer_rows(runs, "floor_", sp)], runs, "floor_")
    print()
    met = "met" if ours["wall"] <= 0.3 and ours["peak_mb"] <= 80 else "not met"
    print(f"goal: at most 0.3 s and 80 MB; bpe train: {ours['wall']:.2f} s and {ours['peak_mb']:,.0f} MB ({met})")
    print(
        f"* {SENTENCEPIECE_NOTE.format(version=version('sentencepiece'))}. Its vocabulary must hold "
        f"<unk>, <s>, </s>, the 256 bytes and every covered character: {sp_vocab} pieces here, so it "
        f"learns no merge, where the others learn {FLOOR_VOCAB - 256}."
    )
    print()


def report_corpus(args, runs: dict[str, list[dict]]) -> None:
    local = median(runs["local"])
    m = local["manifest"]
    mb = m.counts.bytes / 1e6
    print(
        f"## 4. The corpus {args.data}: {mb:,.1f} MB, {m.counts.documents:,} documents, "
        f"{m.counts.unique_words:,} unique words; vocabulary {args.vocab_size:,}, pattern {args.pattern}; "
        f"median of {args.repeat} interleaved run(s)"
    )
    print()
    rows = [("bpe train, local engine", local), ("bpe train, local engine, --threads 1", median(runs["local1"]))]
    if runs.get("dask"):
        rows.append(("bpe train, Dask engine, 2 local workers (cluster start included)", median(runs["dask"])))
    sp = median(runs["sentencepiece"])
    sp_name = "sentencepiece (BPE)*"
    if not sp.get("unfinished") and sp["vocab_size"] != args.vocab_size:
        sp_name = f"sentencepiece (BPE), {sp['vocab_size']:,} pieces (the corpus ran out)*"
    table(rows + peer_rows(runs, "", sp_name), runs)
    print()
    rust, hf = median(runs["rustbpe"]), median(runs["hf"])
    print(
        f"ours / rustbpe {ratio(local, rust, 'wall')}, ours / sentencepiece {ratio(local, sp, 'wall')}, "
        f"ours / HF {ratio(local, hf, 'wall')} in wall time; peak memory ours / rustbpe "
        f"{ratio(local, rust, 'peak_mb')}, ours / sentencepiece {ratio(local, sp, 'peak_mb')}"
    )
    print(
        "goals (issue 51): en at most 0.5x rustbpe's wall time and 1.0x its peak; 500 MB at most 0.25x rustbpe's "
        "and 0.2x sentencepiece's wall time; 2 GB at most 0.25x rustbpe's wall time and 0.8x its peak"
    )
    print(f"* {SENTENCEPIECE_NOTE.format(version=version('sentencepiece'))}.")
    print()
    s, engine = m.seconds.phases, m.engine
    loop = s.get("merge_loop", s["merge"])  # the loop alone, without building the word table
    print(
        f"local engine: count {s['count']:.2f} s ({mb / s['count']:,.1f} MB/s), merge {s['merge']:.2f} s, of "
        f"which the loop {loop:.2f} s ({m.result.merges / loop:,.0f} merges/s, {engine.rounds:,} "
        f"rounds), export {m.seconds.export or 0:.2f} s; threads {engine.threads}, "
        f"merge loop on {engine.merge_threads or 1}"
    )
    one = median(runs["local1"])["manifest"].seconds.phases
    one_loop = one.get("merge_loop", one["merge"])
    print(
        f"local engine on 1 thread: count {one['count']:.2f} s ({mb / one['count']:,.1f} MB/s), merge "
        f"{one['merge']:.2f} s, of which the loop {one_loop:.2f} s; speed-up on the cores available: counting "
        f"{one['count'] / s['count']:.2f}x, merge {one['merge'] / s['merge']:.2f}x, merge loop "
        f"{one_loop / loop:.2f}x"
    )
    if runs.get("dask"):
        d = median(runs["dask"])["manifest"]
        ds, de, merges = d.seconds.phases, d.engine, d.result.merges
        one = median(runs["dask1"])["manifest"].seconds.phases["count"]
        print(
            f"Dask engine, 2 workers: cluster start {ds['cluster']:.2f} s, count {ds['count']:.2f} s, "
            f"build buckets {ds['build']:.2f} s, merge loop {ds['merge']:.2f} s "
            f"({merges / ds['merge']:,.0f} merges/s; {de.rounds:,} rounds for "
            f"{merges:,} merges = {de.rounds / merges:.2f} rounds per merge), "
            f"export {d.seconds.export or 0:.2f} s; bucket holders' peak memory {de.bucket_peak_mb} MB"
        )
        print(
            f"Dask counting: 1 worker {one:.2f} s ({mb / one:,.1f} MB/s), 2 workers {ds['count']:.2f} s "
            f"({mb / ds['count']:,.1f} MB/s): {one / ds['count']:.2f}x faster on 2 workers"
        )
    print()


def report_superwords(args, runs: dict[str, list[dict]]) -> None:
    plain, ours = median(runs["local"]), median(runs["superwords"])
    m = ours["manifest"]
    print(
        f"## 2. Superwords: bpe train on {args.data} ({m.counts.bytes / 1e6:,.1f} MB) at {args.vocab_size:,} "
        f"tokens, superwords from {m.superwords.transition:,} (SuperBPE) against plain BPE, the local engine; "
        f"median of {args.repeat} interleaved run(s)"
    )
    print()
    print("| tokenizer | wall (s) | peak memory (MB) | wall / plain | memory / plain |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, r in (("plain BPE", plain), ("superwords", ours)):
        print(
            f"| {name} | {r['wall']:.2f} | {r['peak_mb']:,.0f} | {r['wall'] / plain['wall']:.2f}x | "
            f"{r['peak_mb'] / plain['peak_mb']:.2f}x |"
        )
    print()
    for stage in m.superwords.stages:
        s = stage["seconds"]
        loop = s.get("merge_loop", s.get("merge", 0.0))
        print(
            f"stage {stage['stage']}: {stage['unique_words']:,} unique pieces, {stage['merges']:,} merges; "
            f"count {s.get('count', 0.0):.2f} s, merge {s.get('merge', 0.0):.2f} s, of which the loop {loop:.2f} s"
        )
    print(
        "goals (issue 51), at 125 MB (--scale 125): superwords at most 2x plain BPE's wall time and 1.5x its "
        "peak memory"
    )
    print()


def report_threads(args, runs: dict[str, list[dict]], load: float) -> None:
    engine = median(runs["local"])["manifest"].engine
    print(
        f"## 3. Threads that pay: bpe train on {args.data} at {args.vocab_size:,} tokens, the default "
        f"(--threads {engine.threads}, merge loop on {engine.merge_threads or 1}) against --threads 1, "
        f"{len(os.sched_getaffinity(0))} cores; median of {args.repeat} interleaved run(s)"
    )
    print()
    print("| machine | default: wall (s) | CPU (s) | --threads 1: wall (s) | CPU (s) | default / one thread, wall |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, prefix in (
        (f"nothing started by the benchmark (load average {load:.2f} when it began)", ""),
        ("one core kept busy by a CPU-bound process the benchmark started", "busy_"),
    ):
        default, one = median(runs[prefix + "local"]), median(runs[prefix + "local1"])
        print(
            f"| {name} | {default['wall']:.2f} | {default['cpu']:.2f} | {one['wall']:.2f} | {one['cpu']:.2f} | "
            f"{default['wall'] / one['wall']:.2f}x |"
        )
    print()
    print(
        "goals (issue 40): with one core busy, default / one thread at most 1.00x; on an idle machine at "
        "500 MB, at most 0.77x (1.3x faster)"
    )
    print()


if __name__ == "__main__":
    main()

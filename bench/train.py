"""Benchmark: whole `bpe train` runs (local engine, and Dask engine on a local 2-worker cluster)
against Hugging Face `tokenizers` and `rustbpe`, on the same Parquet rows, in one run.

    python -m bench.train [--data ../shared/corpora/en] [--vocab-size 32768] [--pattern cl100k] [--repeat 3]
    python -m bench.train --scale 500 --repeat 1 --no-dask    # a 500 MB corpus built from --data

`--scale MB` first builds (once; kept in ~/.cache/bpe/bench/) a corpus of that many MB whose
unique words keep growing with size (bench/scale_corpus.py). The local engine also runs on one
thread (`--threads 1`), for the speed-up of counting and of the merge loop on the cores available.

Every trainer runs as its own process; wall time is from start to exit (the Dask run includes
starting its cluster), peak memory covers the process and all its children (bench/measure.py).
Our numba kernels are compiled once before timing: a first run compiles them, later runs load
them from the cache, which is what users see after their first run. The machines are noisy: the
runs are interleaved and the ratios, measured in the same run, matter more than the seconds.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from bench.measure import REPO, bpe_train, python, run
from bench.scale_corpus import scaled_corpus
from bpe.manifest import Manifest

DEFAULT_DATA = REPO.parent / "shared" / "corpora" / "en"


def peer(trainer: str, data: Path, vocab_size: int, pattern: str) -> list[str]:
    return python("-m", "bench.peers", trainer, str(data), "--vocab-size", str(vocab_size), "--pattern", pattern)


def with_manifest(result: dict, out: Path) -> dict:
    result["manifest"] = Manifest.from_json(json.loads((out / "manifest.json").read_text()))
    return result


def median(runs: list[dict]) -> dict:
    return sorted(runs, key=lambda r: r["wall"])[len(runs) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument("--pattern", default="cl100k")
    parser.add_argument("--repeat", type=int, default=3, help="runs per trainer; the median is reported")
    parser.add_argument("--no-dask", action="store_true", help="skip the Dask engine")
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    parser.add_argument("--scale", type=float, help="build a corpus of this many MB from --data, and use it")
    args = parser.parse_args()
    if not args.data.exists():
        sys.exit(f"no corpus at {args.data} (give --data)")
    if args.scale:
        args.data = scaled_corpus(args.data, args.scale)
    work = Path(tempfile.mkdtemp(prefix="bpe-bench-"))
    try:
        pattern = ["--pattern", args.pattern]
        run(bpe_train(args.data, 300, work / "warm", *pattern))  # compile once, outside the timing
        if not args.no_dask:
            run(bpe_train(args.data, 300, work / "warm", *pattern, "--engine", "dask", "--workers", "2"))
        runs: dict[str, list[dict]] = {"local": [], "local1": [], "dask": [], "dask1": [], "hf": [], "rustbpe": []}
        for _ in range(args.repeat):  # interleaved, so that drifts in machine load hit every trainer
            out = work / "tok"
            runs["local"].append(with_manifest(run(bpe_train(args.data, args.vocab_size, out, *pattern)), out))
            cmd = bpe_train(args.data, args.vocab_size, out, *pattern, "--threads", "1")
            runs["local1"].append(with_manifest(run(cmd), out))
            if not args.no_dask:
                cmd = bpe_train(args.data, args.vocab_size, out, *pattern, "--engine", "dask", "--workers", "2")
                runs["dask"].append(with_manifest(run(cmd), out))
                cmd = bpe_train(args.data, 1000, out, *pattern, "--engine", "dask", "--workers", "1")
                runs["dask1"].append(with_manifest(run(cmd), out))
            runs["hf"].append(run(peer("hf", args.data, args.vocab_size, args.pattern)))
            runs["rustbpe"].append(run(peer("rustbpe", args.data, args.vocab_size, args.pattern)))
        report(args, runs)
        if args.json:
            keep = ("wall", "peak_mb")
            args.json.write_text(json.dumps({k: [{x: r[x] for x in keep} for r in v] for k, v in runs.items()}))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(args, runs: dict[str, list[dict]]) -> None:
    local, hf, rust = median(runs["local"]), median(runs["hf"]), median(runs["rustbpe"])
    m = local["manifest"]
    mb = m.counts.bytes / 1e6
    print(
        f"corpus {args.data}: {mb:,.1f} MB, {m.counts.documents:,} documents, "
        f"{m.counts.unique_words:,} unique words; vocabulary {args.vocab_size:,}, pattern {args.pattern}; "
        f"median of {args.repeat} interleaved run(s)"
    )
    print()
    print("| trainer | wall (s) | peak memory (MB) | wall / rustbpe | wall / HF | memory / HF |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    rows = [("bpe train, local engine", local)]
    if runs["dask"]:
        rows.append(("bpe train, Dask engine, 2 local workers (cluster start included)", median(runs["dask"])))
    rows += [("Hugging Face tokenizers", hf), ("rustbpe", rust)]
    for name, r in rows:
        print(
            f"| {name} | {r['wall']:.2f} | {r['peak_mb']:.0f} | {r['wall'] / rust['wall']:.2f}x | "
            f"{r['wall'] / hf['wall']:.2f}x | {r['peak_mb'] / hf['peak_mb']:.2f}x |"
        )
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
    if runs["dask"]:
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
    walls = {k: [round(r["wall"], 2) for r in v] for k, v in runs.items() if v}
    print(f"every wall time (s): {walls}")


if __name__ == "__main__":
    main()

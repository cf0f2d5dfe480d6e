"""Benchmark: the whole `bpe train` process against Hugging Face `tokenizers` and `rustbpe`, in one run.

    python -m bench.train [--data ../shared/corpora/en] [--vocab-size 32768] [--pattern cl100k] [--repeat 3]

Every trainer runs as its own process on the same Parquet rows; wall time is measured from
start to exit, peak memory is the process's (and its children's) maximum resident set. Our
numba kernels are compiled once before timing (a first run compiles them; later runs load them
from the cache, which is what users see after the first run). Machines are noisy: read the
ratios, which are measured in the same run, more than the seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "corpora" / "en"


def run_isolated(command: list[str]) -> dict:
    """Measure in a fresh helper process, so RUSAGE_CHILDREN holds only this command's peak."""
    helper = [sys.executable, "-c", _HELPER, json.dumps(command)]
    done = subprocess.run(helper, capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.splitlines()[-1])


_HELPER = """
import json, resource, subprocess, sys, time
command = json.loads(sys.argv[1])
started = time.perf_counter()
done = subprocess.run(command, capture_output=True, text=True)
wall = time.perf_counter() - started
if done.returncode != 0:
    sys.stderr.write(done.stderr[-3000:]); sys.exit(1)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps({"wall": wall, "peak_mb": peak, "stdout": done.stdout}))
"""


def bpe_command(data: Path, vocab_size: int, pattern: str, out: Path, extra: list[str] = ()) -> list[str]:
    return [
        sys.executable, "-m", "bpe.cli", "train", str(data), "--vocab-size", str(vocab_size),
        "--pattern", pattern, "--out", str(out), "--force", "--quiet", *extra,
    ]  # fmt: skip


def peer_command(trainer: str, data: Path, vocab_size: int, pattern: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "bench.peers",
        trainer,
        str(data),
        "--vocab-size",
        str(vocab_size),
        "--pattern",
        pattern,
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument("--pattern", default="cl100k")
    parser.add_argument("--repeat", type=int, default=3, help="runs per trainer; the median is reported")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    if not args.data.exists():
        sys.exit(f"no corpus at {args.data} (give --data)")

    work = Path(tempfile.mkdtemp(prefix="bpe-bench-"))
    try:
        # Compile the kernels once, outside the timing.
        run_isolated(bpe_command(args.data, 300, args.pattern, work / "warm"))
        runs: dict[str, list[dict]] = {"bpe (local)": [], "hf tokenizers": [], "rustbpe": []}
        for _ in range(args.repeat):  # interleaved, so that drifts in machine load hit all alike
            r = run_isolated(bpe_command(args.data, args.vocab_size, args.pattern, work / "tok"))
            r["manifest"] = json.loads((work / "tok" / "manifest.json").read_text())
            runs["bpe (local)"].append(r)
            runs["hf tokenizers"].append(run_isolated(peer_command("hf", args.data, args.vocab_size, args.pattern)))
            runs["rustbpe"].append(run_isolated(peer_command("rustbpe", args.data, args.vocab_size, args.pattern)))
        report(args, runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def median_run(rs: list[dict]) -> dict:
    return sorted(rs, key=lambda r: r["wall"])[len(rs) // 2]


def report(args, runs: dict[str, list[dict]]) -> None:
    ours = median_run(runs["bpe (local)"])
    hf, rust = median_run(runs["hf tokenizers"]), median_run(runs["rustbpe"])
    m = ours["manifest"]
    mb = m["counts"]["bytes"] / 1e6
    print(f"corpus {args.data}: {mb:,.1f} MB, {m['counts']['documents']:,} documents; vocabulary {args.vocab_size:,}, "
          f"pattern {args.pattern}; median of {args.repeat} run(s) each, interleaved")  # fmt: skip
    print()
    print("| trainer | wall (s) | peak memory (MB) | wall vs rustbpe | wall vs HF | memory vs HF |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, r in (("bpe train (local engine)", ours), ("Hugging Face tokenizers", hf), ("rustbpe", rust)):
        print(f"| {name} | {r['wall']:.2f} | {r['peak_mb']:.0f} | {r['wall'] / rust['wall']:.2f}x | "
              f"{r['wall'] / hf['wall']:.2f}x | {r['peak_mb'] / hf['peak_mb']:.2f}x |")  # fmt: skip
    s = m["seconds"]
    print()
    print(f"bpe phases: count {s['count']:.2f} s ({mb / s['count']:,.1f} MB/s), "
          f"merge {s['merge']:.2f} s ({m['result']['merges'] / s['merge']:,.0f} merges/s, "
          f"{m['engine']['rounds']:,} rounds), export {s.get('export', 0):.2f} s; "
          f"{m['counts']['unique_words']:,} unique words")  # fmt: skip
    walls = {k: [round(r["wall"], 2) for r in v] for k, v in runs.items()}
    print(f"all walls: {walls}")
    if args.json:
        args.json.write_text(
            json.dumps({k: [{x: r[x] for x in ("wall", "peak_mb")} for r in v] for k, v in runs.items()})
        )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONPATH", str(REPO))
    main()

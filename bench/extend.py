"""Benchmark: training from an existing tokenizer. How long replaying GPT-2's 50,000 merges on a
corpus's words takes against counting them, and whole `bpe train --from gpt2` runs against
training the same final size from nothing, with Hugging Face `tokenizers` and `rustbpe` (which
cannot start from a tokenizer) training that size in the same run.

    python -m bench.extend [--data ../shared/corpora/en] [--gpt2 ../shared/gpt2] [--new 1000] [--repeat 3]

In this process: counting the corpus (GPT-2's pattern, every core) and the replay on the counted
words (one thread, then split by hash on every core as `train` does), after a warm-up that
compiles. Then every trainer as its own process, interleaved: wall time and peak memory of the
whole process tree (bench/measure.py). Compare the ratios: the machines are noisy.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.measure import REPO, bpe_train, run
from bench.train import median, peer

DEFAULT_DATA = REPO.parent / "shared" / "corpora" / "en"
DEFAULT_GPT2 = REPO.parent / "shared" / "gpt2"


def replay_against_counting(data: Path, gpt2: Path) -> dict:
    """Seconds to count `data` and to replay GPT-2's merges on its unique words (best of 3 each)."""
    from bpe import Tokenizer
    from bpe.engine.cores import available_cores
    from bpe.inputs.discover import discover
    from bpe.pretokenize import Pretokenizer
    from bpe.training.counting import count_shards
    from bpe.training.extend import Base

    shards = discover([str(data)])
    pretokenizer = Pretokenizer("gpt2", ["<|endoftext|>"])
    base = Base(Tokenizer.load(gpt2), str(gpt2)).merges
    threads = available_cores()

    def best(f) -> float:
        times = []
        for _ in range(3):
            started = time.perf_counter()
            f()
            times.append(time.perf_counter() - started)
        return min(times)

    counts, stats, _ = count_shards(shards, pretokenizer)  # warm-up: compiles, fills the page cache
    base.replay(counts.split_by_hash(1)[0])
    count = best(lambda: count_shards(shards, pretokenizer))
    one = best(lambda: base.replay(counts))
    parts = counts.split_by_hash(threads)
    with ThreadPoolExecutor(threads) as pool:
        spread = best(lambda: list(pool.map(base.replay, parts)))
    tokens, lengths = base.replay(counts)
    return {
        "count": count,
        "replay_1": one,
        "replay": spread,
        "threads": threads,
        "words": len(counts),
        "word_bytes": len(counts.data),
        "tokens_after": int(len(tokens)),
        "merges": len(base),
        "text_mb": stats.bytes / 1e6,
    }


def whole_runs(args: argparse.Namespace) -> dict[str, list[dict]]:
    """Every trainer to GPT-2's size plus `args.new`, `args.repeat` times, interleaved."""
    size = 50257 + args.new
    work = Path(tempfile.mkdtemp(prefix="bpe-bench-extend-"))
    try:
        run(bpe_train(args.data, 300, work / "warm", "--pattern", "gpt2"))  # compile once, outside the timing
        runs: dict[str, list[dict]] = {"from": [], "scratch": [], "hf": [], "rustbpe": []}
        for _ in range(args.repeat):
            runs["from"].append(run(bpe_train(args.data, size, work / "t", "--from", str(args.gpt2))))
            runs["scratch"].append(run(bpe_train(args.data, size, work / "t", "--pattern", "gpt2")))
            runs["hf"].append(run(peer("hf", args.data, size, "gpt2")))
            runs["rustbpe"].append(run(peer("rustbpe", args.data, size, "gpt2")))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--gpt2", type=Path, default=DEFAULT_GPT2)
    parser.add_argument("--new", type=int, default=1000, help="merges to add after GPT-2's (default 1000)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per trainer; the median is reported")
    args = parser.parse_args()
    for path, flag in ((args.data, "--data"), (args.gpt2 / "merges.txt", "--gpt2")):
        if not path.exists():
            sys.exit(f"{path} not found (give {flag})")
    runs = whole_runs(args)
    r = replay_against_counting(args.data, args.gpt2)  # after the runs: a child's peak starts at its parent's size
    print(
        f"corpus {args.data}: {r['text_mb']:,.1f} MB, {r['words']:,} unique words ({r['word_bytes'] / 1e6:,.1f} MB)"
        f", GPT-2's pattern"
    )
    print()
    print("| step | seconds | / counting |")
    print("| --- | ---: | ---: |")
    print(f"| count the corpus ({r['threads']} threads) | {r['count']:.3f} | 1.00x |")
    print(
        f"| replay GPT-2's {r['merges']:,} merges on the unique words, 1 thread | {r['replay_1']:.3f} | "
        f"{r['replay_1'] / r['count']:.3f}x |"
    )
    print(
        f"| the same, words split by hash on {r['threads']} threads (as train does) | {r['replay']:.3f} | "
        f"{r['replay'] / r['count']:.3f}x |"
    )
    print(f"\nreplayed words hold {r['tokens_after']:,} tokens ({r['word_bytes'] / r['tokens_after']:.2f} bytes each)")
    size = 50257 + args.new
    rust, hf = median(runs["rustbpe"]), median(runs["hf"])
    print(f"\nwhole runs to {size:,} tokens, median of {args.repeat} interleaved run(s)\n")
    print("| trainer | wall (s) | peak memory (MB) | wall / rustbpe | wall / HF |")
    print("| --- | ---: | ---: | ---: | ---: |")
    names = {
        "from": f"bpe train --from gpt2 (+{args.new:,} merges)",
        "scratch": "bpe train from nothing",
        "hf": "Hugging Face tokenizers, from nothing",
        "rustbpe": "rustbpe, from nothing",
    }
    for key, name in names.items():
        m = median(runs[key])
        print(
            f"| {name} | {m['wall']:.2f} | {m['peak_mb']:.0f} | {m['wall'] / rust['wall']:.2f}x | "
            f"{m['wall'] / hf['wall']:.2f}x |"
        )
    print(f"\nevery wall time (s): { {k: [round(x['wall'], 2) for x in v] for k, v in runs.items()} }")


if __name__ == "__main__":
    main()

"""The BPE optimisation ladder: five textbook trainers, each removing one bottleneck, then our engines.

    python -m bench.ladder [--data PATH_OR_DIR] [--bytes 200000] [--merges 500] [--pattern whitespace]
                           [--scaling] [--sizes 200000,1000000,5000000] [--time-limit 60] [--out bench/results]
                           [--no-dask]

Every rung learns the same merges from the same documents (asserted): pre-tokenize, take the words'
UTF-8 bytes as token ids 0..255, then merge i makes token 256 + i; the most frequent pair wins and
ties go to the largest pair of ids (a, then b). Each rung is timed from the list of documents to the
list of merges, counting included. Rungs 1-5 are the textbook trainers of bpe/training/_educational.py, plain
Python in the style of karpathy/minbpe; rung 6 is our local engine, rung 7 our Dask engine on 2
local workers; this module is the harness that times them. Prints a markdown table and writes
<out>/ladder.png; --scaling repeats the ladder at --sizes, skips a rung where it would take over
--time-limit, and writes <out>/ladder_scaling.png.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import pyarrow.parquet as pq

from bpe import train
from bpe.engine.merge import learn_merges
from bpe.engine.rules import MergeRules
from bpe.errors import SettingsError
from bpe.pretokenize import resolve_pattern
from bpe.training._educational import TEXTBOOK, Merges, Rung, Trainer, pretokenize
from bpe.training.counting import count_words

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "corpora" / "en"


# ---------------------------------------------------------------------------------------------
# The rungs: the textbook's five (bpe/training/_educational.py), then our engines on the same documents.


def train_local_engine(texts: Sequence[str], n_merges: int, pattern: str = "whitespace") -> Merges:
    """Step 6, our local engine: counting with a compiled scanner and hash table, then compiled
    merge kernels over flat arrays, several merges per round when that provably equals one at a time."""
    rules = MergeRules(
        tie_break="ids", min_frequency=1, max_token_length=None, superwords=None
    )  # the textbook tie-break
    result = learn_merges(count_words(texts, pattern), n_merges, rules)
    return [(int(a), int(b)) for a, b in result.merges.tolist()]


def train_dask_engine(
    texts: Sequence[str], n_merges: int, pattern: str = "whitespace", workers: int = 2
) -> tuple[Merges, dict[str, float]]:
    """Step 7, our Dask engine on a local cluster it starts; returns the merges and the manifest's
    seconds per phase ("cluster", "count", "build", "merge", ...)."""
    tok = train(
        list(texts), vocab_size=256 + n_merges, pattern=pattern, tie_break="ids", engine="dask", workers=workers
    )
    return [(int(a), int(b)) for a, b in tok.merges], tok.manifest.seconds.to_json()


RUNGS = [
    *TEXTBOOK,
    Rung(
        "6",
        "bpe local engine",
        "the interpreter: compiled kernels over flat arrays, multi-merge rounds",
        train_local_engine,
    ),
    Rung(
        "7a",
        "bpe Dask engine (2 local workers), cluster start included",
        "one machine's memory (adds a cluster start and a round trip per round)",
        None,
    ),
    Rung(
        "7b",
        "bpe Dask engine (2 local workers), without cluster start",
        "one machine's memory (adds a round trip per round)",
        None,
    ),
]


# ---------------------------------------------------------------------------------------------
# Input: whole documents up to a byte budget.


def iter_documents(path: Path) -> Iterator[str]:
    """Documents of one file: rows of a Parquet file's `text` column (nulls skipped), or lines of a
    text file (paragraphs)."""
    if path.suffix == ".parquet":
        for batch in pq.ParquetFile(path).iter_batches(batch_size=4096, columns=["text"]):
            yield from (text for text in batch.column(0).to_pylist() if text)
    else:
        with path.open(encoding="utf-8", newline="") as f:
            yield from f


def load_texts(path: Path, n_bytes: int) -> list[str]:
    """Whole documents from `path` (a .txt or .parquet file, or a directory of them read in sorted
    order) until they hold at least `n_bytes` of UTF-8 (all of them if `n_bytes` <= 0 or too big)."""
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in (".parquet", ".txt"))
    else:
        files = [path]
    if not files or not files[0].exists():
        raise SystemExit(f"no input at {path} (give --data: a .txt or .parquet file, or a directory)")
    return take_bytes(chain.from_iterable(iter_documents(file) for file in files), n_bytes)


def take_bytes(texts: Iterable[str], n_bytes: int) -> list[str]:
    """The leading documents of `texts`, up to the first at which they hold at least `n_bytes` of
    UTF-8 (all of them if `n_bytes` <= 0); reads no further, so `texts` may be a lazy stream."""
    out: list[str] = []
    total = 0
    for text in texts:
        if 0 < n_bytes <= total:
            break
        out.append(text)
        total += len(text.encode())
    return out


def size_of(texts: Sequence[str]) -> int:
    return sum(len(text.encode()) for text in texts)


# ---------------------------------------------------------------------------------------------
# Running and checking the ladder.


@dataclass
class Result:
    """A rung's time and merges on one input."""

    rung: Rung
    seconds: float | None  # None: skipped
    merges: Merges | None = None
    phases: dict[str, float] | None = None  # the Dask engine's own seconds per phase
    estimate: float | None = None  # for a skipped rung: the time it was expected to take


def timed(
    trainer: Trainer, texts: Sequence[str], n_merges: int, pattern: str, budget: float = 1.0, runs: int = 5
) -> tuple[Merges, float]:
    """(merges, median seconds). A fast rung runs several times (up to `runs`, while the runs so far
    take under `budget` seconds), because one run of a few milliseconds is at the mercy of the machine."""
    times: list[float] = []
    while True:
        start = time.perf_counter()
        merges = trainer(texts, n_merges, pattern)
        times.append(time.perf_counter() - start)
        if sum(times) >= budget or len(times) >= runs:
            return merges, statistics.median(times)


def warm_up(pattern: str, dask: bool, log: Callable[[str], None] = lambda line: None) -> None:
    """Untimed first calls: the first call of an engine in a process loads its compiled kernels
    from the cache (or compiles them, after bpe/ changed)."""
    tiny = ["warm up: aaab aab low lower lowest"]
    start = time.perf_counter()
    train_local_engine(tiny, 5, pattern)
    log(f"warm-up, local engine: {time.perf_counter() - start:.2f} s")
    if dask:
        start = time.perf_counter()
        train_dask_engine(tiny, 5, pattern)
        log(f"warm-up, Dask engine: {time.perf_counter() - start:.2f} s")


def run_ladder(
    texts: Sequence[str],
    n_merges: int,
    pattern: str,
    dask: bool = True,
    skip: Collection[str] = (),
    log: Callable[[str], None] = lambda line: None,
) -> list[Result]:
    """Time every rung on `texts`, except the steps in `skip`."""
    results = []
    for rung in RUNGS:
        if rung.trainer is None or rung.step in skip:
            continue
        merges, seconds = timed(rung.trainer, texts, n_merges, pattern)
        results.append(Result(rung, seconds, merges))
        log(f"step {rung.step}: {seconds:.4g} s, {len(merges)} merges")
    if dask:
        start = time.perf_counter()
        merges, phases = train_dask_engine(texts, n_merges, pattern)
        wall = time.perf_counter() - start
        work = sum(phases.get(phase, 0.0) for phase in ("count", "build", "merge"))
        results.append(Result(RUNGS[6], wall, merges, phases))
        results.append(Result(RUNGS[7], work, merges, phases))
        log(f"step 7: {wall:.4g} s ({', '.join(f'{k} {v:.3g} s' for k, v in phases.items())})")
    return results


def check_identical(results: Sequence[Result]) -> None:
    """Raise AssertionError unless every rung that ran made exactly the same merges."""
    ran = [r for r in results if r.merges is not None]
    if not ran:
        return
    first = ran[0]
    for other in ran[1:]:
        if other.merges != first.merges:
            n = min(len(first.merges), len(other.merges))
            at = next((i for i in range(n) if first.merges[i] != other.merges[i]), n)
            mine = first.merges[at] if at < len(first.merges) else "none"
            theirs = other.merges[at] if at < len(other.merges) else "none"
            raise AssertionError(
                f"step {other.rung.step} differs from step {first.rung.step} at merge {at}: {theirs} != {mine} "
                f"({len(other.merges)} vs {len(first.merges)} merges)"
            )


# ---------------------------------------------------------------------------------------------
# Reporting.


def seconds_text(seconds: float) -> str:
    return f"{seconds:.3g}" if seconds < 100 else f"{seconds:.0f}"


def speedup_text(ratio: float) -> str:
    return f"{ratio:,.0f}x" if ratio >= 10 else f"{ratio:.2g}x"


def human_bytes(n: int) -> str:
    return f"{n / 1e6:.3g} MB" if n >= 1e6 else f"{n / 1e3:.3g} KB"


def ladder_table(results: Sequence[Result]) -> str:
    """The markdown table: step, technique, time, speedup over step 1, bottleneck removed."""
    base = next(r.seconds for r in results if r.rung.step == "1")
    lines = [
        "| step | technique | time (s) | speedup over step 1 | bottleneck removed |",
        "| --- | --- | ---: | ---: | --- |",
    ]
    for r in results:
        lines.append(
            f"| {r.rung.step} | {r.rung.technique} | {seconds_text(r.seconds)} | "
            f"{speedup_text(base / r.seconds)} | {r.rung.removes} |"
        )
    return "\n".join(lines)


def plot_ladder(results: Sequence[Result], path: Path, title: str) -> None:
    """Horizontal bars of seconds on a log scale, step 1 on top."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = next(r.seconds for r in results if r.rung.step == "1")
    labels = [f"{r.rung.step}. {r.rung.technique.split(':')[0]}" for r in results]
    seconds = [r.seconds for r in results]
    colors = ["#4c72b0" if r.rung in TEXTBOOK else "#dd8452" for r in results]
    fig, ax = plt.subplots(figsize=(10, 0.55 * len(results) + 1.5))
    bars = ax.barh(range(len(results)), seconds, color=colors)
    ax.set_xscale("log")
    ax.set_yticks(range(len(results)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("seconds (log scale)")
    ax.set_title(title)
    ax.set_xlim(min(seconds) / 3, max(seconds) * 10)
    for bar, s in zip(bars, seconds):
        ax.text(
            s * 1.15, bar.get_y() + bar.get_height() / 2, f"{seconds_text(s)} s ({speedup_text(base / s)})", va="center"
        )
    ax.grid(axis="x", which="major", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# The scaling view: the same ladder at several corpus sizes, with a per-rung time limit.


def workload(rung: Rung, words: Sequence[bytes], n_bytes: int) -> int:
    """What a rung's time grows with, to extrapolate it to a bigger corpus: word occurrences for
    step 1, unique words for steps 2-5 (their rounds walk unique words), bytes for our engines."""
    if rung.step == "1":
        return len(words)
    if rung in TEXTBOOK:
        return len(set(words))
    return n_bytes


def run_scaling(
    texts: Sequence[str],
    sizes: Sequence[int],
    n_merges: int,
    pattern: str,
    time_limit: float,
    dask: bool = True,
    done: dict[int, list[Result]] | None = None,
    log: Callable[[str], None] = lambda line: None,
) -> dict[int, list[Result]]:
    """Results per corpus size (actual bytes), smallest first; `done` holds results already
    measured, by requested size. A rung is skipped at a size when its time at the previous size,
    scaled by its `workload`, exceeds `time_limit` (the skipped result keeps that estimate)."""
    by_size: dict[int, list[Result]] = {}
    last: dict[str, tuple[int, float]] = {}  # step -> (workload, seconds) where it last ran
    for size in sorted(set(sizes)):
        part = take_bytes(texts, size)
        actual = size_of(part)
        if actual in by_size:
            continue  # the corpus ran out: the same documents as the previous size
        words = pretokenize(part, pattern)
        work = {rung.step: workload(rung, words, actual) for rung in RUNGS}
        if done and size in done:
            results = done[size]
        else:
            log(f"scaling: {human_bytes(actual)}, {len(part):,} documents")
            estimates = {step: seconds * work[step] / then for step, (then, seconds) in last.items()}
            too_slow = {step for step, estimate in estimates.items() if estimate > time_limit}
            results = run_ladder(part, n_merges, pattern, dask, too_slow, log)
            check_identical(results)
            ran = {r.rung.step for r in results}
            skipped = [rung for rung in RUNGS if rung.step not in ran and (dask or rung.trainer)]
            results += [Result(rung, None, estimate=estimates.get(rung.step)) for rung in skipped]
            results.sort(key=lambda r: RUNGS.index(r.rung))
        for r in results:
            if r.seconds is not None:
                last[r.rung.step] = (work[r.rung.step], r.seconds)
        by_size[actual] = results
    return by_size


def scaling_table(by_size: dict[int, list[Result]], time_limit: float) -> str:
    """Rungs down, corpus sizes across; a skipped rung reads "skipped (> limit)", with its
    estimated time in the notes below the table."""
    sizes = sorted(by_size)
    lines = [
        "| step | technique | " + " | ".join(f"{human_bytes(s)} (s)" for s in sizes) + " |",
        "| --- | --- |" + " ---: |" * len(sizes),
    ]
    notes = []
    for rung in [r.rung for r in by_size[sizes[0]]]:
        cells = []
        for s in sizes:
            result = next(r for r in by_size[s] if r.rung == rung)
            if result.seconds is None:
                cells.append("skipped (> limit)")
                if result.estimate is not None:
                    notes.append(f"step {rung.step} at {human_bytes(s)} ~{seconds_text(result.estimate)} s")
            else:
                cells.append(seconds_text(result.seconds))
        lines.append(f"| {rung.step} | {rung.technique} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        f"Time limit {time_limit:g} s per rung. A rung is skipped when its time at the previous size, scaled by "
        "word occurrences (step 1), unique words (steps 2-5) or bytes (our engines), exceeds it"
        + (f"; estimated: {'; '.join(notes)}." if notes else ".")
    )
    return "\n".join(lines)


def plot_scaling(by_size: dict[int, list[Result]], path: Path, title: str, time_limit: float) -> None:
    """Seconds against corpus size, one line per rung, log-log; a skipped rung's estimate is drawn
    as a hollow marker."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(by_size)
    fig, ax = plt.subplots(figsize=(9, 6))
    for rung in [r.rung for r in by_size[sizes[0]]]:
        results = [(s, r) for s in sizes for r in by_size[s] if r.rung == rung]
        points = [(s, r.seconds) for s, r in results if r.seconds is not None]
        if not points:
            continue
        marker = "o" if rung in TEXTBOOK else "s"
        (line,) = ax.plot(*zip(*points), marker=marker, linestyle="-" if rung in TEXTBOOK else "--")
        line.set_label(f"{rung.step}. {rung.technique.split(':')[0]}")
        estimates = [(s, r.estimate) for s, r in results if r.seconds is None and r.estimate is not None]
        if estimates:
            ax.plot(*zip(*estimates), marker=marker, linestyle="none", markerfacecolor="none", color=line.get_color())
    ax.axhline(time_limit, color="gray", linestyle=":", label=f"time limit ({time_limit:g} s); hollow: skipped, est.")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(sizes, [human_bytes(s) for s in sizes])
    ax.minorticks_off()
    ax.set_xlabel("corpus size (UTF-8)")
    ax.set_ylabel("seconds")
    ax.set_title(title)
    ax.grid(which="major", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# The command.


def parse_sizes(text: str) -> list[int]:
    """ "200000,1M,5M" -> [200000, 1000000, 5000000] (k and M are decimal)."""
    sizes = []
    for item in text.split(","):
        item = item.strip().lower()
        factor = {"k": 1_000, "m": 1_000_000}.get(item[-1:], 1)
        sizes.append(int(float(item.rstrip("km")) * factor))
    return sizes


def pattern_arg(pattern: str) -> str:
    """Reject a bad --pattern before any rung runs."""
    try:
        resolve_pattern(pattern)
    except SettingsError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return pattern


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="a .txt or .parquet file, or a directory")
    parser.add_argument("--bytes", type=int, default=200_000, help="take whole documents up to this many bytes")
    parser.add_argument("--merges", type=int, default=500)
    parser.add_argument(
        "--pattern", type=pattern_arg, default="whitespace", help="whitespace (str.split), a name (gpt2...) or a regex"
    )
    parser.add_argument("--scaling", action="store_true", help="also run the ladder at --sizes")
    parser.add_argument("--sizes", type=parse_sizes, default=[200_000, 1_000_000, 5_000_000])
    parser.add_argument("--time-limit", type=float, default=60.0, help="per rung, for the scaling view (seconds)")
    parser.add_argument("--no-dask", action="store_true", help="leave out the Dask engine")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results", help="where the charts go")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """Run the ladder (and, with --scaling, the scaling view); tables go to stdout, progress to stderr."""
    args = parse_args(argv)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    dask = not args.no_dask
    wanted = max([args.bytes, *(args.sizes if args.scaling else [])]) if args.bytes > 0 else 0
    everything = load_texts(args.data, wanted)
    texts = take_bytes(everything, args.bytes)
    n_bytes = size_of(texts)
    setting = f"{human_bytes(n_bytes)}, {args.merges} merges, pattern {args.pattern}"
    log(f"ladder: {args.data}: {len(texts):,} documents, {n_bytes:,} bytes; {args.merges} merges")
    warm_up(args.pattern, dask, log)
    results = run_ladder(texts, args.merges, args.pattern, dask, log=log)
    check_identical(results)
    n_merges = len(results[0].merges)
    print(
        f"BPE ladder on {n_bytes:,} bytes ({len(texts):,} documents) of {args.data}, {n_merges} merges, "
        f"pattern {args.pattern}; every step made the same {n_merges} merges (asserted)\n"
    )
    print(ladder_table(results))
    phases = next((r.phases for r in results if r.phases), None)
    if phases:
        listed = ", ".join(f"{phase} {seconds:.3g}" for phase, seconds in phases.items())
        print(
            f"\nDask engine, seconds per phase: {listed}. Step 7a is the wall time of the whole call (starting and "
            "stopping the cluster included), step 7b is count + build + merge."
        )
    chart = args.out / "ladder.png"
    plot_ladder(results, chart, f"BPE training ladder ({setting})")
    print(f"\nchart: {chart}")
    if args.scaling:
        by_size = run_scaling(
            everything, args.sizes, args.merges, args.pattern, args.time_limit, dask, {args.bytes: results}, log
        )
        print(f"\nScaling ({args.merges} merges, pattern {args.pattern}; merges identical across the rungs that ran)\n")
        print(scaling_table(by_size, args.time_limit))
        chart = args.out / "ladder_scaling.png"
        plot_scaling(by_size, chart, f"BPE ladder: time against corpus size ({args.merges} merges)", args.time_limit)
        print(f"\nchart: {chart}")


if __name__ == "__main__":
    main()

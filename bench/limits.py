"""Benchmark: where the limit is. The work a `bpe train` run cannot avoid on this design, each part
measured alone on one thread, printed beside the run's own time, so that the next gap shows.

    python -m bench.limits [--data ../shared/corpora/en] [--vocab-size 32768] [--pattern cl100k]
    python -m bench.limits --scale 500       # the corpus of `bench.train --scale 500`

The parts, each in this process after a warm-up, on one thread:
  read     the text column of every shard read from Parquet and decoded into Arrow (pyarrow)
  regex    the split pattern run by the `regex` module over every document (`finditer`); above
           `--regex-mb` of text, over an even sample of the documents, scaled to the whole
  scanner  the same split by our compiled scanner (`bpe.engine.scanner`), nothing counted
  count    our counting on one thread (`bpe.count(threads=1)`): scanning, hashing, the table
  merges   the run's merges applied in order to its unique words, as the word tables apply them
           (each merge rewrites every word holding its pair and records the pair-count changes),
           without choosing them: the merge loop's work less the queue's; with how many word
           rewrites that is (the sum over merges of the words each rewrites)
  loop     our merge loop on one thread (`learn_merges(threads=1)`): the merges applied and chosen
  driver   the threaded loop's driver on one thread: each round chosen and every slice's count
           differences added to the one pair queue, while the slices wait (`driver_seconds`)
  sum      C counting threads' tables summed into the merge loop's C hash parts, on C threads
           (`sum_seconds`)
  start    `bpe train` on 1 KB of the corpus's text with `--threads` (the engine's compiled path, not
           the small-input one), a process of its own: what a run pays whatever its size (Python,
           numba, the kernels from the cache, a tokenizer written)
  export   the trained tokenizer's files written (`Tokenizer.save`), in this process
  ours     `bpe train` (default threads), a process of its own: wall, count and merge loop

The floor on this design with C cores: one thread reads while the others count, on the same C
cores (reading takes CPU too), and the merge loop splits the words over C threads, so
max(read, (read + scanner) / C) + merges / C. `ours / floor` is how far the run is from it. With
the fixed costs, start + floor + export: what a run of this design takes at best on C cores. The
peers (`--peers`, rustbpe and sentencepiece unless given) train on the same corpus in the same
run, so that the floor prints as a share of their times beside the goals of issue 51: a goal below
that share cannot be met on this design.

    python -m bench.limits --superwords --scale 125    # the superword stage's parts and floor

With `--superwords`, the parts of a superword run's second stage (SuperBPE, transition at 0.7 of
the vocabulary), each alone on one thread: the text read again and split by the superword pattern,
counted, stage 1's merges replayed on the pieces, the tracked pairs indexed, the stage's merges
applied. The stage's floor on C cores is max(read, (read + scanner) / C) + (replay + index +
merges) / C, printed beside what the goal (a superword run in at most 2x plain BPE's time, both
run here) leaves the stage once everything else in the run is paid.

Each floor is printed again with our counting (`count`) in place of the scanner alone: this design
counts pieces in a hash table, and that work is as much a part of it as the split. The plain run's
third floor is this design's: start + max(read, (read + count) / C) + sum + (index + merges) / C +
driver + export, every part it cannot do without (`design_floor`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pyarrow.parquet as pq
from numba import njit

from bench.measure import REPO, bpe_train, run
from bench.scale_corpus import scaled_corpus
from bench.train import SUPERWORD_TRANSITION, first_lines, peer
from bpe.engine.count import WordCounts
from bpe.engine.merge import learn_merges
from bpe.engine.rules import MergeRules
from bpe.engine.scanner import decode_utf8, next_piece_end
from bpe.schema import DEFAULT

DEFAULT_DATA = REPO.parent / "shared" / "corpora" / "en"


def shards_of(data: Path) -> list[Path]:
    return sorted(data.glob("*.parquet")) if data.is_dir() else [data]


def timed(work) -> tuple[float, object]:
    start = time.perf_counter()
    result = work()
    return time.perf_counter() - start, result


def read_texts(shards: list[Path], column: str = "text") -> list:
    """Every shard's text column as Arrow arrays, read on one thread."""
    return [pq.read_table(shard, columns=[column], use_threads=False).column(column) for shard in shards]


def regex_seconds(columns: list, pattern: str, most_mb: float) -> tuple[float, float]:
    """Seconds for the `regex` module to split every document (scaled from an even sample above
    `most_mb` MB), and the fraction of the text it ran on."""
    import regex

    from bpe.pretokenize import resolve_pattern

    split = regex.compile(resolve_pattern(pattern)[1])
    total = text_bytes(columns)
    every = max(1, int(np.ceil(total / (most_mb * 1e6))))
    documents = [text for column in columns for text in column.to_pylist()[::every] if text]
    sampled = sum(len(text.encode()) for text in documents)
    seconds, _ = timed(lambda: [sum(1 for _ in split.finditer(text)) for text in documents])
    return seconds * total / max(sampled, 1), sampled / total


@njit(nogil=True, cache=True)
def _pieces(data, doc_offsets, scanner_id, classes, folds):
    """How many pieces our scanner cuts the documents into: the scan alone, nothing kept."""
    longest = 1
    for d in range(len(doc_offsets) - 1):
        longest = max(longest, doc_offsets[d + 1] - doc_offsets[d])
    cps = np.empty(longest + 1, dtype=np.int32)
    byte_pos = np.empty(longest + 2, dtype=np.int64)
    pieces = 0
    for d in range(len(doc_offsets) - 1):
        n = decode_utf8(data, doc_offsets[d], doc_offsets[d + 1], cps, byte_pos)
        p = 0
        while p < n:
            p = next_piece_end(cps, n, p, scanner_id, classes, folds)
            pieces += 1
    return pieces


def scanner_seconds(columns: list, pattern: str) -> tuple[float, int]:
    """Seconds for our compiled scanner to split every document (nothing counted), and the pieces."""
    from bpe.engine.scanner import SCANNER_IDS
    from bpe.pretokenize import scanner_tables

    classes, folds = scanner_tables()
    scanner = SCANNER_IDS[pattern]
    batches = []
    for column in columns:
        for chunk in column.chunks:
            width = np.int64 if pa.types.is_large_string(chunk.type) else np.int32
            offsets = np.frombuffer(chunk.buffers()[1], dtype=width)[chunk.offset : chunk.offset + len(chunk) + 1]
            data = np.frombuffer(chunk.buffers()[2], dtype=np.uint8)
            batches.append((data, offsets.astype(np.int64)))
    data, offsets = batches[0]
    _pieces(data, offsets[:2], scanner, classes, folds)  # compiled first, for these very types
    seconds, pieces = timed(lambda: sum(_pieces(d, o, scanner, classes, folds) for d, o in batches))
    return seconds, pieces


def text_bytes(columns: list) -> int:
    """Bytes of text in the columns (the values, not their offsets)."""
    return sum(pa.compute.sum(pa.compute.binary_length(chunk)).as_py() or 0 for c in columns for chunk in c.chunks)


def merge_work(counts, merges: np.ndarray) -> tuple[float, float, int]:
    """(seconds to index the words, seconds to apply every merge to them, word rewrites)."""
    from bpe.engine.replay import BaseMerges
    from bpe.engine.word_table import WordTable

    rows = np.column_stack([merges, 256 + np.arange(len(merges))]).astype(np.int64)
    WordTable(counts).apply(rows[:1])  # kernels loaded first
    index, table = timed(lambda: WordTable(counts))
    table.take_deltas()
    apply, _ = timed(lambda: (table.apply(rows), table.take_deltas()))
    tokens, lengths = BaseMerges(merges).replay(counts)
    return index, apply, rewrites(tokens, lengths, merges)


def driver_seconds(counts, merges: np.ndarray, rules, slices: int) -> float:
    """Seconds the threaded loop's driver works alone, on one thread, while the word slices wait:
    choosing each round's merges and adding every slice's count differences to the one pair queue
    (the rounds of `bpe.engine.merge.drive`, the words split in `slices` as the loop splits them).
    The slices' own work (applying the merges, taking their differences) is left out: the floor
    counts it in the merges applied. Each call from Python costs what the compiled loop does not
    pay (about 25 µs of dispatch and Ctrl-C hold, measured on empty calls); that is taken off. The
    merges must come out as `merges`, those of the run."""
    from bpe.engine.merge import drive
    from bpe.engine.pair_queue import PairQueue
    from bpe.engine.spin_rounds import MAX_ROUND_MERGES
    from bpe.engine.word_slices import split_tables

    # Every pair indexed, as plain BPE's loop indexes them from 16,384 merges (`tracked_pairs`); below
    # that it tracks fewer pairs, and this overstates its driver.
    tables = split_tables(counts, slices)
    queue = PairQueue(rules)
    for table in tables:
        queue.add(*table.take_deltas())
    spent, calls = [0.0], [0]

    def run_rounds(budget: int) -> tuple[np.ndarray, int]:
        made: list[np.ndarray] = []
        while budget > 0:
            start = time.perf_counter()
            batch = queue.next_round(min(budget, MAX_ROUND_MERGES))
            spent[0] += time.perf_counter() - start
            if not len(batch):
                break
            for table in tables:
                keys, deltas = table.apply_and_take(np.ascontiguousarray(batch))
                start = time.perf_counter()
                queue.add(keys, deltas)
                spent[0] += time.perf_counter() - start
            calls[0] += 1 + len(tables)
            made.append(batch)
            budget -= len(batch)
        return (np.concatenate(made) if made else np.zeros((0, 4), np.int64)), len(made)

    batches, _, _ = drive(run_rounds, len(merges), None)
    chosen = np.concatenate(batches)[:, :2] if batches else np.zeros((0, 2), np.int64)
    assert np.array_equal(chosen, merges), "the driver's rounds chose other merges than the run"
    return max(spent[0] - calls[0] * call_overhead(queue), 0.0)


def call_overhead(queue) -> float:
    """Seconds a call of a queue kernel costs from Python, on calls that do nothing (the least of
    5 runs of 200)."""
    keys, deltas = np.zeros(0, np.int64), np.zeros(0, np.int64)
    queue.add(keys, deltas)
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(200):
            queue.add(keys, deltas)
        runs.append((time.perf_counter() - start) / 200)
    return min(runs)


def design_floor(
    read: float, count: float, summed: float, index: float, applied: float, driver: float, cores: int
) -> float:
    """The least time of this design's work on `cores` cores, every part at its one-thread cost
    and perfectly spread: reading and counting share the cores (`split_floor`), the counting
    threads' tables are summed (`summed`, measured on the cores already), the words are indexed
    and the merges applied on every core, and the driver works while the slices wait. `start` and
    `export` come on top.

    >>> design_floor(read=1.0, count=3.0, summed=0.25, index=1.0, applied=4.0, driver=0.5, cores=2)
    5.25
    """
    return split_floor(read, count, cores) + summed + (index + applied) / cores + driver


def sum_seconds(shards: list[Path], pattern: str, cores: int) -> float:
    """Seconds to sum `cores` counting threads' tables into the merge loop's `cores` hash parts
    (`WordCounts.sum_by_hash`, a part on each core), as a run sums its counting threads'. Table k
    counts every `cores`-th shard from shard k, as a counting thread takes about every
    `cores`-th batch; no sum on one core."""
    import bpe

    if cores == 1 or len(shards) < cores:
        return 0.0
    tables = [
        bpe.count(files=[str(s) for s in shards[k::cores]], pattern=pattern, threads=1).counts for k in range(cores)
    ]
    seconds, _ = timed(lambda: WordCounts.sum_by_hash(tables, cores))
    return seconds


def rewrites(tokens: np.ndarray, lengths: np.ndarray, merges: np.ndarray) -> int:
    """The sum over merges of the words each rewrites: in each word, the distinct merges in the
    trees of its final tokens (a merge rewrites all its occurrences in a word at once)."""
    made: dict[int, frozenset] = {}

    def tree(token: int) -> frozenset:
        if token < 256:
            return frozenset()
        if token not in made:
            a, b = merges[token - 256]
            made[token] = tree(int(a)) | tree(int(b)) | {token}
        return made[token]

    total = 0
    for word in np.split(tokens, np.cumsum(lengths)[:-1]):
        merged = [int(t) for t in word if t >= 256]
        total += len(tree(merged[0])) if len(merged) == 1 else len(frozenset().union(*map(tree, merged)))
    return total


GOALS = {"rustbpe": 0.25, "sentencepiece": 0.2}  # issue 51: at most this share of each peer's wall time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--scale", type=float, help="build a corpus of this many MB from --data, and use it")
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument("--pattern", default="cl100k")
    parser.add_argument("--regex-mb", type=float, default=60.0, help="split at most this many MB with `regex`")
    parser.add_argument("--peers", default="rustbpe,sentencepiece", help="peers run on the corpus ('' for none)")
    parser.add_argument("--superwords", action="store_true", help="the superword stage's parts instead")
    args = parser.parse_args()
    if args.scale:
        args.data = scaled_corpus(args.data, args.scale)
    from bpe.engine.cores import available_cores

    cores, shards = available_cores(), shards_of(args.data)
    if args.superwords:
        superword_limits(args, cores, shards)
    else:
        plain_limits(args, cores, shards)


def plain_limits(args, cores: int, shards: list[Path]) -> None:
    """The parts of a plain run, its floor, and that floor beside the peers' times."""
    import bpe

    with tempfile.TemporaryDirectory() as work:
        out = Path(work) / "tok"
        run(bpe_train(args.data, 300, out, "--pattern", args.pattern))  # kernels compiled, files cached
        ours = run(bpe_train(args.data, args.vocab_size, out, "--pattern", args.pattern))
        manifest = json.loads((out / "manifest.json").read_text())
        merges = np.array(bpe.Tokenizer.load(out).merges, dtype=np.int64).reshape(-1, 2)
        out_kept = Path(tempfile.mkdtemp()) / "tok"
        shutil.copytree(out, out_kept)
    peers = {name: run(peer(name, args.data, args.vocab_size, args.pattern)) for name in args.peers.split(",") if name}
    read_texts(shards[:1])
    read, columns = timed(lambda: read_texts(shards))
    mb = text_bytes(columns) / 1e6
    scanner_s, pieces = scanner_seconds(columns, args.pattern)
    regex_s, sampled = regex_seconds(columns, args.pattern, args.regex_mb)
    del columns
    bpe.count(["warm up"], pattern=args.pattern, threads=1)
    count_s, counted = timed(lambda: bpe.count(files=str(args.data), pattern=args.pattern, threads=1))
    index_s, apply_s, words_rewritten = merge_work(counted.counts, merges)
    rules = MergeRules(DEFAULT["tie_break"], DEFAULT["min_frequency"], max_token_length=None, superwords=None)
    learn_merges(WordCounts.from_dict({b"abab": 2}), 2, rules)  # the queue's kernels loaded first
    loop_s = learn_merges(counted.counts, len(merges), rules, threads=1).seconds
    driver_s = driver_seconds(counted.counts, merges, rules, cores)
    sum_s = sum_seconds(shards, args.pattern, cores)
    floor = split_floor(read, scanner_s, cores) + apply_s / cores
    start_s = start_seconds(args, cores)
    export_s = export_seconds(out_kept)
    seconds = manifest["seconds"]
    print(f"## Where the limit is: {args.data} ({mb:,.1f} MB of text), {args.vocab_size:,} tokens, {args.pattern}")
    print()
    share = f"scaled from {sampled:.0%} of the documents" if sampled < 1 else "every document"
    parts_table(
        mb,
        [
            ("read and decode (pyarrow)", read, "the text column of every shard"),
            ("split: `regex` module", regex_s, share),
            ("split: our scanner", scanner_s, f"{pieces:,} pieces, nothing counted"),
            ("count: ours (`threads=1`)", count_s, f"{len(counted.counts):,} unique words"),
            ("index the words (word tables)", index_s, "every pair counted and listed"),
            ("apply the merges (word tables)", apply_s, f"{len(merges):,} merges, {words_rewritten:,} word rewrites"),
            ("merge loop: ours (`threads=1`)", loop_s, "the merges chosen and applied"),
            (f"driver: rounds chosen, {cores} slices' differences added", driver_s, "while the slices wait"),
            (f"sum: {cores} counting threads' tables into {cores} hash parts", sum_s, f"on {cores} threads"),
            ("start: `bpe train` on 1 KB, compiled path", start_s, "Python, numba, the kernels, the files"),
            ("export: the tokenizer's files", export_s, "every format and the manifest"),
        ],
    )
    print(
        f"floor on {cores} cores: max(read, (read + scanner) / {cores}) + merges applied / {cores} = {floor:.2f} s; "
        f"bpe train {ours['wall']:.2f} s wall (count {seconds['count']:.2f} s, merge {seconds['merge']:.2f} s, "
        f"loop {seconds.get('merge_loop', seconds['merge']):.2f} s): ours / floor {ours['wall'] / floor:.2f}x"
    )
    with_fixed = start_s + floor + export_s
    print(
        f"with the fixed costs: start + floor + export = {with_fixed:.2f} s; "
        f"ours / that {ours['wall'] / with_fixed:.2f}x"
        f" (the queue's choices, {max(loop_s - apply_s - index_s, 0.0):.2f} s on one thread, are outside both;"
        f" {os.cpu_count()} processors here)"
    )
    counted_floor = start_s + split_floor(read, count_s, cores) + apply_s / cores + export_s
    print(
        f"with our counting for the split (scanning, hashing, the table: this design counts in a hash table): "
        f"start + max(read, (read + count) / {cores}) + merges applied / {cores} + export = {counted_floor:.2f} s; "
        f"ours / that {ours['wall'] / counted_floor:.2f}x"
    )
    design = start_s + design_floor(read, count_s, sum_s, index_s, apply_s, driver_s, cores) + export_s
    print(
        f"this design's floor (unique words counted in a hash table on each thread and summed, an inverted index, "
        f"one driver holding the pair counts): start + max(read, (read + count) / {cores}) + sum + (index + merges "
        f"applied) / {cores} + driver + export = {design:.2f} s; ours / that {ours['wall'] / design:.2f}x"
    )
    for name, result in peers.items():
        goal = GOALS.get(name)
        print(
            f"{name}: {result['wall']:.2f} s wall; ours / {name} {ours['wall'] / result['wall']:.2f}x, "
            f"(start + floor + export) / {name} {with_fixed / result['wall']:.2f}x, "
            f"with our counting {counted_floor / result['wall']:.2f}x, "
            f"this design's floor {design / result['wall']:.2f}x"
            + (f", against the goal of {goal}x" if goal is not None else "")
        )


def superword_limits(args, cores: int, shards: list[Path]) -> None:
    """The parts of a superword run's second stage, its floor, and what the 2x goal leaves it."""
    import bpe
    from bpe.engine.replay import BaseMerges
    from bpe.engine.tracked_pairs import TrackedPairs
    from bpe.engine.word_table import WordTable
    from bpe.training.settings import Settings

    transition = round(SUPERWORD_TRANSITION * args.vocab_size)
    superwords = ("--pattern", args.pattern, "--superwords", "--transition", str(transition))
    with tempfile.TemporaryDirectory() as work:
        out = Path(work) / "tok"
        run(bpe_train(args.data, 300, out, "--pattern", args.pattern, "--superwords", "--transition", "280"))
        plain = run(bpe_train(args.data, args.vocab_size, Path(work) / "plain", "--pattern", args.pattern))
        ours = run(bpe_train(args.data, args.vocab_size, out, *superwords))
        manifest = json.loads((out / "manifest.json").read_text())
        merges = np.array(bpe.Tokenizer.load(out).merges, dtype=np.int64).reshape(-1, 2)
    first, second = manifest["superwords"]["stages"]
    stage1, stage2 = merges[: first["merges"]], merges[first["merges"] :]
    settings = Settings(vocab_size=args.vocab_size, pattern=args.pattern, superwords=True, transition=transition)
    pattern = settings.superword_pattern
    rules = settings.superword_stage(len(stage1)).merge_rules
    read_texts(shards[:1])
    read, columns = timed(lambda: read_texts(shards))
    mb = text_bytes(columns) / 1e6
    scanner_s, pieces = scanner_seconds(columns, pattern)
    del columns
    bpe.count(["warm up"], pattern=pattern, threads=1)
    count_s, counted = timed(lambda: bpe.count(files=str(args.data), pattern=pattern, threads=1))
    base = BaseMerges(stage1)
    WordTable(WordCounts.from_dict({b"warm up": 1}), base, indexed=False)  # the replay's kernels loaded first
    replay_s, table = timed(lambda: WordTable(counted.counts, base, indexed=False))
    tokens = table.n_tokens
    index_s, _ = timed(lambda: TrackedPairs([table], rules, base, len(stage2)))
    table = None  # its memory back before the next table
    full = WordTable(counted.counts, base)  # every pair indexed: each merge finds all its words
    full.take_deltas()
    rows = np.column_stack([stage2, base.first_new_id + np.arange(len(stage2))]).astype(np.int64)
    apply_s, _ = timed(lambda: (full.apply(rows), full.take_deltas()))
    full = None
    floor = split_floor(read, scanner_s, cores) + (replay_s + index_s + apply_s) / cores
    stage_s = sum(v for k, v in second["seconds"].items() if k in ("count", "merge"))
    budget = 2 * plain["wall"] - (ours["wall"] - stage_s)
    print(
        f"## Where the limit is, superwords: {args.data} ({mb:,.1f} MB of text), {args.vocab_size:,} tokens, "
        f"{args.pattern}, superwords from {transition:,} ({pattern})"
    )
    print()
    parts_table(
        mb,
        [
            ("read and decode (pyarrow)", read, "the text column of every shard"),
            (f"split: our scanner, `{pattern}`", scanner_s, f"{pieces:,} pieces, nothing counted"),
            ("count: ours (`threads=1`)", count_s, f"{len(counted.counts):,} unique pieces"),
            ("replay stage 1's merges", replay_s, f"{len(stage1):,} merges, {tokens:,} tokens after"),
            ("index the tracked pairs", index_s, "the pairs the stage's queue starts with"),
            ("apply the stage's merges (word tables)", apply_s, f"{len(stage2):,} merges"),
        ],
    )
    print(
        f"stage 2's floor on {cores} cores: max(read, (read + scanner) / {cores}) + "
        f"(replay + index + merges applied) / {cores} = {floor:.2f} s; the stage took {stage_s:.2f} s "
        f"(count {second['seconds']['count']:.2f} s, merge {second['seconds']['merge']:.2f} s): "
        f"stage / floor {stage_s / floor:.2f}x"
    )
    print(
        f"plain BPE {plain['wall']:.2f} s, superwords {ours['wall']:.2f} s wall ({ours['wall'] / plain['wall']:.2f}x); "
        f"the goal of 2x plain BPE leaves stage 2 {budget:.2f} s after the rest of the run "
        f"({ours['wall'] - stage_s:.2f} s): floor / that {floor / budget:.2f}x"
    )
    counted_floor = split_floor(read, count_s, cores) + (replay_s + index_s + apply_s) / cores
    print(
        f"with our counting for the split: max(read, (read + count) / {cores}) + (replay + index + merges applied) / "
        f"{cores} = {counted_floor:.2f} s; that / what the goal leaves stage 2 {counted_floor / budget:.2f}x"
    )


def split_floor(read: float, scanner: float, cores: int) -> float:
    """The least time to read and split the text on `cores` cores: one thread reads, and the
    reading and the splitting share the cores (the reader is a thread of the run, not a core of
    its own: on 2 cores it takes the time of one counting thread).

    >>> split_floor(1.0, 3.0, 2), split_floor(1.0, 3.0, 8)  # max(read, scanner / C) would say 1.5, 1.0
    (2.0, 1.0)
    """
    return max(read, (read + scanner) / cores)


def parts_table(mb: float, rows: list[tuple[str, float, str]]) -> None:
    print("| part, one thread | seconds | MB/s | what |")
    print("| --- | ---: | ---: | --- |")
    for name, value, what in rows:
        print(f"| {name} | {value:.2f} | {mb / value:,.0f} | {what} |")
    print()


def start_seconds(args, cores: int) -> float:
    """The least of 3 `bpe train` runs on 1 KB of the corpus, on the compiled path (`--threads`
    keeps it off the small-input one)."""
    with tempfile.TemporaryDirectory() as work:
        tiny = Path(work) / "tiny.txt"
        tiny.write_text(first_lines(args.data), encoding="utf-8")
        threads = ("--pattern", args.pattern, "--threads", str(cores))
        return min(run(bpe_train(tiny, 300, Path(work) / f"tok{i}", *threads))["wall"] for i in range(3))


def export_seconds(saved: Path) -> float:
    """The least of 3 saves of the tokenizer at `saved`, in this process."""
    import bpe

    with tempfile.TemporaryDirectory() as work:
        tokenizer = bpe.Tokenizer.load(saved)
        return min(timed(lambda i=i: tokenizer.save(Path(work) / f"tok{i}"))[0] for i in range(3))


if __name__ == "__main__":
    main()

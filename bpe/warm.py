"""Compile every kernel both engines use, ahead of time, into the kernel cache (`bpe warm`).

A new install, image or worker otherwise compiles them on its first run (about half a minute on 2
cores); after this, every process on the machine that shares the cache loads them in about a
second. Run it where the image is built (the Dockerfile does) or when a worker starts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from bpe.engine.compilation import CompileWatch

SAMPLE = ["Warm up: the kernels, 1 2 3 and 45678!\n", "  naïve café — 東京 2024\t", "x" * 40]


@dataclass
class Warmed:
    """What `warm_kernels` did: kernels compiled now (0 when all came from the cache) and seconds."""

    kernels_compiled: int
    compile_seconds: float
    seconds: float


def warm_kernels(on_compile: Callable[[], None] | None = None, merge_loop: bool = True) -> Warmed:
    """Run each kernel once on a tiny input: counting with every named pattern, the hashing, the
    word table (what a Dask worker runs), and with `merge_loop` the local merge loop (on one thread
    and on two: the slices split by hash), the pair queue with both tie-breaks, a base tokenizer's
    merges replayed (training from a tokenizer, and a superword stage) and parity-aware merges.
    `on_compile()` is called once, if a kernel must be compiled (rather than loaded)."""
    from bpe.counting import WordCounter
    from bpe.engine.count import WordCounts
    from bpe.engine.hashing import hash_buckets
    from bpe.engine.merge import learn_merges
    from bpe.engine.pair_queue import PairQueue
    from bpe.engine.parity import ParityRule, learn_parity_merges
    from bpe.engine.replay import BaseMerges
    from bpe.engine.table_group import TableGroup
    from bpe.engine.word_table import WordTable
    from bpe.pretokenize import NAMED_PATTERNS, Pretokenizer

    started = time.perf_counter()
    with CompileWatch(on_start=on_compile) as watch:
        counts = None
        for name in NAMED_PATTERNS:
            counter = WordCounter(Pretokenizer(name, ["<|endoftext|>"]), holdout=0.5)
            counter.add_texts(SAMPLE)
            counts = counter.result()
        counts = WordCounts.combine([counts, counts])
        hash_buckets(counts.data, counts.offsets, 2)
        table = WordTable(counts)
        table.take_deltas()
        table.apply(np.array([[ord("a"), ord("r"), 256]], dtype=np.int64))
        table.take_deltas()
        table.to_words()
        group = TableGroup([table, WordTable(counts)])  # a Dask holder of several buckets (languages)
        group.take_deltas()
        group.apply_and_take(np.array([[ord("a"), ord("r"), 256]], dtype=np.int64))
        group.sync()
        for tie_break in ("bytes", "ids") if merge_loop else ():
            learn_merges(counts, 8, tie_break=tie_break)
            learn_merges(counts, 10_000, tie_break=tie_break)  # until no pair is left: asks the best count
            learn_merges(counts, 8, tie_break=tie_break, threads=2)  # spinning slices where there are 2 cores
            base = BaseMerges(learn_merges(counts, 4, tie_break=tie_break).merges)
            learn_merges(counts, 4, tie_break=tie_break, base=base)
            table = WordTable(counts)
            queue = PairQueue(tie_break)
            queue.add(*table.take_deltas())
            for _ in range(2):
                batch = queue.next_round(4)
                table.apply(np.ascontiguousarray(batch[:, :3], dtype=np.int64))
                queue.add(*table.take_deltas())
            queue.best_count()
        if merge_loop:  # parity-aware merges over two languages: a dev set, then ratios, window, global merges
            two = [counts, WordCounts.from_dict({b"bar": 2, b"rab": 1})]
            for tie_break in ("bytes", "ids"):
                learn_parity_merges(two, 6, ParityRule(), dev=two, tie_break=tie_break)
                rule = ParityRule(variant="window", global_merges=1, window=4, ratio=(1.0, 2.0))
                learn_parity_merges(two, 6, rule, tie_break=tie_break, max_token_length=4)
    return Warmed(watch.kernels, watch.seconds, time.perf_counter() - started)

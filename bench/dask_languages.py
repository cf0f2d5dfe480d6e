"""Benchmark: multilingual runs on the Dask engine against the local engine, on the shared UD
corpora with the NTREX dev set: parity-aware merges (one merge per round) and a mixture (plain
rounds), the same merges checked, with the merge loop's time per merge and the driver's wait for
the word buckets' replies (the round trip).

    python -m bench.dask_languages [--languages eng,hin,rus] [--vocab-size 8192] [--workers 2]

The corpora are read from `../shared/corpora` (or `$BPE_SHARED/corpora`, as the tests read them).

Both engines run in this process, on one local cluster started once (its start is not timed);
kernels are compiled by a first, small run of each engine before anything is timed.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import pyarrow.parquet as pq

from bench.measure import REPO
from bpe.engine.merge import learn_merges
from bpe.engine.parity import ParityRule, learn_parity_merges
from bpe.engine.rules import MergeRules
from bpe.languages.mixture import Mix, weighted_sum
from bpe.training.counting import count_words
from bpe.training.plan import LanguagePlan
from bpe.training.settings import Settings

# Hugging Face's ParityBpeTrainer's defaults, as bpe.schema's
BASE_RULE = ParityRule(variant="base", global_merges=0, window=100, alpha=2.0, ratio=None)
RULES = MergeRules(tie_break="bytes", min_frequency=1, max_token_length=None, superwords=None)

SHARED = Path(os.environ.get("BPE_SHARED", REPO.parent / "shared")) / "corpora"  # as the tests find it


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--languages", help="codes, comma-separated (default: every language of the UD corpora)")
    parser.add_argument("--vocab-size", type=int, default=8192)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--pattern", default="cl100k")
    args = parser.parse_args()
    import distributed

    from bpe.distributed.driver import train_on_dask

    given = args.languages.split(",") if args.languages else [path.stem for path in (SHARED / "ud").glob("*.parquet")]
    codes = tuple(sorted(given))
    texts = [pq.read_table(SHARED / "ud" / f"{code}.parquet").column("text").to_pylist() for code in codes]
    dev_texts = [(SHARED / "ntrex" / f"{code}.txt").read_text().splitlines() for code in codes]
    counts = [count_words(t, args.pattern) for t in texts]
    dev = [count_words(t, args.pattern) for t in dev_texts]
    settings = Settings(vocab_size=args.vocab_size, pattern=args.pattern)
    n = settings.n_merges()
    cluster = distributed.LocalCluster(
        n_workers=args.workers, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    )
    client = distributed.Client(cluster)
    try:
        small = Settings(vocab_size=300, pattern=args.pattern)
        train_on_dask(
            small, None, [t[:50] for t in texts], client=client, languages=LanguagePlan(codes, parity=BASE_RULE)
        )
        learn_parity_merges([c for c in counts], 10, BASE_RULE, RULES, dev=dev)
        print(f"{len(codes)} languages ({', '.join(codes)}), {n:,} merges, {args.workers} Dask workers")
        for name, rule, mix in (
            ("parity, base, NTREX dev", BASE_RULE, None),
            ("mixture temperature=0.3", None, "temperature=0.3"),
        ):
            plan = LanguagePlan(codes, mix=Mix.parse(mix) if mix else None, parity=rule, dev=dev if rule else None)
            run = train_on_dask(settings, None, texts, client=client, languages=plan)
            multipliers = [s.multiplier for s in plan.stats]
            started = time.perf_counter()
            if rule is not None:
                local = learn_parity_merges(counts, n, rule, RULES, dev=dev)
            else:
                local = learn_merges(weighted_sum(counts, multipliers), n, RULES, threads=1)
            local_seconds = time.perf_counter() - started
            same = run.merges.merges.tolist() == local.merges.tolist()
            loop, wait = run.seconds["merge_loop"], run.engine["seconds_waiting_for_buckets"]
            merges, rounds = len(run.merges.merges), run.merges.rounds
            print(
                f"{name}: {merges:,} merges in {rounds:,} rounds over {run.engine['word_buckets']} word buckets, "
                f"same merges as the local engine: {same}; Dask loop {loop:.2f} s ({1e3 * loop / rounds:.2f} ms per "
                f"round, of which waiting for the buckets {1e3 * wait / rounds:.2f} ms), "
                f"build {run.seconds['build']:.2f} s; "
                f"local engine (1 thread) {local_seconds:.2f} s ({1e3 * local_seconds / merges:.3f} ms per merge)"
            )
    finally:
        client.close()
        cluster.close()


if __name__ == "__main__":
    main()

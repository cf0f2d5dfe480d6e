"""The Dask engine: partitioned counting and the diff-based merge loop on a Dask cluster.

1. Counting: every Parquet row group (or whole .txt/.jsonl file) is a task counted on a worker
   with the core's counter; each task splits its words into word buckets by a stable hash, and
   each bucket is summed on the workers by a tree reduction.
2. Word buckets: a `BucketHolder` actor per bucket, placed by Dask, holds the bucket's words with
   the local engine's structures and persists them to a scratch directory.
3. Merge loop: this process (the driver) holds the global pair counts and the heap (`PairQueue`).
   Each round it sends the round's merges to every holder over its socket, and each holder
   answers with the pair-count deltas of its bucket as two int64 arrays.
4. Worker loss: a holder whose connection drops (or whose reply does not come within the call
   timeout) is rebuilt on a live worker from its checkpoint, replays the merge log, and gets the
   round (or the checkpoint or statistics request) again; its replayed deltas are discarded, so
   nothing is counted twice. A rebuild never goes to a worker that lost or hung a holder, and the
   bucket files live in a directory of this run's own, so a reused scratch directory holds nothing
   a run could mistake for its own.

5. Multilingual runs (`languages`): each language is counted apart into word buckets of its own.
   Plain and mixture runs merge over bucket b of every language, each multiplied by its mixture
   multiplier, summed on the workers (`language_buckets`); parity-aware runs keep the languages
   apart, a holder holding hash bucket b of every language, and the driver's loop takes one merge
   per round from a pair queue per language (`parity_loop`).

The merges are exactly those of the local engine: the counts are the same, and the pair queue and
word tables are the same code.
"""

from __future__ import annotations

import json
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from bpe import storage
from bpe.distributed import channel
from bpe.distributed.client import Log, check_scheduler, dask_client, prepare_kernels, ready_workers
from bpe.distributed.count_tasks import count_languages_on_dask, count_on_dask, counts_on_dask
from bpe.distributed.language_buckets import language_buckets
from bpe.distributed.memory import (
    MemoryRestart,
    PausedWorkers,
    as_they_end,
    failed_for_memory,
    restart_of,
    way_out,
)
from bpe.distributed.parity_loop import ParityBuckets, merge_parity_on_dask
from bpe.engine.compilation import CompileWatch
from bpe.engine.count import check_pair_counts
from bpe.engine.merge import MergeResult, finish, first_id, stop_reason
from bpe.engine.pair_queue import PairQueue
from bpe.engine.replay import BaseMerges
from bpe.engine.resident import release_memory
from bpe.engine.rules import MergeRules
from bpe.engine.table_group import split
from bpe.errors import SchedulerLost, WorkersLost, WorkersOutOfMemory
from bpe.inputs.shard import Shard
from bpe.leftovers import sweep, temporary_prefix
from bpe.progress import PhaseClock, ProgressFn
from bpe.training.counting import CountStats
from bpe.training.counts_files import CountsSource
from bpe.training.plan import LanguagePlan
from bpe.training.results import TrainingRun
from bpe.training.settings import Settings
from bpe.training.warm import groups_of_run

REBUILD_ATTEMPTS = 3  # workers tried for one rebuild before giving up
PLACEMENT_WAIT = 10.0  # seconds the holders' start waits for workers paused for memory to resume
LOSSES_PER_CALL = 5  # rebuilds of one bucket's holder within one request before giving up
ACTOR_START_SECONDS = 120  # how long a holder may take to start on a busy worker
PLACEMENT_POLL_SECONDS = 1.0  # how often a starting holder's workers are looked for


class StrandedPlacement(RuntimeError):
    """A holder's task waits for workers that have all left the cluster (see `started_actor`)."""


def started_actor(client, future, workers: Sequence[str], timeout: float, watch: PausedWorkers | None = None):
    """The actor of `future` (submitted with `workers` as loose restrictions) once it has started.

    Should every one of `workers` leave the cluster before the task is placed (a worker killed
    just after it was chosen, both of two workers lost at once), Dask parks the task as
    "no-worker" and keeps it there even after new workers join, loose restrictions or not
    (dask/distributed#7346): it would wait out `timeout`. So while waiting, the workers are
    looked for every second, and when none of them is left this raises StrandedPlacement at
    once, for the caller to submit again to the workers running now. `watch` looks at the workers
    each second too: a holder never starts on a paused worker, so with every worker paused for
    memory the run stops within `GIVE_UP_SECONDS` rather than wait out `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return future.result(timeout=min(PLACEMENT_POLL_SECONDS, max(0.0, deadline - time.monotonic())))
        except TimeoutError:
            if time.monotonic() >= deadline:
                raise
        if watch is not None:
            watch.look()
        running = client.scheduler_info()["workers"]
        if workers and not any(address in running for address in workers) and placed_on(client, future) is None:
            future.cancel()
            raise StrandedPlacement(f"the workers chosen for a holder left: {', '.join(workers)}")


class Holders:
    """The driver's view of the bucket holders: their actors, sockets, and how to rebuild one. A
    holder holds one word bucket, or a group of them (a multilingual parity run's hash bucket of
    each language, so that a round costs one round trip per worker, not one per language)."""

    def __init__(self, client, scratch: str, call_timeout: float, log: Log | None) -> None:
        self.client = client
        self.secret = secrets.token_hex(16)
        # This run's bucket files, in a directory of its own: a scratch directory that another run
        # used (or uses) never hands this one its words or checkpoints. Removed by close().
        self.scratch = storage.join(scratch, f"run-{self.secret[:12]}")
        self.call_timeout = call_timeout
        self.log = log
        self.futures: list = []
        self.groups: list[list[int]] = []  # the buckets each holder holds
        self.chosen: list[list[str]] = []  # the workers each holder's task was submitted to
        self.sockets: list = []
        self.info: list[dict] = []
        self.merge_log: Callable[[], np.ndarray] = lambda: np.zeros((0, 3), np.int64)  # set by the merge loop
        self.dead: set[str] = set()  # workers that lost or hung a holder: never chosen to rebuild one
        self.recoveries = 0
        self.wait_seconds = 0.0  # time the driver spent sending rounds and waiting for deltas
        self.pair_deltas = 0  # pair-count deltas the holders sent back over the rounds
        self.base: BaseMerges | None = None  # a base tokenizer's merges, replayed by every holder first
        self.checkpoint_seconds = 0.0  # between checkpoints in the loop (0: none); set by `start_rounds`
        self._last_look = self._last_checkpoint = 0.0
        self.since = time.time()  # workers restarted for memory from here on are this run's
        self.watch = PausedWorkers(client, log)  # workers paused while a holder starts
        self.memory_losses: dict[int, int] = {}  # holders lost to a worker restarted for memory, by holder

    def start(self, bucket_futures: list, groups: list[list[int]] | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """Start a holder per group of buckets (`groups`, bucket indices; one per bucket without),
        each on its own worker where possible; returns each bucket's initial counts."""
        self.groups = groups if groups is not None else [[b] for b in range(len(bucket_futures))]
        # The sums first: a worker paused in their peak when its holder was ready went without one.
        from distributed import Future

        futures = [f for f in bucket_futures if isinstance(f, Future)]
        for _ in as_they_end(self.client, futures, self.log):
            pass
        where = self.client.who_has(futures) if futures else {}
        located = [(where.get(f.key) or [None])[0] if isinstance(f, Future) else None for f in bucket_futures]
        workers = spread([located[group[0]] for group in self.groups], self._placement())
        for h, group in enumerate(self.groups):
            chosen = [workers[h]]
            counts = [bucket_futures[b] for b in group] if len(group) > 1 else bucket_futures[group[0]]
            future = self.client.submit(
                _new_holder,
                counts,
                self.scratch,
                self._buckets(h),
                self.secret,
                None,
                self.base,
                actor=True,
                workers=chosen,
                allow_other_workers=True,
            )
            self.futures.append(future)
            self.chosen.append(chosen)
        return self._by_bucket([self._connect(h) for h in range(len(self.groups))])

    def _buckets(self, h: int) -> int | list[int]:
        """What holder h is given as its bucket: the index, or the list of its group's."""
        return self.groups[h][0] if len(self.groups[h]) == 1 else list(self.groups[h])

    def _by_bucket(self, replies: list[list[np.ndarray]]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each bucket's (keys, deltas), in bucket order, from the holders' replies (a holder of a
        group of buckets joins theirs: `table_group.split`)."""
        found: list = [None] * sum(len(group) for group in self.groups)
        for group, arrays in zip(self.groups, replies, strict=True):
            parts = split(*arrays) if len(group) > 1 else [(arrays[0], arrays[1])]
            for b, part in zip(group, parts, strict=True):
                found[b] = part
        return found

    def _connect(self, h: int) -> list[np.ndarray]:
        wait = max(self.call_timeout, ACTOR_START_SECONDS)
        actor = started_actor(self.client, self.futures[h], self.chosen[h], wait, self.watch)
        info = actor.address().result(timeout=self.call_timeout)
        sock = channel.connect(info["host"], info["port"], self.call_timeout)
        channel.send(sock, b"HELO", np.frombuffer(self.secret.encode(), np.uint8))
        kind, arrays = channel.receive(sock)
        if h < len(self.sockets):
            self.sockets[h], self.info[h] = sock, info
        else:
            self.sockets.append(sock)
            self.info.append(info)
        return arrays

    def start_rounds(self, checkpoint_seconds: float) -> None:
        """The merge loop starts: from now on `after_round` checkpoints every `checkpoint_seconds`."""
        self.checkpoint_seconds = checkpoint_seconds
        self._last_look = self._last_checkpoint = time.monotonic()

    def round(self, merges: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Send a round to every holder and collect each bucket's deltas (in bucket order),
        rebuilding holders that are lost; the time it takes counts as waiting for the buckets."""
        sent = time.perf_counter()
        flat = np.ascontiguousarray(merges[:, :3], dtype=np.int64).ravel()
        replies = self._by_bucket(self._ask_all(b"MRGE", "a round", flat))
        self.wait_seconds += time.perf_counter() - sent
        self.pair_deltas += sum(len(keys) for keys, _ in replies)
        return replies

    def after_round(self) -> None:
        """The loop's upkeep between rounds: a look at the scheduler at most once a second, and a
        checkpoint of every holder when `checkpoint_seconds` have passed since the last."""
        now = time.monotonic()
        if now - self._last_look > 1.0:
            check_scheduler(self.client)
            self._last_look = now
        if self.checkpoint_seconds and now - self._last_checkpoint > self.checkpoint_seconds:
            self.checkpoint()
            self._last_checkpoint = time.monotonic()

    def end_rounds(self) -> None:
        """The loop ended: a run the scheduler did not live through is not trusted."""
        check_scheduler(self.client, ping=True)

    def checkpoint(self) -> None:
        """Have every holder write a checkpoint; a holder found lost is rebuilt and asked again."""
        self._ask_all(b"CHKP", "a checkpoint")

    def stats(self) -> list[dict]:
        """Every holder's sizes and peak memory; a holder found lost is rebuilt and asked again."""
        return [json.loads(arrays[0].tobytes()) for arrays in self._ask_all(b"STAT", "the statistics")]

    def _ask_all(self, kind: bytes, during: str, *arrays: np.ndarray) -> list[list[np.ndarray]]:
        """Send one request to every holder and collect the replies. A holder whose socket drops, or
        that does not reply within the call timeout, is rebuilt and asked again: whichever request
        first meets a lost worker (a round, a checkpoint, the final statistics) recovers it."""
        replies: list = [None] * len(self.sockets)
        losses = [0] * len(self.sockets)
        pending = list(range(len(self.sockets)))
        while pending:
            lost = []
            for h in pending:
                try:
                    channel.send(self.sockets[h], kind, *arrays)
                except OSError:  # ChannelClosed included
                    lost.append(h)
            for h in pending:
                if h in lost:
                    continue
                try:
                    replies[h] = channel.receive(self.sockets[h])[1]
                except (TimeoutError, OSError):  # ChannelClosed and ProtocolError included
                    lost.append(h)
            for h in lost:
                losses[h] += 1
                if losses[h] > LOSSES_PER_CALL:
                    raise WorkersLost(f"{self.named(h)} was lost {losses[h]} times during {during}; giving up")
                self.rebuild(h, during)
            pending = lost
        return replies

    def named(self, h: int) -> str:
        """Holder h as a log line names it: by its word bucket, or buckets."""
        group = self.groups[h] if h < len(self.groups) else [h]
        return f"word bucket {group[0]}" if len(group) == 1 else f"word buckets {', '.join(map(str, group))}"

    def rebuild(self, h: int, during: str = "a round") -> None:
        """Start holder h again from its buckets' checkpoints and the merge log, on a live worker other
        than the one that lost it (a hung worker still looks alive to the scheduler)."""
        started = time.perf_counter()
        merge_log = self.merge_log()
        try:
            self.sockets[h].close()
        except OSError:
            pass
        lost_on = self.info[h].get("worker")
        restart = None
        if lost_on:
            self.dead.add(lost_on)
            restart = self._restart_for_memory(h, lost_on)
        for attempt in range(1, REBUILD_ATTEMPTS + 1):
            check_scheduler(self.client)
            # Loose restrictions: should the chosen workers die too, Dask may use one started since
            # (or, where none was running at the time, `started_actor` notices and this submits again).
            self.chosen[h] = self._live_workers()
            self.futures[h] = self.client.submit(
                _new_holder,
                None,
                self.scratch,
                self._buckets(h),
                self.secret,
                merge_log,
                self.base,
                actor=True,
                workers=self.chosen[h],
                allow_other_workers=True,
                pure=False,
            )
            try:
                self._connect(h)
                break
            except Exception:  # the new worker died or hung too: try another one
                if attempt == REBUILD_ATTEMPTS:
                    raise
                worker = placed_on(self.client, self.futures[h])
                if worker:
                    self.dead.add(worker)
        self.recoveries += 1
        if self.log:
            info = self.info[h]
            why = f" ({restart.described()})" if restart is not None else ""
            self.log(
                f"{self.named(h)}: worker {lost_on} lost{why}; rebuilt on {info.get('worker')} from "
                f"{info.get('restored_from', 'its checkpoint')}, replayed up to merge {len(merge_log):,}, "
                f"in {time.perf_counter() - started:.1f} s (noticed during {during})"
            )

    def _restart_for_memory(self, h: int, lost_on: str) -> MemoryRestart | None:
        """Whether holder h's worker was restarted for memory (for the log to say), stopping the
        run in one line when it is the second time: its bucket does not fit a worker, and rebuilding
        it again would only run out again. The first time it is rebuilt (from its checkpoint, without
        the counting's leftovers, it may fit); a holder lost for another reason is always rebuilt."""
        restart = restart_of(self.client, self.since, lost_on)
        if restart is None:
            return None
        self.memory_losses[h] = self.memory_losses.get(h, 0) + 1
        if self.memory_losses[h] < 2:
            return restart
        raise WorkersOutOfMemory(
            f"Dask workers ran out of memory holding the word buckets: {self.named(h)} ran two workers out, "
            f"last {restart.described()}; {way_out(restart.limit)}"
        )

    def _placement(self, wait: float = PLACEMENT_WAIT) -> list[str]:
        """The workers to start holders on, one each: every live one, once those Dask paused for
        memory (the sums at the end of counting) have resumed, waiting up to `wait` seconds; then
        the running ones (`_live_workers`). Placed while one was paused, two holders shared a
        worker (twice its memory) and one worker held none."""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            statuses = [w.get("status", "running") for a, w in self.client.scheduler_info()["workers"].items()
                        if a not in self.dead]  # fmt: skip
            if "paused" not in statuses:
                break
            self.watch.look()  # says the pause, once
            time.sleep(0.2)
        return self._live_workers()  # the scheduler may list none for a moment (a worker restarting)

    def _live_workers(self, wait: float = 60.0) -> list[str]:
        """The running workers that never lost or hung a holder, waiting for one if need be (a nanny
        restarts a killed worker under a new address). Failing that, any running worker."""
        deadline = time.monotonic() + wait
        while True:
            running = [
                a for a, w in self.client.scheduler_info()["workers"].items() if w.get("status", "running") == "running"
            ]
            live = [a for a in running if a not in self.dead]
            if live:
                return sorted(live)
            self.watch.look()  # every worker paused for memory: said, then the run stops (WorkersOutOfMemory)
            if time.monotonic() > deadline:
                if running:
                    return sorted(running)
                raise WorkersLost("no live Dask worker to rebuild a lost word bucket on; training stopped")
            time.sleep(0.2)

    def close(self) -> None:
        """Stop the holders and remove this run's bucket files."""
        for sock in self.sockets:
            try:
                channel.send(sock, b"STOP")
                sock.close()
            except OSError:
                pass
        self.futures.clear()
        storage.remove_tree(self.scratch)


def placed_on(client, future) -> str | None:
    """The worker that holds or runs `future`'s task, if the scheduler knows one."""
    try:
        held = client.who_has([future]).get(future.key) or []
        if held:
            return held[0]
        for worker, keys in client.processing().items():
            if future.key in keys:
                return worker
    except Exception:  # the scheduler's view is a hint here, never a reason to fail
        pass
    return None


def _new_holder(*args):
    from bpe.distributed.bucket_holder import BucketHolder

    return BucketHolder(*args)


def merge_on_dask(
    holders: Holders,
    initial: list[tuple[np.ndarray, np.ndarray]],
    n_merges: int,
    rules: MergeRules,
    progress: ProgressFn | None,
    checkpoint_seconds: float,
) -> MergeResult:
    """The driver's loop: choose a round by `rules`, send it, add the deltas the holders send back."""
    started = time.perf_counter()
    check_pair_counts([d for _, d in initial])
    queue = PairQueue(rules)
    if holders.base is not None:
        queue.add_tokens(holders.base.merges)
    queue.add(np.concatenate([k for k, _ in initial]), np.concatenate([d for _, d in initial]))
    batches: list[np.ndarray] = []
    log_cache: list[np.ndarray] = []

    def merge_log() -> np.ndarray:
        if len(log_cache) != len(batches):
            log_cache[:] = [b[:, :3] for b in batches]
        return np.concatenate(log_cache) if log_cache else np.zeros((0, 3), np.int64)

    holders.merge_log = merge_log  # what a rebuilt holder replays (rounds sent and answered so far)
    done = rounds = 0
    holders.start_rounds(checkpoint_seconds)
    if progress is not None:
        progress("merge", 0, n_merges)  # the loop starts: its progress and its rate are timed from here
    while done < n_merges:
        batch = queue.next_round(n_merges - done)
        if not len(batch):
            break
        replies = holders.round(batch)
        queue.add(np.concatenate([k for k, _ in replies]), np.concatenate([d for _, d in replies]))
        batches.append(batch)
        done += len(batch)
        rounds += 1
        if progress is not None:
            progress("merge", done, n_merges)
        holders.after_round()
    holders.end_rounds()
    reason = stop_reason(queue, done, n_merges, rules.min_frequency)
    return finish(batches, rounds, reason, started, first_id(holders.base))


@dataclass
class DistributedMerge:
    """What the merge loop on the workers gives: the merges, the engine's record for the manifest,
    the unique words over all buckets, and the seconds spent building the buckets' tables."""

    merges: MergeResult
    engine: dict
    unique_words: int
    build_seconds: float
    compile_seconds: float = 0.0  # this process compiling the pair queue's kernels (left out of the merge time)
    loop_seconds: float = 0.0  # the loop alone (as its progress bar measures it): merges per second are over these


def merge_on_workers(
    client,
    buckets: list,
    settings: Settings,
    scratch: str,
    progress: ProgressFn | None = None,
    log: Log | None = None,
    call_timeout: float = 60.0,
    checkpoint_seconds: float = 30.0,
    base: BaseMerges | None = None,
    parity: ParityBuckets | None = None,
) -> DistributedMerge:
    """Start a holder per word bucket (`buckets`: futures of WordCounts, or Parquet paths), each
    replaying `base`'s merges on its words first, run the merge loop, and stop the holders.
    `parity`: the buckets' languages and the rule of a parity-aware run (its loop, one merge per
    round, in `bpe.distributed.parity_loop`), whose holders each hold a hash bucket of every language.
    A list of futures is emptied once the holders hold their words: the caller's reference would
    otherwise keep every bucket's counts in its worker's memory, beside the holder's table, for the
    whole loop."""
    started = time.perf_counter()
    holders = Holders(client, scratch, call_timeout, log)
    holders.base = base
    n_buckets = len(buckets)
    try:
        initial = holders.start(buckets, parity.groups if parity is not None else None)
        if not any(isinstance(bucket, str) for bucket in buckets):
            buckets.clear()
        release_memory()
        build_seconds = time.perf_counter() - started
        with CompileWatch() as compiles:  # a first run of this version compiles the pair queue here
            loop = PhaseClock(progress, compiling=lambda: compiles.seconds)
            if parity is not None:
                merged = merge_parity_on_dask(
                    holders,
                    initial,
                    parity,
                    settings.n_merges(),
                    settings.merge_rules,
                    loop,
                    checkpoint_seconds,
                )
            else:
                merged = merge_on_dask(
                    holders,
                    initial,
                    settings.n_merges(),
                    settings.merge_rules,
                    loop,
                    checkpoint_seconds,
                )
        merged.seconds -= compiles.seconds
        bucket_stats = holders.stats()
    finally:
        holders.close()
    merged.tokens_after = sum(s["tokens"] for s in bucket_stats)
    engine = {
        "engine": "dask",
        "workers": len(client.scheduler_info()["workers"]),
        "word_buckets": n_buckets,
        "rounds": merged.rounds,
        "merges_per_round": round(len(merged.merges) / merged.rounds, 2) if merged.rounds else None,
        "recoveries": holders.recoveries,
        "seconds_waiting_for_buckets": round(holders.wait_seconds, 3),
        "pair_deltas": holders.pair_deltas,
        "bucket_peak_mb": [round(s["peak_mb"]) for s in bucket_stats],
        "bucket_threads": [s.get("threads", 1) for s in bucket_stats],
    }
    return DistributedMerge(
        merged, engine, sum(s["words"] for s in bucket_stats), build_seconds, compiles.seconds, loop.seconds("merge")
    )


def train_on_dask(
    settings: Settings,
    shards: Sequence[Shard] | Sequence[Sequence[Shard]] | None,
    texts: Iterable[str] | Sequence[Iterable[str]] | None = None,
    progress: ProgressFn | None = None,
    threads: int | None = None,
    scheduler: str | None = None,
    workers: int | None = None,
    client=None,
    scratch: str | None = None,
    log: Log | None = None,
    call_timeout: float = 60.0,
    checkpoint_seconds: float = 30.0,
    base: BaseMerges | None = None,
    languages: LanguagePlan | None = None,
    say: Log | None = None,
    counts: CountsSource | None = None,
) -> TrainingRun:
    """Count and merge on a Dask cluster (`shards`, or in-memory `texts` counted here first, or
    word `counts` read on the workers, a task per file), after replaying `base`'s merges on the
    workers' words. Its `seconds`, one after another:
    `cluster` (connecting or starting it, the workers' kernels loaded), `count`, `build` (the word
    buckets), `merge` (`merge_loop` within it), `cluster_stop`; `compile` apart from them all.

    With `languages`, `shards` (or `texts`) holds a list per language in the order of its codes:
    each language is counted apart into word buckets of its own and `languages.stats` filled; the
    merges are then parity-aware (`languages.parity`: the languages' buckets kept apart), or plain
    over the languages' buckets summed by hash bucket, each multiplied by its mixture multiplier
    (`languages.mix`; 1 without)."""
    seconds: dict[str, float] = {}
    parity_run = languages is not None and languages.parity is not None
    groups = groups_of_run(settings, "dask", base=base is not None, parity_merges=parity_run)
    worker_groups, seconds["compile"] = prepare_kernels(groups, client is None and not scheduler, say)
    t0 = time.perf_counter()
    own_scratch = scratch is None
    if scratch is None:
        sweep(tempfile.gettempdir(), "bpe-scratch-")  # what runs killed before cleaning up left
        scratch = tempfile.mkdtemp(prefix=temporary_prefix("bpe-scratch-"))
    try:
        with dask_client(scheduler, workers, client, log) as (c, cluster):
            since = time.time()
            try:
                ready = ready_workers(c, worker_groups, log)
                n = ready.workers
                seconds["compile"] += ready.compile_seconds  # on the workers: their first run of this version
                seconds["cluster"] = time.perf_counter() - t0 - ready.compile_seconds
                t1 = time.perf_counter()
                parity = None
                if counts is not None:
                    buckets, stats, fingerprints = counts_on_dask(c, counts, n, progress, log)
                elif languages is None:
                    buckets, stats, fingerprints = count_on_dask(
                        c, shards, texts, settings.pretokenizer, settings.text_column, n, progress, log
                    )
                else:
                    counted = count_languages(c, shards, texts, settings, n, progress, languages, log)
                    buckets, stats, fingerprints, parity = counted
                seconds["count"] = time.perf_counter() - t1
                on_workers = merge_on_workers(
                    c, buckets, settings, scratch, progress, log, call_timeout, checkpoint_seconds, base, parity
                )
                del buckets
            except Exception as exc:
                error = failed_for_memory(c, since, phase_of(seconds), exc)
                if error is exc:
                    raise
                raise error from None
            seconds["build"], seconds["merge"] = on_workers.build_seconds, on_workers.merges.seconds
            seconds["merge_loop"] = on_workers.loop_seconds
            seconds["compile"] += on_workers.compile_seconds
            engine = {
                "scheduler": cluster["scheduler"],
                "cluster_started_here": cluster["started_here"],
                **on_workers.engine,
            }
            stopping = time.perf_counter()
        seconds["cluster_stop"] = time.perf_counter() - stopping  # a cluster started here is stopped here
    except OSError as exc:
        if "scheduler" in str(exc).lower() or (client is None and scheduler):
            raise SchedulerLost(f"lost the Dask scheduler: {exc}") from None
        raise
    finally:
        if own_scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    return TrainingRun(
        stats,
        on_workers.unique_words,
        on_workers.merges,
        fingerprints,
        seconds,
        engine,
        languages=languages.stats if languages is not None else None,
    )


def spread(located: list[str | None], workers: list[str]) -> list[str]:
    """A worker for each holder, one each while they last: the worker that holds its bucket's sum
    where that one is free (no copy of the bucket moves, and none stays behind on another worker
    while the tables are built), then the free workers in turn, then round again.

    >>> spread(["b", "b", None], ["a", "b", "c"])
    ['b', 'a', 'c']
    """
    chosen: list[str | None] = [None] * len(located)
    free = list(workers)
    for h, worker in enumerate(located):
        if worker in free:
            chosen[h] = worker
            free.remove(worker)
    for h in range(len(located)):
        if chosen[h] is None:
            chosen[h] = free.pop(0) if free else workers[h % len(workers)]
    return chosen


def phase_of(seconds: dict[str, float]) -> str:
    """The phase a Dask run was in, by the phases it has finished (`train_on_dask`'s `seconds`)."""
    if "cluster" not in seconds:
        return "while loading the kernels"
    if "count" not in seconds:
        return "while counting"
    return "while holding the word buckets"


def count_languages(
    client,
    shards: Sequence[Sequence[Shard]] | None,
    texts: Sequence[Iterable[str]] | None,
    settings: Settings,
    n_buckets: int,
    progress: ProgressFn | None,
    plan: LanguagePlan,
    log: Log | None = None,
) -> tuple[list, CountStats, list[dict] | None, ParityBuckets | None]:
    """Count each language of `plan` apart on the workers and make the merge loop's word buckets
    (`bpe.distributed.language_buckets`), filling `plan.stats`. Returns the buckets, what was
    counted in all, each file's fingerprint with its language (None for texts), and, for a parity
    run, the buckets' languages."""
    by_language, counted, found = count_languages_on_dask(
        client, shards, texts, settings.pretokenizer, settings.text_column, n_buckets, progress, log
    )
    stats = CountStats.summed(counted)
    fingerprints = None
    if found is not None:
        fingerprints = [{**fp, "language": code} for code, files in zip(plan.codes, found, strict=True) for fp in files]
    paths = [[shard.path for shard in found] for found in shards] if shards is not None else None
    made = language_buckets(client, by_language, counted, plan, paths)
    if plan.parity is None:
        return made.buckets, stats, fingerprints, None
    parity = ParityBuckets(plan.parity, made.languages, made.groups, made.occurrences, plan.dev)
    return made.buckets, stats, fingerprints, parity

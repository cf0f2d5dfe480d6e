"""The Dask engine: partitioned counting and the diff-based merge loop on a Dask cluster.

1. Counting: every Parquet row group (or whole .txt/.jsonl file) is a task counted on a worker
   with the core's counter; each task splits its words into one bucket per word shard by a
   stable hash, and the buckets are summed on the workers by a tree reduction.
2. Word shards: a `ShardHolder` actor per shard, placed by Dask, holds the shard's words with the
   local engine's structures and persists them to a scratch directory.
3. Merge loop: this process (the driver) holds the global pair counts and the heap (`PairQueue`).
   Each round it sends the round's merges to every holder over its socket, and each holder
   answers with the pair-count deltas of its shard as two int64 arrays.
4. Worker loss: a holder whose connection drops (or whose reply does not come within the call
   timeout) is rebuilt on a live worker from its checkpoint, replays the merge log, and gets the
   round again; its replayed deltas are discarded, so nothing is counted twice.

The merges are exactly those of the local engine: the counts are the same, and the pair queue and
word tables are the same code.
"""

from __future__ import annotations

import operator
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import asdict

import numpy as np
from numba import njit

from bpe import channel
from bpe.count import CountStats, WordCounter, WordCounts, release_memory, use_system_allocator
from bpe.errors import SchedulerLost
from bpe.merge import MergeResult, finish, stop_reason
from bpe.pair_queue import PairQueue
from bpe.pretokenize import Pretokenizer
from bpe.progress import ProgressFn
from bpe.shards import InputError, Shard, check_parquet

Log = Callable[[str], None]


# ---------------------------------------------------------------------------------------------
# Tasks that run on workers (plain functions of importable modules, so workers can run them).


def count_partition(shard: Shard, row_group: int | None, pretokenizer: Pretokenizer, text_column: str, n_buckets: int):
    """Count one partition; returns (stats, one WordCounts per bucket)."""
    use_system_allocator()
    counter = WordCounter(pretokenizer)
    for batch in _partition_batches(shard, row_group, text_column):
        counter.add_arrow(batch)
    counts = counter.result()
    return asdict(counter.stats), split_by_bucket(counts, n_buckets)


def _partition_batches(shard: Shard, row_group: int | None, text_column: str):
    from bpe.shards import read_batches

    if row_group is None:
        for batch, _ in read_batches(shard, text_column):
            yield batch
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    with shard.open() as f:
        try:
            column = pq.ParquetFile(f).read_row_group(row_group, columns=[text_column]).column(0)
        except (pa.ArrowInvalid, OSError) as exc:
            raise InputError(f"{shard.path}: row group {row_group} unreadable ({exc})") from None
        for chunk in column.chunks:
            try:
                chunk.validate(full=True)
            except pa.ArrowInvalid as exc:
                raise InputError(f"{shard.path}: row group {row_group}: {exc}") from None
            yield chunk.cast(pa.large_string())


def warm_up() -> float:
    """Load the compiled kernels in this worker (from numba's cache), so that the first real task
    does not pay for it; returns the seconds it took."""
    started = time.perf_counter()
    from bpe.word_table import WordTable

    use_system_allocator()
    for name in ("gpt2", "cl100k", "o200k"):
        counter = WordCounter(Pretokenizer(name))
        counter.add_texts(["warm up, 1 2 3"])
    counts = counter.result()
    split_by_bucket(WordCounts.combine([counts, counts]), 2)
    table = WordTable(counts)
    table.take_deltas()
    table.apply(np.array([[119, 97, 256]], dtype=np.int64))
    table.take_deltas()
    return time.perf_counter() - started


def combine_counts(*parts: WordCounts) -> WordCounts:
    return WordCounts.combine(parts)


def fingerprint_shard(shard: Shard) -> dict:
    return shard.fingerprint()


def split_by_bucket(counts: WordCounts, n_buckets: int) -> list[WordCounts]:
    """Words go to bucket stable_hash(word) % n (FNV-1a over the bytes, the same in every process)."""
    if n_buckets == 1:
        return [counts]
    buckets = _word_buckets(counts.data, counts.offsets, n_buckets)
    parts = []
    for b in range(n_buckets):
        keep = np.flatnonzero(buckets == b)
        lengths = np.diff(counts.offsets)[keep]
        offsets = np.zeros(len(keep) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        index = np.repeat(counts.offsets[keep], lengths) + (np.arange(offsets[-1]) - np.repeat(offsets[:-1], lengths))
        parts.append(WordCounts(counts.data[index], offsets, counts.counts[keep]))
    return parts


@njit(cache=True)
def _word_buckets(data, offsets, n_buckets):
    out = np.empty(len(offsets) - 1, dtype=np.int64)
    for w in range(len(offsets) - 1):
        h = np.uint64(14695981039346656037)
        for i in range(offsets[w], offsets[w + 1]):
            h = (h ^ np.uint64(data[i])) * np.uint64(1099511628211)
        out[w] = np.int64(h % np.uint64(n_buckets))
    return out


# ---------------------------------------------------------------------------------------------
# The cluster.


@contextmanager
def dask_client(scheduler: str | None = None, workers: int | None = None, client=None, log: Log | None = None):
    """A client to an existing cluster, or to a local cluster of worker processes started here."""
    from distributed import Client, LocalCluster

    if client is not None:
        yield client, {"scheduler": client.scheduler.address, "started_here": False}
        return
    if scheduler:
        _check_reachable(scheduler)
        try:
            c = Client(scheduler, timeout="30s")
        except OSError as exc:
            raise SchedulerLost(f"cannot reach the Dask scheduler at {scheduler} ({exc})") from None
        try:
            yield c, {"scheduler": scheduler, "started_here": False}
        finally:
            c.close(timeout=5)
        return
    import logging

    n = workers or os.cpu_count() or 1
    cluster = LocalCluster(
        n_workers=n, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0",
        host="127.0.0.1", silence_logs=logging.ERROR,
    )  # fmt: skip
    c = Client(cluster)
    if log:
        log(f"started a local Dask cluster: {n} worker processes; dashboard {cluster.dashboard_link}")
    try:
        yield c, {"scheduler": cluster.scheduler_address, "started_here": True, "dashboard": cluster.dashboard_link}
    finally:
        c.close(timeout=5)
        cluster.close()


def _check_reachable(address: str) -> None:
    """Fail at once, not after the client's 30 s of retries, when nothing listens at a tcp:// address."""
    import socket

    if not address.startswith("tcp://"):
        return
    host, _, port = address[len("tcp://") :].rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
    except (OSError, ValueError) as exc:
        raise SchedulerLost(f"cannot reach the Dask scheduler at {address} ({exc})") from None


def _check_scheduler(client, ping: bool = False) -> None:
    """Raise SchedulerLost if the client has lost its scheduler; `ping` also knocks on its port."""
    lost = client.status != "running"
    if ping and not lost:
        try:
            _check_reachable(client.scheduler.address)
        except SchedulerLost:
            lost = True
    if lost:
        raise SchedulerLost("lost the Dask scheduler; training stopped and nothing was written")


# ---------------------------------------------------------------------------------------------
# Counting.


def partitions(shards: Sequence[Shard], text_column: str) -> list[tuple[Shard, int | None, int]]:
    """(shard, row group or None for a whole file, weight in bytes), largest first."""
    import pyarrow.parquet as pq

    parts = []
    for shard in shards:
        if shard.kind == "parquet":
            check_parquet(shard, text_column)
            with shard.open() as f:
                meta = pq.ParquetFile(f).metadata
            for rg in range(meta.num_row_groups):
                parts.append((shard, rg, max(meta.row_group(rg).total_byte_size, 1)))
        else:
            parts.append((shard, None, max(shard.size, 1)))
    parts.sort(key=lambda p: -p[2])  # largest first balances the workers' load
    return parts


def count_on_dask(client, inputs: dict, pretokenizer: Pretokenizer, text_column: str, n_buckets: int, progress):
    """Count on the workers; returns (futures of the summed counts per bucket, stats, fingerprints)."""
    from distributed import as_completed

    stats = CountStats()
    if "texts" in inputs:  # in-memory texts: count here, then place the buckets on the workers
        counter = WordCounter(pretokenizer)
        counter.add_texts(list(inputs["texts"]))
        buckets = split_by_bucket(counter.result(), n_buckets)
        return client.scatter(buckets), counter.stats, None
    parts = partitions(inputs["shards"], text_column)
    total = sum(p[2] for p in parts)
    tasks = [
        client.submit(count_partition, shard, rg, pretokenizer, text_column, n_buckets, pure=False)
        for shard, rg, _ in parts
    ]
    fingerprints = [client.submit(fingerprint_shard, shard, pure=False) for shard in inputs["shards"]]
    weight = {t.key: p[2] for t, p in zip(tasks, parts)}
    done = 0
    for future in as_completed(tasks):
        if future.status == "error":
            for t in tasks + fingerprints:
                t.cancel()
            raise future.exception()
        done += weight[future.key]
        if progress is not None:
            progress("count", done, total)
    for part_stats in client.gather([client.submit(operator.itemgetter(0), t) for t in tasks]):
        stats.add(CountStats(**part_stats))
    per_bucket = [[client.submit(_bucket, t, b) for t in tasks] for b in range(n_buckets)]
    del tasks
    reduced = [tree_reduce(client, futures) for futures in per_bucket]
    return reduced, stats, client.gather(fingerprints)


def _bucket(result, b: int) -> WordCounts:
    return result[1][b]


def tree_reduce(client, futures: list, fan_in: int = 4):
    """Sum counts pairwise-ish on the workers (fan-in 4), never gathering partials here."""
    level = list(futures)
    while len(level) > 1:
        level = [
            client.submit(combine_counts, *level[i : i + fan_in], pure=False) for i in range(0, len(level), fan_in)
        ]
    return level[0]


# ---------------------------------------------------------------------------------------------
# The merge loop.


class Holders:
    """The driver's view of the shard holders: their actors, sockets, and how to rebuild one."""

    def __init__(self, client, scratch: str, call_timeout: float, log: Log | None) -> None:
        self.client = client
        self.scratch = scratch
        self.call_timeout = call_timeout
        self.log = log
        self.secret = secrets.token_hex(16)
        self.futures: list = []
        self.sockets: list = []
        self.info: list[dict] = []
        self.recoveries = 0
        self.wait_seconds = 0.0  # time the driver spent sending rounds and waiting for deltas

    def start(self, bucket_futures: list) -> list[tuple[np.ndarray, np.ndarray]]:
        """Start a holder per bucket, each on its own worker where possible; returns initial counts."""
        workers = sorted(self.client.scheduler_info()["workers"])
        for b, counts in enumerate(bucket_futures):
            future = self.client.submit(
                _new_holder, counts, self.scratch, b, self.secret, None,
                actor=True, workers=[workers[b % len(workers)]], allow_other_workers=True,
            )  # fmt: skip
            self.futures.append(future)
        initial = []
        for b in range(len(bucket_futures)):
            initial.append(self._connect(b))
        return initial

    def _connect(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        actor = self.futures[b].result(timeout=max(self.call_timeout, 120))
        info = actor.address().result(timeout=self.call_timeout)
        sock = channel.connect(info["host"], info["port"], self.call_timeout)
        channel.send(sock, b"HELO", np.frombuffer(self.secret.encode(), np.uint8))
        kind, arrays = channel.receive(sock)
        if b < len(self.sockets):
            self.sockets[b], self.info[b] = sock, info
        else:
            self.sockets.append(sock)
            self.info.append(info)
        return arrays[0], arrays[1]

    def round(self, merges: np.ndarray, merge_log: Callable[[], np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Send a round to every holder and collect their deltas, rebuilding holders that are lost."""
        flat = np.ascontiguousarray(merges[:, :3], dtype=np.int64).ravel()
        replies: list = [None] * len(self.sockets)
        pending = list(range(len(self.sockets)))
        while pending:
            lost = []
            for b in pending:
                try:
                    channel.send(self.sockets[b], b"MRGE", flat)
                except (channel.ChannelClosed, OSError):
                    lost.append(b)
            for b in pending:
                if b in lost:
                    continue
                try:
                    kind, arrays = channel.receive(self.sockets[b])
                    replies[b] = (arrays[0], arrays[1])
                except (channel.ChannelClosed, TimeoutError, OSError):
                    lost.append(b)
            for b in lost:
                self.rebuild(b, merge_log())
            pending = lost
        return replies

    def rebuild(self, b: int, merge_log: np.ndarray) -> None:
        """Start shard b again on a live worker from its checkpoint and the merge log."""
        started = time.perf_counter()
        _check_scheduler(self.client)
        try:
            self.sockets[b].close()
        except OSError:
            pass
        dead_pid = self.info[b].get("pid")
        workers = self._live_workers(exclude_pid=dead_pid)
        self.futures[b] = self.client.submit(
            _new_holder, None, self.scratch, b, self.secret, merge_log,
            actor=True, workers=workers, allow_other_workers=True, pure=False,
        )  # fmt: skip
        self._connect(b)
        self.recoveries += 1
        if self.log:
            self.log(
                f"shard {b}: worker (pid {dead_pid}) lost; rebuilt on pid {self.info[b]['pid']} "
                f"after {len(merge_log):,} merges in {time.perf_counter() - started:.1f} s"
            )

    def _live_workers(self, exclude_pid: int | None, wait: float = 60.0) -> list[str]:
        deadline = time.monotonic() + wait
        while True:
            info = self.client.scheduler_info()["workers"]
            live = [addr for addr, w in info.items() if w.get("pid") != exclude_pid]
            if live:
                return live
            if time.monotonic() > deadline:
                raise RuntimeError("no live Dask worker to rebuild a lost shard on")
            time.sleep(0.2)

    def checkpoint(self) -> None:
        for sock in self.sockets:
            channel.send(sock, b"CHKP")
        for sock in self.sockets:
            channel.receive(sock)

    def stats(self) -> list[dict]:
        import json

        out = []
        for sock in self.sockets:
            channel.send(sock, b"STAT")
        for sock in self.sockets:
            _, arrays = channel.receive(sock)
            out.append(json.loads(arrays[0].tobytes()))
        return out

    def close(self) -> None:
        for sock in self.sockets:
            try:
                channel.send(sock, b"STOP")
                sock.close()
            except OSError:
                pass
        self.futures.clear()


def _new_holder(*args):
    from bpe.shard_holder import ShardHolder

    return ShardHolder(*args)


def merge_on_dask(
    holders: Holders,
    initial: list[tuple[np.ndarray, np.ndarray]],
    n_merges: int,
    tie_break: str,
    min_frequency: int,
    progress: ProgressFn | None,
    checkpoint_seconds: float,
) -> MergeResult:
    """The driver's loop: choose a round, send it, add the deltas the holders send back."""
    started = time.perf_counter()
    queue = PairQueue(tie_break)
    queue.add(np.concatenate([k for k, _ in initial]), np.concatenate([d for _, d in initial]))
    batches: list[np.ndarray] = []
    log_cache: list[np.ndarray] = []

    def merge_log() -> np.ndarray:
        if len(log_cache) != len(batches):
            log_cache[:] = [b[:, :3] for b in batches]
        return np.concatenate(log_cache) if log_cache else np.zeros((0, 3), np.int64)

    done = rounds = 0
    last_check = last_checkpoint = time.monotonic()
    while done < n_merges:
        batch = queue.next_round(n_merges - done, min_frequency)
        if not len(batch):
            break
        sent = time.perf_counter()
        replies = holders.round(batch, merge_log)
        holders.wait_seconds += time.perf_counter() - sent
        queue.add(np.concatenate([k for k, _ in replies]), np.concatenate([d for _, d in replies]))
        batches.append(batch)
        done += len(batch)
        rounds += 1
        if progress is not None:
            progress("merge", done, n_merges)
        now = time.monotonic()
        if now - last_check > 1.0:
            _check_scheduler(holders.client)
            last_check = now
        if checkpoint_seconds and now - last_checkpoint > checkpoint_seconds:
            holders.checkpoint()
            last_checkpoint = time.monotonic()
    _check_scheduler(holders.client, ping=True)  # a run the scheduler did not live through is not trusted
    return finish(batches, rounds, stop_reason(queue, done, n_merges, min_frequency), started)


def train_on_dask(
    settings,
    pretokenizer: Pretokenizer,
    inputs: dict,
    progress: ProgressFn | None = None,
    threads: int | None = None,
    scheduler: str | None = None,
    workers: int | None = None,
    client=None,
    scratch: str | None = None,
    log: Log | None = None,
    call_timeout: float = 60.0,
    checkpoint_seconds: float = 30.0,
):
    """Count and merge on a Dask cluster; returns what `bpe.train.train` records."""
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    own_scratch = scratch is None
    scratch = scratch or tempfile.mkdtemp(prefix="bpe-scratch-")
    try:
        with dask_client(scheduler, workers, client, log) as (c, cluster):
            timings["cluster"] = time.perf_counter() - t0
            n = len(c.scheduler_info()["workers"])
            if n == 0:
                c.wait_for_workers(1, timeout=60)
                n = len(c.scheduler_info()["workers"])
            c.run(warm_up)
            timings["cluster"] = time.perf_counter() - t0
            t1 = time.perf_counter()
            buckets, stats, fingerprints = count_on_dask(c, inputs, pretokenizer, settings.text_column, n, progress)
            timings["count"] = time.perf_counter() - t1
            t2 = time.perf_counter()
            holders = Holders(c, scratch, call_timeout, log)
            try:
                initial = holders.start(buckets)
                del buckets
                release_memory()
                timings["build"] = time.perf_counter() - t2
                merged = merge_on_dask(
                    holders, initial, settings.n_merges(), settings.tie_break, settings.min_frequency,
                    progress, checkpoint_seconds,
                )  # fmt: skip
                shard_stats = holders.stats()
            finally:
                holders.close()
            timings["merge"] = merged.seconds
            merged.tokens_after = sum(s["tokens"] for s in shard_stats)
            unique_words = sum(s["words"] for s in shard_stats)
            record = {
                "engine": "dask",
                "scheduler": cluster["scheduler"],
                "cluster_started_here": cluster["started_here"],
                "workers": n,
                "word_shards": len(shard_stats),
                "rounds": merged.rounds,
                "merges_per_round": round(len(merged.merges) / merged.rounds, 2) if merged.rounds else None,
                "recoveries": holders.recoveries,
                "seconds_waiting_for_shards": round(holders.wait_seconds, 3),
                "shard_peak_mb": [round(s["peak_mb"]) for s in shard_stats],
            }
    except OSError as exc:
        if "scheduler" in str(exc).lower() or (client is None and scheduler):
            raise SchedulerLost(f"lost the Dask scheduler: {exc}") from None
        raise
    finally:
        if own_scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    return unique_words, stats, fingerprints, merged, timings, record

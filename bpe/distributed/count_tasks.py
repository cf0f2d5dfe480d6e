"""Counting on a Dask cluster, in tasks the workers run: one task per Parquet row group (or whole
.txt/.jsonl file), summed on the workers by a tree reduction, and split into word buckets by a
stable hash (`bpe.training.counting` counts the documents each task reads).

Nothing but small statistics comes back to the client: partial counts move between workers, and
the pipeline's per-shard counts are written by workers straight to Parquet files (on a shared
path or in object storage: see `bpe.storage`).
"""

from __future__ import annotations

import operator
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

from bpe import storage
from bpe.distributed.memory import scatter
from bpe.engine.count import WordCounts
from bpe.engine.resident import READER, release_code, release_memory
from bpe.errors import BpeError, InputError, NotUtf8Error
from bpe.inputs.readers import check_parquet
from bpe.inputs.shard import Shard
from bpe.pretokenize import Pretokenizer
from bpe.progress import estimate_text_bytes
from bpe.training.counting import (
    CountStats,
    WordCounter,
    checks_utf8,
    counts_from_arrow,
    shard_holdout,
    use_system_allocator,
    write_counts_parquet,
)

# ---------------------------------------------------------------------------------------------
# Tasks that run on workers (plain functions of an importable module, so workers can run them).


def count_partition(
    shard: Shard,
    row_group: int | None,
    pretokenizer: Pretokenizer,
    text_column: str,
    n_buckets: int,
    holdout: float = 0.0,
) -> dict:
    """Count one partition: {"stats", "buckets" (one WordCounts per word bucket), "held_out" rows}.
    Bad input comes back as {"error": BpeError} rather than failing the task, so that the worker logs
    no traceback for it (the client raises it); any other exception fails the task as usual."""
    use_system_allocator()
    counter = WordCounter(pretokenizer, holdout=shard_holdout(shard, holdout))
    try:
        for batch in _partition_batches(shard, row_group, text_column, check_utf8=not checks_utf8(pretokenizer)):
            counter.add_arrow(batch)
    except NotUtf8Error as found:  # read again, checked, for the file and rows the local engine names
        return {"error": _checked_read_error(shard, row_group, text_column) or found}
    except BpeError as exc:
        return {"error": exc}
    counted = {
        "stats": asdict(counter.stats),
        "buckets": split_by_bucket(counter.result(), n_buckets),
        "held_out": counter.held_out,
    }
    del counter
    release_memory()  # the counting table and the text read: the worker keeps only the counts
    return counted


def _checked_read_error(shard: Shard, row_group: int | None, text_column: str) -> InputError | None:
    """The error the partition's text gives when read with Arrow's check of its UTF-8, if any."""
    try:
        for _ in _partition_batches(shard, row_group, text_column):
            pass
    except InputError as exc:
        return exc
    return None


def _partition_batches(shard: Shard, row_group: int | None, text_column: str, check_utf8: bool = True):
    """The partition's documents in batches; `check_utf8=False`: Parquet's strings unchecked (see
    `bpe.inputs.read.read_batches`)."""
    from bpe.inputs.read import read_batches
    from bpe.inputs.selection import select_rows

    if row_group is None:
        for batch, _ in read_batches(shard, text_column, check_utf8=check_utf8):
            yield batch
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    with shard.open() as f:
        row = 0  # the row group's first row in the file, so that errors name rows as the local engine does
        try:
            parquet = pq.ParquetFile(f)
            row = sum(parquet.metadata.row_group(i).num_rows for i in range(row_group))
            column = parquet.read_row_group(row_group, columns=[text_column]).column(0)
        except (pa.ArrowInvalid, OSError) as exc:
            raise InputError(f"{shard.path}: unreadable near row {row} ({_first_line(exc)})") from None
        for chunk in column.chunks:
            try:
                chunk.validate(full=check_utf8)
            except pa.ArrowInvalid as exc:
                raise InputError(f"{shard.path}: rows {row}-{row + len(chunk) - 1}: {_first_line(exc)}") from None
            row += len(chunk)
            yield select_rows(shard, chunk)  # --sample, by the rule read_batches applies


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def combine_counts(*parts: WordCounts) -> WordCounts:
    """A task: the sum of word counts. Arrow's code is unmapped first: a sum reads no file, and the
    sums at the end of counting are a worker's largest moment before its table."""
    release_code(READER)
    combined = WordCounts.combine(parts)
    release_memory()
    return combined


def fingerprint_shard(shard: Shard) -> dict:
    return shard.fingerprint()


def split_by_bucket(counts: WordCounts, n_buckets: int) -> list[WordCounts]:
    """Words go to bucket stable_hash(word) % n (FNV-1a over the bytes, the same in every process)."""
    return counts.split_by_hash(n_buckets)


def write_counts(counts: WordCounts, path: str) -> str:
    """Write counts as Parquet, whole or not at all (`bpe.storage.write_file`); returns the path."""
    return storage.write_file(path, lambda tmp: write_counts_parquet(counts, tmp))


def write_counts_digest(counts: WordCounts, path: str) -> str:
    """`write_counts`, returning the digest of the bytes written (`bpe.storage.file_digest`)."""
    return storage.write_file_digest(path, lambda tmp: write_counts_parquet(counts, tmp))


def read_counts(path: str, expected: tuple[str, int] | None = None) -> WordCounts:
    """The counts in a Parquet file; with `expected` (digest, size), only if its bytes are those."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not storage.exists(path):
        raise InputError(f"{path}: counts file is gone (was the cache directory cleaned?)")
    if expected is not None:
        return counts_from_arrow(pq.read_table(pa.BufferReader(verified_bytes(path, *expected))))
    with storage.open_read(path) as f:
        return counts_from_arrow(pq.read_table(f))


def verified_bytes(path: str, digest: str, size: int) -> bytes:
    """A file's bytes, if they are the `size` bytes of BLAKE2b digest `digest` that were checked or
    written earlier (a count cache file replaced since is an InputError, never read as counts)."""
    import hashlib

    with storage.open_read(path) as f:
        data = f.read(size + 1)
    if len(data) != size or hashlib.blake2b(data, digest_size=32).hexdigest() != digest:
        raise InputError(f"{path}: changed since it was written or checked; run again to count the shard anew")
    return data


def read_split(
    path: str, n_buckets: int, expected: tuple[str, int] | None = None, multiplier: int = 1
) -> list[WordCounts]:
    """The counts in a file split into buckets, each count multiplied by `multiplier` (a mixture's)."""
    counts = read_counts(path, expected)
    if multiplier != 1:
        counts = WordCounts(counts.data, counts.offsets, counts.counts * multiplier)
    return split_by_bucket(counts, n_buckets)


def _stats_or_error(result: dict) -> dict | BpeError:
    """A counted partition's statistics, or the bad-input error it came back with."""
    return result["error"] if "error" in result else result["stats"]


def _item(result, *keys):
    for key in keys:
        result = result[key]
    return result


# ---------------------------------------------------------------------------------------------
# The client side.


def partitions(shards: Sequence[Shard], text_column: str) -> list[tuple[Shard, int | None, int]]:
    """(shard, row group or None for a whole file, weight in bytes), largest first. A Parquet file
    that `--limit` cuts (`Shard.budget`) is read whole, in order, as the limit is defined."""
    parts = []
    for shard in shards:
        if shard.kind == "parquet" and shard.budget is None:
            meta = check_parquet(shard, text_column)
            for rg in range(meta.num_row_groups):
                parts.append((shard, rg, max(meta.row_group(rg).total_byte_size, 1)))
        else:
            parts.append((shard, None, max(shard.size, 1)))
    parts.sort(key=lambda p: -p[2])  # largest first balances the workers' load
    return parts


SUM_PRIORITY = 10  # sums of counts run ahead of counting more partitions (which run at 0)


@dataclass
class Counted:
    """Partitions counted on the workers: the partition futures (`tasks`, each a `count_partition`
    result), each word bucket's counts summed over them (`buckets`, futures), and the statistics."""

    tasks: list
    buckets: list
    stats: CountStats


def submit_counts(client, shards, pretokenizer, text_column, n_buckets, holdout, progress=None, log=None) -> Counted:
    """Count every partition of `shards` on the workers and sum each word bucket over them; wait
    for the counting (failing fast on bad input, and on workers all paused for memory:
    `bpe.distributed.memory`, said through `log`)."""
    groups = [shards]
    return submit_counts_by_group(client, groups, pretokenizer, text_column, n_buckets, holdout, progress, log)[0]


def submit_counts_by_group(
    client, groups, pretokenizer, text_column, n_buckets, holdout, progress=None, log=None
) -> list[Counted]:
    """`submit_counts` for several groups of shards at once (a multilingual run's languages): every
    partition of every group is counted in one pass over the cluster, so a small group never waits
    for a large one's tail; each group's buckets are summed over its own partitions only.

    The sums are submitted with the counting, ahead of it in priority: a sum runs as soon as its
    parts are counted, so a worker holds a few partitions' counts at a time, not every partition it
    counted until the last one ends (which on one worker came to more than the local engine's peak)."""
    from bpe.distributed.memory import as_they_end

    parts = [(g, *part) for g, shards in enumerate(groups) for part in partitions(shards, text_column)]
    parts.sort(key=lambda p: -p[3])  # largest first over all groups balances the workers' load
    total = sum(p[3] for p in parts)
    tasks = [
        client.submit(count_partition, shard, rg, pretokenizer, text_column, n_buckets, holdout, pure=False)
        for _, shard, rg, _ in parts
    ]
    by_group: list[list] = [[] for _ in groups]
    for task, part in zip(tasks, parts):
        by_group[part[0]].append(task)
    sums = [summed_buckets(client, group_tasks, n_buckets) if group_tasks else [] for group_tasks in by_group]
    stats_of = [client.submit(_stats_or_error, t) for t in tasks]  # picked as each count ends
    weight = {s.key: p[3] for s, p in zip(stats_of, parts)}
    counted: dict = {}  # each partition's statistics, summed in partition order at the end
    done = text_done = 0  # progress: partition bytes (the weights) and bytes of text counted
    if progress is not None:
        progress("count", 0, total)
    for future in as_they_end(client, stats_of, log):
        # A failure is read first: once cancelled, a future has lost its exception.
        part = future.result() if future.status == "finished" else _failure(future)
        if isinstance(part, BaseException):
            client.cancel([*tasks, *(f for group in sums for f in group)])
            raise part
        counted[future.key] = part
        done += weight[future.key]
        text_done += part["bytes"]
        if progress is not None:  # in bytes of text, as the summary counts
            progress("count", text_done, estimate_text_bytes(text_done, done, total))
    stats = [CountStats() for _ in groups]
    for future, part in zip(stats_of, parts):
        stats[part[0]].add(CountStats(**counted[future.key]))
    if progress is not None:
        progress("count", sum(s.bytes for s in stats), sum(s.bytes for s in stats))
    return [Counted(t, b, st) for t, b, st in zip(by_group, sums, stats, strict=True)]


def summed_buckets(client, tasks: list, n_buckets: int) -> list:
    """Futures of each word bucket's counts summed over the partitions `tasks` (`tree_reduce`)."""
    return [
        tree_reduce(client, [client.submit(_item, t, "buckets", b, priority=SUM_PRIORITY) for t in tasks])
        for b in range(n_buckets)
    ]


def _failure(future) -> BaseException:
    """The exception a failed task raised on its worker (an InputError naming file and rows comes
    back as itself), or, for a task that did not fail but will not finish, one saying so."""
    try:
        error = future.exception(timeout=60)
    except Exception as exc:  # cancelled, or the scheduler gone
        return exc
    return error if isinstance(error, BaseException) else RuntimeError(f"counting task {future.key}: {future.status}")


def count_on_dask(
    client,
    shards: Sequence[Shard] | None,
    texts: Iterable[str] | None,
    pretokenizer: Pretokenizer,
    text_column: str,
    n_buckets: int,
    progress=None,
    log=None,
) -> tuple[list, CountStats, list[dict] | None]:
    """Count on the workers; returns (futures of the summed counts per bucket, stats, fingerprints).
    In-memory `texts` (when `shards` is None) are counted here, then placed on the workers."""
    if shards is None:
        counter = WordCounter(pretokenizer)
        counter.add_stream(texts or ())  # in batches: a generator or a dataset is never held whole
        buckets = split_by_bucket(counter.result(), n_buckets)
        return scatter(client, buckets, log), counter.stats, None
    # Hashing the shards waits behind the counting (lower priority): it fills the counting's tail.
    fingerprints = [client.submit(fingerprint_shard, s, pure=False, priority=-10) for s in shards]
    counted = submit_counts(client, shards, pretokenizer, text_column, n_buckets, 0.0, progress, log)
    return counted.buckets, counted.stats, client.gather(fingerprints)


def count_file_buckets(path: str, n_buckets: int) -> dict:
    """A task: one file of word counts (`bpe.training.counts_files`) read and checked on a worker,
    split into the word buckets; with what it stands for and its total."""
    from bpe.training.counts_files import read_counts_file

    part = read_counts_file(path)
    return {"buckets": split_by_bucket(part.counts, n_buckets), "stats": part.stats, "total": part.total}


def counts_on_dask(client, source, n_buckets: int, progress=None, log=None) -> tuple[list, CountStats, list[dict]]:
    """Word counts read on the workers, a task per file (`source`: a `CountsSource`), summed per
    bucket there; returns what `count_on_dask` returns. A file that is not word counts fails the
    run with its one line."""
    from bpe.training.counts_files import refuse_overflow

    shards = source.shards
    fingerprints = [client.submit(fingerprint_shard, s, pure=False, priority=-10) for s in shards]
    tasks = [client.submit(count_file_buckets, s.path, n_buckets, pure=False) for s in shards]
    if progress is not None:
        progress("count", 0, len(tasks))
    from bpe.distributed.memory import as_they_end

    summary_of = [client.submit(_file_summary, t) for t in tasks]
    for _ in as_they_end(client, summary_of, log):  # a bad file fails here, with its one line
        pass
    summaries = client.gather(summary_of)
    if progress is not None:
        progress("count", len(tasks), len(tasks))
    refuse_overflow(source, [total for _, total in summaries])
    reduced = summed_buckets(client, tasks, n_buckets)
    del tasks
    return reduced, source.stats([stats for stats, _ in summaries]), client.gather(fingerprints)


def _file_summary(result: dict) -> tuple[CountStats, float]:
    return result["stats"], result["total"]


def count_languages_on_dask(
    client,
    shards: Sequence[Sequence[Shard]] | None,
    texts: Sequence[Iterable[str]] | None,
    pretokenizer: Pretokenizer,
    text_column: str,
    n_buckets: int,
    progress=None,
    log=None,
) -> tuple[list[list], list[CountStats], list[list[dict]] | None]:
    """Count each language of a multilingual run apart (`shards`, one list per language, or
    in-memory `texts`, one iterable per language, counted here then placed on the workers): per
    language, the futures of its counts per word bucket (summed over its partitions only, never
    with another language's), its statistics, and its files' fingerprints (None for texts). All
    languages' partitions are counted in one pass over the cluster."""
    if shards is None:
        buckets, stats = [], []
        for documents in texts or ():
            counter = WordCounter(pretokenizer)
            counter.add_stream(documents)
            buckets.append(scatter(client, split_by_bucket(counter.result(), n_buckets), log))
            stats.append(counter.stats)
        return buckets, stats, None
    fingerprints = [[client.submit(fingerprint_shard, s, pure=False, priority=-10) for s in found] for found in shards]
    counted = submit_counts_by_group(client, shards, pretokenizer, text_column, n_buckets, 0.0, progress, log)
    buckets = [
        language.buckets
        if language.tasks
        else scatter(client, [WordCounts.empty() for _ in range(n_buckets)], log)  # a language with no partition
        for language in counted
    ]
    return buckets, [language.stats for language in counted], [client.gather(found) for found in fingerprints]


def tree_reduce(client, futures: list, fan_in: int = 4):
    """Sum counts on the workers, a few at a time, never gathering partials here; each sum ahead
    of the counting still to run (`SUM_PRIORITY`)."""
    level = list(futures)
    while len(level) > 1:
        groups = [level[i : i + fan_in] for i in range(0, len(level), fan_in)]
        level = [client.submit(combine_counts, *group, pure=False, priority=SUM_PRIORITY) for group in groups]
    return level[0]


@dataclass
class ShardCount:
    """One input file counted: its fingerprint, the Parquet files holding its word counts and its
    held-out rows, what was counted, and how long it took."""

    shard: dict  # path, size, sha256, kind
    counts: str
    held_out: str
    stats: CountStats
    seconds: float = 0.0
    cached: bool = False  # found in the count cache rather than counted now
    digests: dict[str, str] = field(default_factory=dict)  # "counts", "held_out": their files' digests
    sizes: dict[str, int] = field(default_factory=dict)  # and their sizes in bytes, once recorded

    def expected(self, name: str) -> tuple[str, int] | None:
        """(digest, size) of the file `name` ("counts", "held_out"), for a verified read; None if unknown."""
        return (self.digests[name], self.sizes[name]) if name in self.digests and name in self.sizes else None


def count_shard_to_files(
    client,
    shard: dict,
    pretokenizer: Pretokenizer,
    text_column: str,
    holdout: float,
    counts_path: str,
    held_out_path: str,
) -> ShardCount:
    """Count one shard (a fingerprint: path, size, sha256, kind) on the workers and have a worker
    write its counts (and its held-out rows) to Parquet, hashing the bytes it writes."""
    started = time.perf_counter()
    counted = submit_counts(
        client, [Shard(shard["path"], shard["kind"], shard["size"])], pretokenizer, text_column, 1, holdout
    )
    stats = counted.stats
    written = client.submit(write_counts_digest, counted.buckets[0], counts_path, pure=False)
    parts_held_out = [client.submit(_item, t, "held_out") for t in counted.tasks]
    held = client.submit(_write_held_out, parts_held_out, held_out_path)
    digests = {"counts": written.result(), "held_out": held.result()}
    return ShardCount(shard, counts_path, held_out_path, stats, time.perf_counter() - started, digests=digests)


def counts_file_to_files(client, shard: dict, counts_path: str, held_out_path: str) -> ShardCount:
    """One file of word counts (a fingerprint: path, size, sha256) read and checked on a worker,
    which writes its words, duplicates summed, as `count_shard_to_files` writes a shard's counts,
    beside no held-out row: counts hold no text. A file that is not word counts fails in one line."""
    started = time.perf_counter()
    written = client.submit(_counts_file_to_files, shard["path"], counts_path, held_out_path, pure=False).result()
    stats, digests = written["stats"], {"counts": written["counts"], "held_out": written["held_out"]}
    return ShardCount(shard, counts_path, held_out_path, stats, time.perf_counter() - started, digests=digests)


def _counts_file_to_files(path: str, counts_path: str, held_out_path: str) -> dict:
    from bpe.training.counts_files import read_counts_file

    part = read_counts_file(path)
    return {
        "stats": part.stats,
        "counts": write_counts_digest(part.counts, counts_path),
        "held_out": _write_held_out([], held_out_path),
    }


def _write_held_out(parts: list[list[str]], path: str) -> str:
    """Write the held-out rows as Parquet; returns the digest of the bytes written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = pa.table({"text": pa.array([text for part in parts for text in part], pa.string())})
    return storage.write_file_digest(path, lambda tmp: pq.write_table(rows, tmp))


def read_held_out(path: str, expected: tuple[str, int] | None = None) -> list[str]:
    """The held-out rows `_write_held_out` wrote; with `expected` (digest, size), only if its bytes are those."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if expected is not None:
        return pq.read_table(pa.BufferReader(verified_bytes(path, *expected))).column("text").to_pylist()
    with storage.open_read(path) as f:
        return pq.read_table(f).column("text").to_pylist()


def bucket_files(
    client,
    counts_paths: Sequence[str],
    n_buckets: int,
    directory: str,
    expected: Sequence[tuple[str, int] | None] | None = None,
    multipliers: Sequence[int] | None = None,
) -> list[str]:
    """Sum per-shard counts files into `n_buckets` word buckets by stable hash, on the workers, and
    write each bucket to `directory`/bucket-NNNN.parquet; returns their paths. `expected`: each
    file's (digest, size), checked by the worker that reads it; `multipliers`: each file's counts
    are multiplied by its own first (a mixture's weight of the file's language; the caller checks
    that the weighted counts fit)."""
    expected = expected or [None] * len(counts_paths)
    multipliers = multipliers or [1] * len(counts_paths)
    split = [
        client.submit(read_split, p, n_buckets, e, m, pure=False)
        for p, e, m in zip(counts_paths, expected, multipliers, strict=True)
    ]
    paths = []
    writes = []
    for b in range(n_buckets):
        total = tree_reduce(client, [client.submit(operator.itemgetter(b), s) for s in split])
        path = storage.join(directory, f"bucket-{b:04d}.parquet")
        writes.append(client.submit(write_counts, total, path, pure=False))
        paths.append(path)
    client.gather(writes)
    return paths

"""Word counts written by the Dask workers (`bpe count --engine dask`): each word bucket is summed
on a worker and written there, `part-NNNNN.parquet`, so that no process ever holds every word;
this process writes `counts.json` last. The files are those `bpe count` writes on one machine,
split by a stable hash of the word: `bpe train --counts` reads them as any counts.

`out` must be where every worker writes: a local path for a cluster started here (or a shared
filesystem), an object store URL for one whose workers are elsewhere.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

from bpe import storage
from bpe.distributed.client import Log, dask_client, ready_workers
from bpe.distributed.count_tasks import submit_counts
from bpe.distributed.memory import failed_for_memory
from bpe.engine.count import WordCounts
from bpe.inputs.shard import Shard
from bpe.progress import ProgressFn
from bpe.training.counting import write_counts_parquet
from bpe.training.counts_files import COUNTS_FILE, RECORD, CountsSource, find_counts, record_of, recorded_files
from bpe.training.settings import Settings

PART = "part-{:05d}.parquet"  # a word bucket's file


def write_bucket(counts: WordCounts, path: str) -> int:
    """A task: write one word bucket's counts to `path` (a file or URL), whole; returns its words."""
    storage.write_file(path, lambda tmp: write_counts_parquet(counts, tmp))
    return len(counts)


def count_to_files(
    settings: Settings,
    shards: Sequence[Shard],
    out: str | Path,
    *,
    force: bool = False,
    scheduler: str | None = None,
    workers: int | None = None,
    progress: ProgressFn | None = None,
    log: Log | None = None,
) -> CountsSource:
    """Count `shards` as `settings` split text, on the workers, and have them write the word
    buckets into `out` (a bucket per worker), with the record after; returns the counts found
    there. Published whole: locally in a staged directory renamed into place; in an object store
    with the record and the COMPLETE marker last. An existing counts directory is kept unless `force`."""
    from bpe.training.warm import groups_of_run

    out = str(out)
    old = recorded_files(out)
    remote = storage.is_remote(out)
    hint = "use --force to replace it"
    storage.check_target(out, [COUNTS_FILE, RECORD, *old], force=force, kind="counts directory", replace_hint=hint)
    groups = [name for name in groups_of_run(settings, "dask") if name.startswith("count ")]
    with dask_client(scheduler, workers, None, log) as (client, _):
        since = time.time()
        ready = ready_workers(client, groups, log)
        staged = out if remote else str(storage.stage_directory(out))
        try:
            try:
                counted = submit_counts(
                    client, shards, settings.pretokenizer, settings.text_column, ready.workers, 0.0, progress, log
                )
                names = [PART.format(i) for i in range(len(counted.buckets))]
                if remote and force:  # the old counts read as incomplete from here on, as they are overwritten
                    storage.remove(storage.join(out, storage.COMPLETE))
                writes = [
                    client.submit(write_bucket, bucket, storage.join(staged, name), pure=False)
                    for bucket, name in zip(counted.buckets, names, strict=True)
                ]
                words = sum(client.gather(writes))
            except Exception as exc:
                error = failed_for_memory(client, since, "while counting", exc)
                if error is exc:
                    raise
                raise error from None
            record = {**record_of(settings.pattern, settings.special_tokens, counted.stats, words), "files": names}
            _publish(staged, out, names, record, old, force)
        except BaseException:
            if not remote:
                storage.discard_staged(Path(staged))
            raise
    return find_counts(out)


def _publish(staged: str, out: str, names: list[str], record: dict, old: list[str], force: bool) -> None:
    """Put the record beside the buckets the workers wrote and publish them: the staged directory
    renamed into place (here), or, in an object store where they were written in place, the
    files of the old counts that these do not replace removed, then the record and the marker."""
    data = (json.dumps(record, indent=2) + "\n").encode()
    owned = list(dict.fromkeys([COUNTS_FILE, RECORD, *names, *old]))
    if not storage.is_remote(out):
        (Path(staged) / RECORD).write_bytes(data)
        storage.publish_staged(Path(staged), out, owned=owned, last=RECORD, kind="counts directory", force=force)
        return
    for name in set(old) - set(names):
        storage.remove(storage.join(out, name))
    storage.write_bytes(storage.join(out, RECORD), data)
    storage.mark_complete(out)

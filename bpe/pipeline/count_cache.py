"""The count cache: each shard's counts kept as data, so an unchanged shard is never counted twice.

Under `<cache_dir>/counts/`, a shard counted with given settings leaves `<key>.parquet` (its word
counts), `<key>.held-out.parquet` (its held-out rows) and `<key>.json` (what was counted), the
JSON written last: a count is in the cache when its JSON is. The key hashes the shard's content,
the pre-tokenization settings and the counting code, so the cache survives new processes and a
fresh Prefect database. Nothing in it is ever unpickled: a planted or damaged entry is a miss.
The JSON holds the BLAKE2b digest of each Parquet file's bytes, hashed by the worker that wrote
it, and a hit is read whole and checked against them: a file that does not match (truncated,
overwritten) makes the entry a miss, and the shard is counted again into the same files. An
entry without digests is a miss too, without a warning.
The cache may be a path every Dask worker shares or an object store URL (`s3://bucket/cache`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, fields

from bpe import storage
from bpe.counting import CountStats, counting_code_version
from bpe.distributed.counting import ShardCount
from bpe.pipeline.config import TokenizerConfig
from bpe.settings import Settings

Warn = Callable[[str], None]
RECORD_ERRORS = (OSError, ValueError, TypeError, KeyError, AttributeError)  # what a bad record raises


def counting_settings(cfg: TokenizerConfig, settings: Settings | None = None) -> dict:
    """What a shard's counts depend on besides its content: how `settings` split text (the run's,
    with its base's pattern and special tokens, or one stage's of a superword run; by default
    the configuration's own), the text column and the held-out fraction."""
    pretokenizer = (settings or cfg.settings()).pretokenizer
    return {
        "pattern": pretokenizer.regex,
        "special_tokens": list(pretokenizer.special_tokens),
        "text_column": cfg.text_column,
        "holdout_fraction": cfg.holdout_fraction,
    }


def shard_count_key(shard: dict, counting: dict) -> str:
    """What a shard's counts depend on: its content, the pre-tokenization settings, the code."""
    text = json.dumps([shard["sha256"], shard["size"], counting, counting_code_version()], sort_keys=True)
    return "count-" + hashlib.sha256(text.encode()).hexdigest()[:32]


class CountCache:
    """Shard counts under `directory` (a path every Dask worker can write, or a URL)."""

    def __init__(self, directory: str) -> None:
        self.directory = storage.join(directory, "counts")

    def paths(self, key: str) -> tuple[str, str]:
        """Where a count's words and held-out rows go."""
        return storage.join(self.directory, f"{key}.parquet"), storage.join(self.directory, f"{key}.held-out.parquet")

    def record_path(self, key: str) -> str:
        """Where a count's JSON goes (its presence marks the count complete)."""
        return storage.join(self.directory, f"{key}.json")

    def lookup(self, key: str, shard: dict, warn: Warn | None = None) -> ShardCount | None:
        """The cached count of `shard`, or None: never counted, files cleaned away, no digests, or
        damaged (said once through `warn`, naming the shard and the entry's file at fault)."""
        try:
            found = self._read_record(key, shard)
        except FileNotFoundError:
            return None
        except RECORD_ERRORS as exc:
            return _damaged(warn, shard, self.record_path(key), f"unreadable record: {type(exc).__name__}")
        if found is None:
            return None
        for path, digest in ((found.counts, found.digests["counts"]), (found.held_out, found.digests["held_out"])):
            fault = _file_fault(path, digest)
            if fault == "missing":
                return None
            if fault:
                return _damaged(warn, shard, path, fault)
        return found

    def _read_record(self, key: str, shard: dict) -> ShardCount | None:
        """The count a JSON describes (files unchecked), or None for one without digests."""
        record = json.loads(storage.read_bytes(self.record_path(key)))
        known = {f.name for f in fields(CountStats)}
        stats = CountStats(**{k: v for k, v in record["stats"].items() if k in known})
        digests = record.get("digests")
        if not (isinstance(digests, dict) and all(isinstance(digests.get(k), str) for k in ("counts", "held_out"))):
            return None
        counts, held_out = self.paths(key)
        return ShardCount(shard, counts, held_out, stats, float(record["seconds"]), cached=True, digests=digests)

    def record(self, key: str, counted: ShardCount) -> None:
        """Mark a count complete: its JSON (with its files' digests), written whole after its Parquet files."""
        record = {
            "shard": counted.shard,
            "stats": asdict(counted.stats),
            "seconds": counted.seconds,
            "digests": counted.digests,
        }
        storage.write_bytes(self.record_path(key), json.dumps(record).encode())


def _file_fault(path: str, digest: str) -> str | None:
    """What is wrong with a cached file: None, "missing" (cleaned away), or why it is damaged."""
    try:
        actual = storage.file_digest(path)
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return f"unreadable: {type(exc).__name__}"
    return None if actual == digest else "its bytes differ from those written"


def _damaged(warn: Warn | None, shard: dict, path: str, why: str) -> None:
    """Say that a cache entry is damaged (a miss: the shard is counted again and the entry replaced)."""
    if warn is not None:
        warn(f"{shard['path']}: damaged count cache entry {path} ({why}); counting the shard again")
    return None

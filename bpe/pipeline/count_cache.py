"""The count cache: each shard's counts kept as data, so an unchanged shard is never counted twice.

Under `<cache_dir>/counts/`, a shard counted with given settings leaves `<key>.parquet` (its word
counts), `<key>.held-out.parquet` (its held-out rows) and `<key>.json` (what was counted), the
JSON written last: a count is in the cache when its JSON is. The key hashes the shard's content,
the pre-tokenization settings and the counting code, so the cache survives new processes and a
fresh Prefect database. Nothing in it is ever unpickled: a planted or damaged entry is a miss.
The cache may be a path every Dask worker shares or an object store URL (`s3://bucket/cache`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, fields

from bpe import storage
from bpe.distributed.counting import ShardCount
from bpe.engine.count import CountStats, counting_code_version
from bpe.pipeline.config import TokenizerConfig


def counting_settings(cfg: TokenizerConfig) -> dict:
    """What a shard's counts depend on besides its content."""
    return {
        "pattern": cfg.settings().pretokenizer.regex,
        "special_tokens": list(cfg.special_tokens),
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

    def lookup(self, key: str, shard: dict) -> ShardCount | None:
        """The cached count of `shard`, or None (never counted, files cleaned away, or damaged)."""
        counts, held_out = self.paths(key)
        try:
            record = json.loads(storage.read_bytes(storage.join(self.directory, f"{key}.json")))
            known = {f.name for f in fields(CountStats)}
            stats = CountStats(**{k: v for k, v in record["stats"].items() if k in known})
            seconds = float(record["seconds"])
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return None
        if not (storage.exists(counts) and storage.exists(held_out)):
            return None
        return ShardCount(shard, counts, held_out, stats, seconds, cached=True)

    def record(self, key: str, counted: ShardCount) -> None:
        """Mark a count complete: its JSON, written whole after its Parquet files."""
        record = {"shard": counted.shard, "stats": asdict(counted.stats), "seconds": counted.seconds}
        storage.write_bytes(storage.join(self.directory, f"{key}.json"), json.dumps(record).encode())

"""The count cache: each shard's counts kept as data, so an unchanged shard is never counted twice.

Under `<cache_dir>/counts/`, a shard counted with given settings leaves `<key>.parquet` (its word
counts), `<key>.held-out.parquet` (its held-out rows) and `<key>.json` (what was counted), the
JSON written last: a count is in the cache when its JSON is. The key hashes the shard's content,
the pre-tokenization settings, the counting code and the entry format, so the cache survives new
processes and a fresh Prefect database. Nothing in it is ever unpickled.

Whoever can write the cache must not decide what is trained on. The JSON records the size and
BLAKE2b digest of each Parquet file's bytes (hashed by the Dask worker that wrote them) and is
signed with the deployment's key (HMAC-SHA256, `bpe.pipeline.security.count_cache_key`), which only
the processes running the flow hold: they write and read the JSONs. A hit is a record whose
signature, key and values check out, with files of exactly the recorded bytes whose schema and
values are those of counts (binary words, positive int64 counts; string rows). Anything else (not
signed or signed with another key, moved from another key, damaged, truncated, planted) is a miss,
said once through `warn` naming the shard and the entry's file at fault; the shard is counted
again into the same files. An entry whose files were cleaned away is a miss without a warning.
The cache may be a path every Dask worker shares or an object store URL (`s3://bucket/cache`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import re
import stat
from collections.abc import Callable
from dataclasses import asdict, fields

from bpe import storage
from bpe.distributed.count_tasks import ShardCount
from bpe.pipeline.config import TokenizerConfig
from bpe.pipeline.security import count_cache_key, entry_signature
from bpe.training.counting import CountStats, counting_code_version
from bpe.training.settings import Settings

Warn = Callable[[str], None]
FORMAT = 2  # of the entries: signed records with their files' sizes (part of the key)
MAX_RECORD_BYTES = 1 << 20  # a record is a few hundred bytes; a larger file is not one
INT64 = 1 << 63
DIGEST = re.compile(r"^[0-9a-f]{64}$")
FILES = ("counts", "held_out")


class Refused(ValueError):
    """A cache entry that must not be used, and why (for the one warning that names it)."""


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
    text = json.dumps([shard["sha256"], shard["size"], counting, counting_code_version(), FORMAT], sort_keys=True)
    return "count-" + hashlib.sha256(text.encode()).hexdigest()[:32]


class CountCache:
    """Shard counts under `directory` (a path every Dask worker can write, or a URL), their records
    signed with `secret` (by default the deployment's count cache key)."""

    def __init__(self, directory: str, secret: bytes | None = None) -> None:
        self.directory = storage.join(directory, "counts")
        self._secret = secret

    @property
    def secret(self) -> bytes:
        if self._secret is None:
            self._secret = count_cache_key()
        return self._secret

    def paths(self, key: str) -> tuple[str, str]:
        """Where a count's words and held-out rows go."""
        return storage.join(self.directory, f"{key}.parquet"), storage.join(self.directory, f"{key}.held-out.parquet")

    def record_path(self, key: str) -> str:
        """Where a count's JSON goes (its presence marks the count complete)."""
        return storage.join(self.directory, f"{key}.json")

    def lookup(self, key: str, shard: dict, warn: Warn | None = None) -> ShardCount | None:
        """The cached count of `shard`, or None: never counted, files cleaned away, or refused
        (said once through `warn`, naming the shard and the entry's file at fault)."""
        record_path = self.record_path(key)
        try:
            record = self._read_record(key)
        except FileNotFoundError:
            return None
        except Refused as exc:
            return _refused(warn, shard, record_path, str(exc))
        paths = dict(zip(FILES, self.paths(key), strict=True))
        for name, check in (("counts", _check_counts), ("held_out", _check_held_out)):
            try:
                _check_file(paths[name], record["sizes"][name], record["digests"][name], check)
            except FileNotFoundError:
                return None  # cleaned away (a half-done prune-cache): counted again, quietly
            except Refused as exc:
                return _refused(warn, shard, paths[name], str(exc))
        stats = CountStats(**record["stats"])
        return ShardCount(
            shard,
            paths["counts"],
            paths["held_out"],
            stats,
            float(record["seconds"]),
            cached=True,
            digests={name: record["digests"][name] for name in FILES},
            sizes={name: record["sizes"][name] for name in FILES},
        )

    def _read_record(self, key: str) -> dict:
        """The record of `key`, signature and values checked (its files are not); Refused says why not."""
        try:
            data = _read_bounded(self.record_path(key), MAX_RECORD_BYTES)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise Refused(f"unreadable record: {exc.strerror or type(exc).__name__}") from None
        if len(data) > MAX_RECORD_BYTES:
            raise Refused(f"not a record: over {MAX_RECORD_BYTES:,} bytes")
        try:
            record = json.loads(data)
        except ValueError as exc:
            raise Refused(f"unreadable record: {type(exc).__name__}") from None
        if not isinstance(record, dict):
            raise Refused("unreadable record: not a JSON object")
        mac = record.get("mac")
        if not isinstance(mac, str) or not hmac.compare_digest(mac, self._sign(record)):
            raise Refused("not signed with this deployment's count cache key: planted, altered, or signed elsewhere")
        _check_record(record, key)
        return record

    def record(self, key: str, counted: ShardCount) -> None:
        """Mark a count complete: its JSON (with its files' sizes and digests, signed), written whole
        after its Parquet files. `counted` learns its files' sizes."""
        paths = dict(zip(FILES, (counted.counts, counted.held_out), strict=True))
        record = {
            "format": FORMAT,
            "key": key,
            "shard": counted.shard,
            "stats": asdict(counted.stats),
            "seconds": counted.seconds,
            "digests": {name: counted.digests[name] for name in FILES},
            "sizes": {name: _size(path) for name, path in paths.items()},
        }
        record["mac"] = self._sign(record)
        counted.sizes = dict(record["sizes"])
        storage.write_bytes(self.record_path(key), json.dumps(record).encode())

    def _sign(self, record: dict) -> str:
        """The signature of a record: over its canonical JSON without the signature itself."""
        payload = json.dumps({k: v for k, v in record.items() if k != "mac"}, sort_keys=True, separators=(",", ":"))
        return entry_signature(self.secret, payload.encode())


# -- checks -------------------------------------------------------------------------------------


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < INT64


def _check_record(record: dict, key: str) -> None:
    """The values a signed record must hold (Refused otherwise): a signature only says who wrote it."""
    if record.get("format") != FORMAT or record.get("key") != key:
        raise Refused("a record of another format or key")
    stats = record.get("stats")
    names = {f.name for f in fields(CountStats)}
    if not isinstance(stats, dict) or set(stats) != names:
        raise Refused(f"stats: expected the fields {', '.join(sorted(names))}")
    for name in (f.name for f in fields(CountStats) if f.name != "special_tokens"):
        if not _is_count(stats[name]):
            raise Refused(f"stats: {name}: expected an integer in [0, 2^63), got {stats[name]!r}")
    special = stats["special_tokens"]
    if not isinstance(special, dict) or not all(isinstance(t, str) and _is_count(n) for t, n in special.items()):
        raise Refused("stats: special_tokens: expected a mapping of special tokens to counts")
    seconds = record.get("seconds")
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not 0 <= seconds < math.inf:
        raise Refused(f"seconds: expected a number >= 0, got {seconds!r}")
    digests, sizes = record.get("digests"), record.get("sizes")
    if not isinstance(digests, dict) or not all(isinstance(digests.get(n), str) for n in FILES):
        raise Refused("digests: expected the BLAKE2b-256 digests of both files")
    if not all(DIGEST.match(digests[n]) for n in FILES):
        raise Refused("digests: expected the BLAKE2b-256 digests of both files")
    if not isinstance(sizes, dict) or not all(_is_count(sizes.get(n)) for n in FILES):
        raise Refused("sizes: expected the byte sizes of both files")


def _check_file(path: str, size: int, digest: str, check: Callable[[bytes], None]) -> None:
    """A cached file holds exactly the recorded bytes, and they are what `check` expects (Refused
    otherwise; FileNotFoundError when it is gone)."""
    try:
        data = _read_bounded(path, size)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise Refused(f"unreadable: {exc.strerror or type(exc).__name__}") from None
    if len(data) != size or hashlib.blake2b(data, digest_size=32).hexdigest() != digest:
        raise Refused("its bytes differ from those written")
    check(data)


def _read_bounded(path: str, limit: int) -> bytes:
    """Up to `limit` + 1 bytes of a file: a local one only if it is a regular file (a link to a
    device or a FIFO is not read: it could be endless or never answer)."""
    if not storage.is_remote(path):
        local = storage.local_path(path)
        if not stat.S_ISREG(os.stat(local).st_mode):
            raise Refused("not a regular file")
    with storage.open_read(path) as f:
        return f.read(limit + 1)


def _size(path: str) -> int:
    """A file's size in bytes, local or remote."""
    if storage.is_remote(path):
        fs, inner = storage.filesystem(path)
        return int(fs.size(inner))
    return os.path.getsize(storage.local_path(path))


def _parquet_batches(data: bytes, columns: dict[str, Callable]) -> list:
    """The record batches of a Parquet file held in `data`, once its columns are exactly `columns`
    (name -> type predicate); Refused otherwise."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(pa.BufferReader(data))
        schema = parquet.schema_arrow
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise Refused(f"not a Parquet file ({type(exc).__name__})") from None
    found = {f.name: f.type for f in schema}
    if set(found) != set(columns) or not all(accepts(found[name]) for name, accepts in columns.items()):
        shown = ", ".join(f"{name} {kind}" for name, kind in found.items())
        raise Refused(f"columns {shown}; expected {', '.join(columns)} of the types written")
    try:
        return list(parquet.iter_batches(batch_size=1 << 16))
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise Refused(f"unreadable Parquet ({type(exc).__name__})") from None


def _check_counts(data: bytes) -> None:
    """Word counts as `counts_to_arrow` writes them: non-empty binary words, int64 counts >= 1."""
    import pyarrow.compute as pc
    import pyarrow.types as t

    binary = lambda kind: t.is_binary(kind) or t.is_large_binary(kind)  # noqa: E731
    for batch in _parquet_batches(data, {"word": binary, "count": t.is_int64}):
        words, counts = batch.column("word"), batch.column("count")
        if words.null_count or counts.null_count:
            raise Refused("null words or counts")
        if len(batch) and pc.min(counts).as_py() < 1:
            raise Refused(f"a count of {pc.min(counts).as_py()}: counts are >= 1")
        if len(batch) and pc.min(pc.binary_length(words)).as_py() < 1:
            raise Refused("an empty word")


def _check_held_out(data: bytes) -> None:
    """Held-out rows as the count task writes them: one string column `text`, no nulls."""
    import pyarrow.types as t

    text = lambda kind: t.is_string(kind) or t.is_large_string(kind)  # noqa: E731
    for batch in _parquet_batches(data, {"text": text}):
        if batch.column("text").null_count:
            raise Refused("null held-out rows")


def _refused(warn: Warn | None, shard: dict, path: str, why: str) -> None:
    """Say that a cache entry is not used (a miss: the shard is counted again and the entry replaced)."""
    if warn is not None:
        warn(f"{shard['path']}: count cache entry {path} not used ({why}); counting the shard again")
    return None

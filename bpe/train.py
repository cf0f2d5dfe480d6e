"""Training end to end: shards -> counts -> merges -> a Tokenizer with its manifest.

>>> tok = train(["low lower lowest"] * 3, vocab_size=260, pattern="whitespace")
>>> [tok.vocab[i] for i in range(256, 260)]   # (o, w) beats (l, o) at 9 each: b"o" > b"l"
[b'ow', b'low', b'lowe', b'st']
"""

from __future__ import annotations

import hashlib
import platform
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bpe.count import CountStats, WordCounter, WordCounts, count_shards, release_memory
from bpe.errors import SettingsError
from bpe.merge import MergeResult, learn_merges
from bpe.pretokenize import Pretokenizer
from bpe.progress import ProgressFn
from bpe.shards import discover
from bpe.tokenizer import Tokenizer

ENGINES = ("local", "dask")


@dataclass
class Settings:
    """Everything that decides the merges (plus where the text comes from)."""

    vocab_size: int
    pattern: str = "cl100k"
    special_tokens: Sequence[str] = ()
    min_frequency: int = 1
    tie_break: str = "bytes"
    text_column: str = "text"

    def n_merges(self) -> int:
        """Merges to learn: the vocabulary minus the 256 bytes and the special tokens."""
        n = self.vocab_size - 256 - len(self.special_tokens)
        if n < 0:
            raise SettingsError(
                f"--vocab-size {self.vocab_size} is too small: the 256 byte tokens and "
                f"{len(self.special_tokens)} special token(s) need at least {256 + len(self.special_tokens)}"
            )
        return n

    def check(self) -> Pretokenizer:
        """Validate the settings; returns the pre-tokenizer they describe."""
        self.n_merges()
        if self.min_frequency < 1:
            raise SettingsError(f"--min-frequency must be at least 1, got {self.min_frequency}")
        if self.tie_break not in ("bytes", "ids"):
            raise SettingsError(f"--tie-break: expected bytes or ids, got {self.tie_break!r}")
        return Pretokenizer(self.pattern, self.special_tokens)

    def record(self, pretokenizer: Pretokenizer) -> dict:
        return {
            "vocab_size": self.vocab_size,
            "pattern": pretokenizer.name,
            "regex": pretokenizer.regex,
            "special_tokens": list(self.special_tokens),
            "min_frequency": self.min_frequency,
            "tie_break": self.tie_break,
            "text_column": self.text_column,
        }


def train(
    texts: Iterable[str] | None = None,
    vocab_size: int = 32768,
    pattern: str = "cl100k",
    special_tokens: Sequence[str] = (),
    *,
    files: str | Path | Sequence[str | Path] | None = None,
    min_frequency: int = 1,
    tie_break: str = "bytes",
    text_column: str = "text",
    engine: str = "local",
    threads: int | None = None,
    progress: ProgressFn | None = None,
    **engine_options,
) -> Tokenizer:
    """Train a byte-level BPE tokenizer on `texts` (an iterable of documents) or on `files`
    (paths, directories, globs or URLs of .parquet/.txt/.jsonl). The result carries its manifest."""
    settings = Settings(vocab_size, pattern, tuple(special_tokens), min_frequency, tie_break, text_column)
    pretokenizer = settings.check()
    if engine not in ENGINES:
        raise SettingsError(f"--engine: expected one of {', '.join(ENGINES)}, got {engine!r}")
    started = time.perf_counter()
    if files is not None:
        specs = [files] if isinstance(files, (str, Path)) else list(files)
        shards = discover([str(s) for s in specs])
        inputs = {"files": None, "shards": shards}
    else:
        if texts is None:
            raise SettingsError("give texts or files to train on")
        inputs = {"texts": texts}
    if engine == "dask":
        from bpe.dask_engine import train_on_dask

        unique_words, stats, fingerprints, merged, timings, engine_record = train_on_dask(
            settings, pretokenizer, inputs, progress=progress, threads=threads, **engine_options
        )
    else:
        if engine_options:
            raise TypeError(f"unknown options for the local engine: {', '.join(engine_options)}")
        t0 = time.perf_counter()
        counts, stats, fingerprints = _count(inputs, pretokenizer, settings, threads, progress)
        release_memory()
        t1 = time.perf_counter()
        merged = learn_merges(
            counts,
            settings.n_merges(),
            tie_break=settings.tie_break,
            min_frequency=settings.min_frequency,
            progress=None if progress is None else _merge_progress(progress, settings.n_merges()),
        )
        timings = {"count": t1 - t0, "merge": merged.seconds}
        engine_record = {"engine": "local", "threads": threads or "auto", "rounds": merged.rounds}
        unique_words = len(counts)
    tokenizer = Tokenizer(merged.merges, pattern, list(settings.special_tokens))
    tokenizer.manifest = build_manifest(
        settings, pretokenizer, stats, unique_words, merged, fingerprints, timings, engine_record
    )
    tokenizer.manifest["seconds"]["total"] = round(time.perf_counter() - started, 3)
    return tokenizer


def _count(inputs, pretokenizer, settings, threads, progress) -> tuple[WordCounts, CountStats, list[dict] | None]:
    if "shards" in inputs:
        return count_shards(inputs["shards"], pretokenizer, settings.text_column, threads, progress)
    counter = WordCounter(pretokenizer)
    batch: list[str] = []
    for text in inputs["texts"]:
        batch.append(text)
        if len(batch) >= 8192:
            counter.add_texts(batch)
            batch = []
    if batch:
        counter.add_texts(batch)
    return counter.result(), counter.stats, None


def _merge_progress(progress: ProgressFn, total: int):
    done = [0]

    def report(n: int) -> None:
        done[0] += n
        progress("merge", done[0], total)

    return report


def data_fingerprint(fingerprints: Sequence[dict]) -> str:
    """One hash for the whole input: SHA-256 over the sorted shard hashes and sizes."""
    digest = hashlib.sha256()
    for fp in sorted(fingerprints, key=lambda f: f["sha256"]):
        digest.update(f"{fp['sha256']} {fp['size']}\n".encode())
    return digest.hexdigest()


def library_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    versions = {"python": platform.python_version()}
    for name in ("bpe-trainer", "numpy", "numba", "pyarrow", "regex", "tiktoken", "dask", "distributed", "prefect"):
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            pass
    return versions


def build_manifest(
    settings: Settings,
    pretokenizer: Pretokenizer,
    stats: CountStats,
    unique_words: int,
    merged: MergeResult,
    fingerprints: list[dict] | None,
    timings: dict[str, float],
    engine_record: dict,
) -> dict:
    tokens = merged.tokens_after + sum(stats.special_tokens.values())
    n_special = len(settings.special_tokens)
    return {
        "format": 1,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "settings": settings.record(pretokenizer),
        "data": {
            "fingerprint": data_fingerprint(fingerprints) if fingerprints is not None else None,
            "shards": fingerprints if fingerprints is not None else "in-memory texts",
        },
        "counts": {
            "documents": stats.documents,
            "bytes": stats.bytes,
            "null_rows": stats.null_rows,
            "pretokens": stats.pretokens,
            "unique_words": unique_words,
            "held_out_rows": stats.held_out_rows,
            "special_tokens": stats.special_tokens,
        },
        "result": {
            "merges": len(merged.merges),
            "vocab_size": 256 + len(merged.merges) + n_special,
            "stop_reason": merged.stop_reason,
            "tokens": tokens,
            "bytes_per_token": round(stats.bytes / tokens, 4) if tokens else None,
        },
        "engine": engine_record,
        "seconds": {k: round(v, 3) for k, v in timings.items()},
        "versions": library_versions(),
    }

"""Word counts as files: what `bpe count` (`bpe.count`, in `bpe.training.trainer`) writes and
`train(counts=...)` reads, so that a corpus counted once, by us or by another engine (Spark,
DuckDB, Ray), trains without its text again.

A counts directory holds Parquet files of two columns: `word`, a pre-token's UTF-8 bytes (binary,
or a string), and `count`, how often it occurs (a positive integer). A word may appear in several
rows or files (another engine's partitions): its counts are summed. When we wrote it, the
directory also holds `counts.json`: the pattern and special tokens the text was split with, and
what counting saw. Training from the counts gives the merges training on the text gives.

    >>> import tempfile
    >>> from bpe import count
    >>> out = tempfile.mkdtemp() + "/counts"
    >>> count(["low lower lowest"], pattern="gpt2").save(out)
    >>> sorted(read_counts_dir(out).counts.to_dict().items())
    [(b' lower', 1), (b' lowest', 1), (b'low', 1)]
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from bpe import storage
from bpe.engine.count import WordCounts
from bpe.errors import InputError
from bpe.training.counting import CountStats, counts_from_arrow, write_counts_parquet

RECORD = "counts.json"  # what a counts directory we wrote says about itself
FORMAT = "bpe word counts"
COUNTS_FILE = "counts.parquet"


@dataclass
class CountedWords:
    """Pre-token counts and what they were counted with: `pattern` and `special_tokens` (None for
    counts another engine wrote without our record), `stats` what counting saw, `fingerprints`
    the files read (path, size, SHA-256: the manifest's data; none for counts made here)."""

    counts: WordCounts
    pattern: str | None
    special_tokens: tuple[str, ...] | None
    stats: CountStats
    fingerprints: list[dict] = field(default_factory=list)

    def save(self, out: str | Path, *, force: bool = False) -> None:
        """Write the counts as `OUT/counts.parquet` and `OUT/counts.json`, whole or not at all; an
        existing counts directory is kept unless `force`."""

        record = {
            "format": FORMAT,
            "pattern": self.pattern,
            "special_tokens": list(self.special_tokens or ()),
            "unique_words": len(self.counts),
            "stats": asdict(self.stats),
            "columns": {"word": "binary (a pre-token's UTF-8 bytes)", "count": "int64"},
        }

        def write(staged: Path) -> None:
            write_counts_parquet(self.counts, staged / COUNTS_FILE)
            (staged / RECORD).write_text(json.dumps(record, indent=2) + "\n")

        storage.publish_directory(
            out,
            write,
            owned=[COUNTS_FILE, RECORD],
            last=RECORD,
            kind="counts directory",
            force=force,
            replace_hint="force=True (--force) replaces it",
        )


def counts_files(counts: str | Path | Sequence[str | Path]) -> list:
    """The Parquet files (shards) of `counts`: directories (their .parquet files, sorted; hidden
    and `_` names, as Spark's `_SUCCESS`, left out), files or globs; any other file is refused."""
    from bpe.inputs.discover import discover

    found = discover([str(c) for c in counts] if isinstance(counts, (list, tuple)) else [str(counts)])
    found = [shard for shard in found if Path(shard.path).name != RECORD]
    for shard in found:
        if shard.kind != "parquet":
            raise InputError(f"{shard.path}: not a Parquet file; word counts are Parquet (`word`, `count`)")
    if not found:
        raise InputError(f"{_shown(counts)}: holds no Parquet file of word counts")
    return found


@dataclass
class CountsSource:
    """Word counts found but not read yet: their Parquet files (`shards`), and the record of the
    directory we wrote them in (None for another engine's)."""

    shards: list
    record: dict | None
    shown: str  # the counts as given, for messages

    @property
    def pattern(self) -> str | None:
        return self.record["pattern"] if self.record is not None else None

    @property
    def special_tokens(self) -> tuple[str, ...] | None:
        return tuple(self.record["special_tokens"]) if self.record is not None else None

    def stats(self, parts: Sequence[CountStats]) -> CountStats:
        """What counting saw: as recorded, or for another engine's counts the pre-tokens and bytes
        of the files' `parts`."""
        return CountStats(**self.record["stats"]) if self.record is not None else CountStats.summed(parts)


@dataclass
class CountsFile:
    """One file of word counts, read and checked: its words with duplicates summed, the pre-tokens
    and bytes they stand for, and their total as a float (an int64 overflow is refused over all)."""

    counts: WordCounts
    stats: CountStats
    total: float


def find_counts(counts: str | Path | Sequence[str | Path]) -> CountsSource:
    """The files of `counts` (`counts_files`) and their record, before any is read."""
    shards = counts_files(counts)
    return CountsSource(shards, _record([shard.path for shard in shards]), _shown(counts))


def read_counts_file(path: str) -> CountsFile:
    """One Parquet file of word counts, checked (one line naming the file and row) and summed."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        with storage.open_read(path) as f:
            table = _checked(path, pq.read_table(f))
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"{path}: not a Parquet file of word counts ({exc})") from None
    n = table.column("count")
    total = pc.sum(pc.cast(n, pa.float64(), safe=False)).as_py() or 0.0
    if total >= 2**63:
        raise InputError(f"{path}: the counts sum to more than an int64 holds")
    summed = table.group_by("word").aggregate([("count", "sum")]).rename_columns(["word", "count"])
    return CountsFile(counts_from_arrow(summed), _stats_of(table), total)


def refuse_overflow(source: CountsSource, totals: Sequence[float]) -> None:
    """Counts whose sum an int64 cannot hold would wrap in the engine: refused in one line."""
    if sum(totals) >= 2**63:
        raise InputError(f"{source.shown}: the counts sum to more than an int64 holds")


def read_counts(source: CountsSource) -> CountedWords:
    """All the files of `source`, read here, each word's counts summed across them."""
    parts = [read_counts_file(shard.path) for shard in source.shards]
    refuse_overflow(source, [part.total for part in parts])
    return CountedWords(
        WordCounts.combine([part.counts for part in parts]),
        source.pattern,
        source.special_tokens,
        source.stats([part.stats for part in parts]),
        [shard.fingerprint() for shard in source.shards],
    )


def read_counts_dir(counts: str | Path | Sequence[str | Path]) -> CountedWords:
    """The word counts in `counts` (directories, files or globs of Parquet), duplicates summed,
    with the record of a directory we wrote. Each file is checked: a `word` column of binary or
    strings, a `count` column of positive integers; anything else is one line naming the file."""
    return read_counts(find_counts(counts))


def _checked(path: str, table) -> object:
    """`table` with `word` as large binary and `count` as int64, or one line naming `path`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    missing = [name for name in ("word", "count") if name not in table.column_names]
    if missing:
        raise InputError(
            f"{path}: has no {' or '.join(repr(m) for m in missing)} column (word counts are `word`, "
            f"binary or string, and `count`, an integer; it has {', '.join(table.column_names) or 'none'})"
        )
    word, n = table.column("word"), table.column("count")
    if not (pa.types.is_binary(word.type) or pa.types.is_large_binary(word.type) or pa.types.is_string(word.type)
            or pa.types.is_large_string(word.type)):  # fmt: skip
        raise InputError(f"{path}: column 'word' is {word.type}; word counts need binary or string words")
    if not pa.types.is_integer(n.type):
        raise InputError(f"{path}: column 'count' is {n.type}; word counts need integer counts")
    if word.null_count or n.null_count:
        raise InputError(f"{path}: a row has no word or no count (null)")
    if len(n) and pc.min(n).as_py() < 1:
        row = int(np.flatnonzero(n.to_numpy(zero_copy_only=False) < 1)[0])
        raise InputError(f"{path}: row {row} counts {n[row].as_py()}; counts must be positive")
    if len(word) and pc.min(pc.binary_length(word)).as_py() == 0:
        row = int(np.flatnonzero(pc.binary_length(word).to_numpy(zero_copy_only=False) == 0)[0])
        raise InputError(f"{path}: row {row} has an empty word")
    return pa.table({"word": word.cast(pa.large_binary()), "count": n.cast(pa.int64())})


def _record(files: list[str]) -> dict | None:
    """The record (`counts.json`) of the directory the files are in, if all are in one we wrote."""
    parents = {str(Path(storage.local_path(path)).parent) if not storage.is_remote(path) else path.rsplit("/", 1)[0]
               for path in files}  # fmt: skip
    if len(parents) != 1:
        return None
    path = storage.join(parents.pop(), RECORD)
    if not storage.exists(path):
        return None
    try:
        record = json.loads(storage.read_bytes(path))
    except (ValueError, OSError) as exc:
        raise InputError(f"{path}: not a record of word counts ({exc})") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise InputError(f'{path}: not a record of word counts (no "format": "{FORMAT}")')
    return record


def _stats_of(table) -> CountStats:
    """What counts from elsewhere say of their text: pre-tokens and their bytes."""
    import pyarrow.compute as pc

    n = table.column("count")
    pretokens = int(pc.sum(n).as_py() or 0)
    text_bytes = int(pc.sum(pc.multiply(pc.binary_length(table.column("word")).cast("int64"), n)).as_py() or 0)
    return CountStats(bytes=text_bytes, pretokens=pretokens)


def _shown(counts: object) -> str:
    return ", ".join(map(str, counts)) if isinstance(counts, (list, tuple)) else str(counts)

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
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bpe import storage
from bpe.engine.count import WordCounts
from bpe.engine.errors import Spelling
from bpe.errors import InputError, SettingsError
from bpe.training.counting import CountStats, counts_from_arrow, write_counts_parquet

if TYPE_CHECKING:
    from bpe.training.settings import Settings

RECORD = "counts.json"  # what a counts directory we wrote says about itself
FORMAT = "bpe word counts"
COUNTS_FILE = "counts.parquet"
COUNTS_SUFFIX = ".parquet"  # a language's counts: CODE.parquet


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
        record = record_of(self.pattern, self.special_tokens, self.stats, len(self.counts))
        save_counts(out, {COUNTS_FILE: self.counts}, record, force)


@dataclass
class CountedLanguages:
    """Pre-token counts by language (`bpe.count(files={code: inputs})`, `bpe count --lang`): each
    language's `CountedWords`, in the order of their codes. Saved as a file per language,
    `CODE.parquet`, beside `counts.json`: trained whole, they give the merges of all the text.

        >>> import tempfile
        >>> from bpe import count
        >>> out = tempfile.mkdtemp() + "/counts"
        >>> count(texts={"eng": ["low lower"], "fra": ["le lent"]}, pattern="gpt2").save(out)
        >>> sorted(path.name for path in Path(out).iterdir())
        ['counts.json', 'eng.parquet', 'fra.parquet']
    """

    languages: dict[str, CountedWords]

    @property
    def pattern(self) -> str | None:
        return next(iter(self.languages.values())).pattern

    @property
    def special_tokens(self) -> tuple[str, ...] | None:
        return next(iter(self.languages.values())).special_tokens

    @property
    def stats(self) -> CountStats:
        return CountStats.summed([counted.stats for counted in self.languages.values()])

    def save(self, out: str | Path, *, force: bool = False) -> None:
        """Write `OUT/CODE.parquet` for each language and `OUT/counts.json`, whole or not at all; an
        existing counts directory is kept unless `force`, which also removes the language files
        its record names that these counts do not have."""
        files = {code: f"{code}{COUNTS_SUFFIX}" for code in self.languages}
        record = record_of(self.pattern, self.special_tokens, self.stats, self.unique_words)
        record["languages"] = {
            code: {"file": files[code], "unique_words": len(counted.counts), "stats": asdict(counted.stats)}
            for code, counted in self.languages.items()
        }
        save_counts(out, {files[code]: counted.counts for code, counted in self.languages.items()}, record, force)

    @property
    def unique_words(self) -> int:
        """Distinct words over the languages: each language's, summed (a word two languages share counts twice)."""
        return sum(len(counted.counts) for counted in self.languages.values())


def save_counts(out: str | Path, files: dict[str, WordCounts], record: dict, force: bool) -> None:
    """Write each of `files` (name -> counts) and `record` as `counts.json` into the counts
    directory `out`, whole or not at all; with `force`, over counts there, whose files named by
    their record go too (none is left to be summed with these)."""

    def write(staged: Path) -> None:
        for name, counts in files.items():
            write_counts_parquet(counts, staged / name)
        (staged / RECORD).write_text(json.dumps(record, indent=2) + "\n")

    storage.publish_directory(
        out,
        write,
        owned=list(dict.fromkeys([COUNTS_FILE, RECORD, *files, *recorded_files(out)])),
        last=RECORD,
        kind="counts directory",
        force=force,
        replace_hint="force=True (--force) replaces it",
    )


def record_of(pattern: str | None, special_tokens, stats: CountStats, unique_words: int) -> dict:
    """What `counts.json` says of counts: how the text was split and what counting saw."""
    return {
        "format": FORMAT,
        "pattern": pattern,
        "special_tokens": list(special_tokens or ()),
        "unique_words": unique_words,
        "stats": asdict(stats),
        "columns": {"word": "binary (a pre-token's UTF-8 bytes)", "count": "int64"},
    }


def recorded_files(out: str | Path) -> list[str]:
    """The files of counts that the counts directory `out` holds as its record names them: each
    language's, and the word buckets Dask workers wrote (none when it has no record)."""
    path = storage.join(str(out), RECORD)
    try:
        record = json.loads(storage.read_bytes(path)) if storage.exists(path) else {}
    except (ValueError, OSError):
        return []
    if not isinstance(record, dict):
        return []
    languages = record.get("languages") if isinstance(record.get("languages"), dict) else {}
    files = [entry.get("file") if isinstance(entry, dict) else None for entry in languages.values()]
    files += record.get("files") if isinstance(record.get("files"), list) else []
    return [f for f in files if isinstance(f, str) and "/" not in f and f.endswith(COUNTS_SUFFIX)]


def counts_files(counts: str | Path | Sequence[str | Path]) -> list:
    """The Parquet files (shards) of `counts`: directories (their .parquet files, sorted; hidden
    and `_` names, as Spark's `_SUCCESS`, left out), files or globs; any other file is refused."""
    from bpe.inputs.discover import discover

    found = discover([str(c) for c in counts] if isinstance(counts, (list, tuple)) else [str(counts)])
    found = [shard for shard in found if Path(shard.path).name not in (RECORD, storage.COMPLETE)]
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
    records: list[dict] = field(default_factory=list)  # of every directory we wrote among them

    @property
    def pattern(self) -> str | None:
        """The pattern the counts were split with, as their records say (None: no record)."""
        return self.records[0]["pattern"] if self.records else None

    @property
    def special_tokens(self) -> tuple[str, ...] | None:
        """The special tokens the counts were split around, as their records say (None: no record)."""
        if not self.records:
            return None
        return tuple(sorted({token for record in self.records for token in record["special_tokens"]}))

    def refuse_other_split(self, settings: Settings, fix: Callable[[Spelling], str]) -> None:
        """Counts we wrote were split with a pattern and around special tokens: training them with
        others would not give the merges of their text. `fix(spelling)` says how to take the
        counts' pattern where the caller gives one (`leave out --pattern`)."""
        if self.pattern is not None and settings.pattern != self.pattern:
            raise SettingsError(
                lambda s: (
                    f"{s.pattern}: the word counts were split with {self.pattern!r}, not {settings.pattern!r}; "
                    f"{fix(s)} or count the text again with it"
                ),
                parameter="pattern",
            )
        missing = sorted(set(self.special_tokens or ()) - set(settings.special_tokens))
        if missing:
            shown = ", ".join(missing)
            raise SettingsError(
                lambda s: (
                    f"{s.special_tokens}: the word counts were split around {shown} too; give "
                    f"{'them' if len(missing) > 1 else 'it'} as special tokens, or count the text again without"
                ),
                parameter="special_tokens",
            )

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
    paths = [shard.path for shard in shards]
    records = _records(paths)
    by_pattern = {record["pattern"]: where for where, record in records.items()}
    if len(by_pattern) > 1:
        (one, first), (other, second) = list(by_pattern.items())[:2]
        raise InputError(
            f"{first} and {second}: the word counts were split with different patterns ({one!r}, {other!r}); "
            "train on counts of one split"
        )
    whole = next(iter(records.values())) if len(records) == 1 and len(_parents(paths)) == 1 else None
    return CountsSource(shards, whole, _shown(counts), list(records.values()))


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


def _parents(paths: list[str]) -> set[str]:
    """The directories (or prefixes) the files `paths` are in."""
    return {str(Path(storage.local_path(path)).parent) if not storage.is_remote(path) else path.rsplit("/", 1)[0]
            for path in paths}  # fmt: skip


def _records(files: list[str]) -> dict[str, dict]:
    """The record (`counts.json`) of each directory the files are in that we wrote, by its path."""
    found = {}
    for parent in sorted(_parents(files)):
        path = storage.join(parent, RECORD)
        if not storage.exists(path):
            continue
        try:
            record = json.loads(storage.read_bytes(path))
        except (ValueError, OSError) as exc:
            raise InputError(f"{path}: not a record of word counts ({exc})") from None
        if not isinstance(record, dict) or record.get("format") != FORMAT:
            raise InputError(f'{path}: not a record of word counts (no "format": "{FORMAT}")')
        found[path] = record
    return found


def _stats_of(table) -> CountStats:
    """What counts from elsewhere say of their text: pre-tokens and their bytes."""
    import pyarrow.compute as pc

    n = table.column("count")
    pretokens = int(pc.sum(n).as_py() or 0)
    text_bytes = int(pc.sum(pc.multiply(pc.binary_length(table.column("word")).cast("int64"), n)).as_py() or 0)
    return CountStats(bytes=text_bytes, pretokens=pretokens)


def _shown(counts: object) -> str:
    return ", ".join(map(str, counts)) if isinstance(counts, (list, tuple)) else str(counts)

"""Training end to end: shards -> counts -> merges -> a Tokenizer with its manifest.

>>> tok = train(["low lower lowest"] * 3, vocab_size=260, pattern="whitespace")
>>> [tok.vocab[i] for i in range(256, 260)]   # (o, w) beats (l, o) at 9 each: b"o" > b"l"
[b'ow', b'low', b'lowe', b'st']
"""

from __future__ import annotations

import contextlib
import hashlib
import platform
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path

from bpe.counting import CountStats, WordCounter, count_shards
from bpe.engine.compilation import CompileWatch
from bpe.engine.cores import available_cores
from bpe.engine.count import WordCounts, release_memory
from bpe.engine.merge import learn_merges
from bpe.engine.replay import BaseMerges
from bpe.errors import InputError, SettingsError, StoppedEarly, require_extra
from bpe.extend import Base, base_settings, load_base, trained_tokenizer
from bpe.inputs.discover import Skipped, discover
from bpe.inputs.documents import iter_texts
from bpe.inputs.read import apply_limit
from bpe.inputs.shard import Shard, with_options
from bpe.long_tokens import LongTokensWarning, long_tokens
from bpe.manifest import Counts, DataRecord, EngineRecord, Manifest, Result, Seconds, SettingsRecord, SuperwordsRecord
from bpe.pretokenize import SUPERWORD_PATTERN
from bpe.progress import Bars, PhaseClock, ProgressFn, at_most
from bpe.results import TrainingRun
from bpe.roles import with_role_tokens
from bpe.schema import FROM_BASE, On, check, check_all, on, parse_limit
from bpe.settings import Settings
from bpe.superwords import stage_progress, train_in_stages
from bpe.tokenizer import Tokenizer


def train(
    texts: Iterable[str] | None = None,
    vocab_size: int = 32768,
    pattern: str | None = None,
    special_tokens: Sequence[str] = (),
    *,
    base: Tokenizer | str | Path | Base | None = None,
    special_token_roles: dict[str, str] | None = None,
    model_max_length: int | None = None,
    files: str | Path | Sequence[str | Path] | None = None,
    min_frequency: int = 1,
    tie_break: str = "bytes",
    max_token_length: int | None = None,
    text_column: str = "text",
    text_format: str = "doc",
    limit: str | None = None,
    sample: float | None = None,
    seed: int = 0,
    superwords: bool = False,
    transition: int | None = None,
    superword_pattern: str = SUPERWORD_PATTERN,
    max_words: int | None = 4,
    colon_space: bool = False,
    engine: str = "local",
    threads: int | None = None,
    scheduler: str | None = None,
    workers: int | None = None,
    scratch: str | None = None,
    progress: ProgressFn | bool | None = None,
    **engine_options,
) -> Tokenizer:
    """Train a byte-level BPE tokenizer on `texts` or on `files`. The result carries its manifest.

    `pattern`: a name (`cl100k` unless given) or a regex. `base`: a tokenizer to start from (a
    Tokenizer, or a path or URL `Tokenizer.load` reads: our directories, GPT-2's vocab.json +
    merges.txt, a byte-level BPE tokenizer.json, tiktoken ranks, read with `pattern`), recorded
    in the manifest as given (a path, a URL, or "a Tokenizer"): its merges are replayed on the
    words first, in its order, then training goes on to `vocab_size`, which counts the base's
    tokens. Base tokens keep their ids, new ones take the ids after the base's largest; the
    pattern, special tokens, roles and model_max_length are the base's unless given (special
    tokens given are added to the base's). See `bpe.extend`.

    `texts`: an iterable of documents (str, None for a null row), of dicts (rows: the text in their
    `text_column` field), or a Hugging Face `datasets.Dataset`/`IterableDataset` (read in batches);
    a bare str is refused. `files`: paths, directories, globs, URLs or "-" (stdin) of .parquet,
    .jsonl, .json, .csv/.tsv or any other (text) file, compressed or not (.gz, .zst, .bz2, .xz);
    `text_format` "doc" reads a text file as one document, "lines" as one per line (see bpe.inputs.readers).
    `limit` ("10MB", "5000rows") trains on the first documents only and `sample` on a fraction of
    them, chosen by a hash of each with `seed`; both for quick runs, recorded in the manifest.

    `special_token_roles` (`{"eos": "<|endoftext|>", "pad": "<|pad|>"}`) names the special tokens
    transformers uses as bos, eos, pad and unk (written to tokenizer_config.json by `save`); a
    role's token missing from `special_tokens` is added after them, within `vocab_size`.
    `model_max_length` (tokens) is what transformers truncates to, written there too.
    `max_token_length` (bytes, as Hugging Face's `BpeTrainer(max_token_length=...)`): no merge
    makes a longer token; a pair that would is skipped and the next best one merged. None: no limit.
    A run that makes tokens over 1,024 bytes (text with no break for the pattern) warns
    (`bpe.long_tokens.LongTokensWarning`): a cap is then usually wanted.

    `superwords=True` trains a superword tokenizer (SuperBPE, see `bpe.superwords`): ordinary BPE
    until the vocabulary holds `transition` tokens (special tokens aside), then merges across words
    with the text split by `superword_pattern` (`superbpe`, the paper's, or a regex whose matches
    and the text between them are the pieces), each new token holding at most `max_words` words
    and, unless `colon_space`, no ": ". The tokenizer splits text with that pattern.

    `progress=True` shows progress bars (tqdm: a widget in Jupyter, text on stderr elsewhere) for
    counting, in bytes of text, and for the merge loop, in merges; False or None shows nothing; a
    callable gets `progress(phase, done, total)` calls instead (see `bpe.progress`).

    `engine="dask"` (the `[dask]` extra) runs on the cluster at `scheduler` (a local one of `workers`
    processes without it), keeping word buckets and checkpoints in `scratch`; it also takes
    `client=` (a dask.distributed Client) and `log=` (a function of a line).

    Every setting is declared, with its check and default, in `bpe.schema`."""
    given = {name: value for name, value in locals().items() if name in TRAIN_SETTINGS}
    check("vocab_size", vocab_size)
    if isinstance(special_tokens, str):  # adding the role tokens would make it its characters
        check("special_tokens", special_tokens)
    special_tokens = with_role_tokens(special_tokens, special_token_roles)
    start = load_base(base, pattern) if base is not None else None
    started_from = {"pattern": pattern, "special_tokens": tuple(special_tokens)}
    if start is not None:
        started_from = base_settings(start, vocab_size, special_tokens, pattern)
    settings = Settings(**{name: given[name] for name in MERGE_SETTINGS}, **started_from)
    check_all({name: given[name] for name in CHECKED_HERE})
    if engine != "dask" and (scheduler, workers, scratch) != (None, None, None):
        raise SettingsError(
            lambda s: (
                f"{s.scheduler}, {s.workers} and {s.scratch} are for the dask engine ({s.given('engine', 'dask')})"
            ),
            parameter="engine",
        )
    progress, bars = _progress(progress)
    started = time.perf_counter()
    limited = parse_limit(limit) if limit is not None else None
    if progress is not None and limited is not None and limited[0] == "bytes":
        progress = at_most(progress, "count", limited[1])  # the text counted cannot be more
    rows = None  # documents in `texts`, when known: the count bar's total is estimated from them
    if files is not None:
        specs = [files] if isinstance(files, (str, Path, Shard)) else list(files)
        skipped = Skipped()
        shards: list[Shard] | None = discover([s if isinstance(s, Shard) else str(s) for s in specs], skipped)
        if skipped:
            warnings.warn(skipped.summary(), stacklevel=2)
        shards = with_options(shards, text_format, sample, seed)
        if limited is not None:
            shards = apply_limit(shards, limited, text_column, settings.pretokenizer)
    elif texts is None:
        raise SettingsError("texts: give texts or files to train on", parameter="texts")
    else:
        shards = None
        if sample is None and limited is None:
            with contextlib.suppress(TypeError):  # a generator or an IterableDataset: not known
                rows = len(texts)
    if settings.superwords and texts is not None and iter(texts) is texts:
        texts = list(texts)  # read once per stage: a generator is kept for the second

    def run_stage(stage: Settings, replayed: BaseMerges | None) -> TrainingRun:
        """One run of the engine with a stage's settings (the whole run unless superwords)."""
        reported = stage_progress(progress, stage)
        if engine == "dask":
            require_extra("dask", "the Dask engine")
            from bpe.distributed.driver import train_on_dask

            return train_on_dask(
                stage,
                shards,
                documents(),
                progress=reported,
                threads=threads,
                base=replayed,
                scheduler=scheduler,
                workers=workers,
                scratch=scratch,
                **engine_options,
            )
        if engine_options:
            raise TypeError(f"unknown options for the local engine: {', '.join(engine_options)}")
        return train_locally(stage, shards, documents(), threads=threads, progress=reported, rows=rows, base=replayed)

    def documents() -> Iterable | None:
        return None if texts is None else iter_texts(texts, text_column, sample, seed, limited)

    try:
        run = train_in_stages(settings, run_stage, start.merges if start is not None else None)
    finally:
        if bars is not None:
            bars.finish()
    if run.stats.pretokens == 0:  # nothing was learnt: a 256-token tokenizer would hide a wrong input
        paths = [s.path for s in shards] if shards is not None else ["texts"]
        named = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
        raise InputError(
            f"{named}: no text to train on (no pre-token in {run.stats.documents:,} document(s); "
            f"{run.stats.null_rows:,} null row(s) skipped)"
        )
    tokenizer = trained_tokenizer(
        run.merges.merges,
        settings,
        start,
        special_token_roles=special_token_roles,
        model_max_length=model_max_length,
    )
    tokenizer.manifest = build_manifest(settings, run, started, start)
    if (why := stopped_early(tokenizer.manifest)) is not None:
        warnings.warn(why, StoppedEarly, stacklevel=2)
    made = long_tokens(tokenizer.vocab[256 + settings.base_merges :])
    if made is not None:
        warnings.warn(LongTokensWarning(made.message("max_token_length")), stacklevel=2)
    return tokenizer


# train()'s parameters that are settings (bpe.schema): those Settings holds and checks (a base sets
# some: FROM_BASE), those checked where they are read (the base, the files, the roles), and the rest,
# checked by train() itself.
TRAIN_SETTINGS = {setting.name for setting in on(On.TRAIN)}
MERGE_SETTINGS = tuple(s.name for s in on(On.TRAIN | On.SETTINGS) if s.name not in FROM_BASE)
CHECKED_WHEN_READ = ("base", "files", "special_token_roles")
CHECKED_HERE = tuple(s.name for s in on(On.TRAIN) if On.SETTINGS not in s.on and s.name not in CHECKED_WHEN_READ)


def stopped_early(manifest: Manifest, name: Callable[[str], str] = str) -> str | None:
    """Why a run stopped below its vocabulary size, in one line, when no setting asked it to: pairs
    ran out, or only pairs that `max_token_length` or the superword rules refuse were left; None
    otherwise. `name` spells a setting as the caller does (the command: its flag)."""
    result, settings = manifest.result, manifest.settings
    if result.stop_reason == "no_pairs":
        why = "pairs ran out"
    elif result.stop_reason == "max_token_length":
        why = f"only pairs too long for {name('max_token_length')} were left"
    elif result.stop_reason == "superword_rules":
        rules = [] if settings.max_words is None else [f"at most {settings.max_words} word(s) by {name('max_words')}"]
        rules += [] if settings.colon_space else [f'no ": " without {name("colon_space")}']
        why = f"only pairs that the superword rules refuse ({', '.join(rules)}) were left"
    else:
        return None
    return f"{why} after {result.merges:,} merges; the vocabulary is smaller than asked"


def train_locally(
    settings: Settings,
    shards: Sequence[Shard] | None,
    texts: Iterable[str] | None,
    threads: int | None = None,
    progress: ProgressFn | None = None,
    rows: int | None = None,
    base: BaseMerges | None = None,
) -> TrainingRun:
    """The local engine: count on threads, then learn the merges in this process (after replaying
    `base`'s). `seconds` holds `merge_loop`, the merge loop's own time (as its progress bar
    measures it), within `merge`."""
    t0 = time.perf_counter()
    with CompileWatch() as counting_compiles:
        if shards is not None:
            pretokenizer, column = settings.pretokenizer, settings.text_column
            counts, stats, fingerprints = count_shards(shards, pretokenizer, column, threads, progress)
        else:
            counts, stats = _count_texts(texts or (), settings, progress, rows)
            fingerprints = None
    release_memory()
    t1 = time.perf_counter()
    with CompileWatch() as merging_compiles:
        merge_threads = threads or merge_threads_for(len(counts))
        loop = PhaseClock(progress, compiling=lambda: merging_compiles.seconds)
        merged = learn_merges(
            counts,
            settings.n_merges(),
            tie_break=settings.tie_break,
            min_frequency=settings.min_frequency,
            progress=_merge_progress(loop, settings.n_merges()),
            threads=merge_threads,
            max_token_length=settings.max_token_length,
            superwords=settings.superword_rules,
            base=base,
        )
    merging = time.perf_counter() - t1  # the queue is made before learn_merges starts its clock: time it all here
    compiling = counting_compiles.seconds + merging_compiles.seconds  # the first run of a version only
    return TrainingRun(
        stats=stats,
        unique_words=len(counts),
        merges=merged,
        fingerprints=fingerprints,
        seconds={
            "compile": compiling,
            "count": t1 - t0 - counting_compiles.seconds,
            "merge": max(merging - merging_compiles.seconds, 0.0),
            "merge_loop": loop.seconds("merge"),
        },
        engine={
            "engine": "local",
            "threads": threads or "auto",
            "merge_threads": merge_threads,
            "rounds": merged.rounds,
        },
    )


# Below this many unique words a round's work is too small to share: handing it to another thread
# costs more than it saves. Measured on slices of the English corpus, 2 cores, threads that spin
# between rounds: 2,000 words 1.2x slower on 2 threads, 10,000 words 1.1x faster, 100,000 1.6x.
THREADED_MERGE_MIN_WORDS = 10_000


def merge_threads_for(unique_words: int) -> int:
    """Threads for the merge loop when the user did not choose: the cores available, for a word
    table large enough to gain from them."""
    return available_cores() if unique_words >= THREADED_MERGE_MIN_WORDS else 1


def _count_texts(
    texts: Iterable[str], settings: Settings, progress: ProgressFn | None = None, rows: int | None = None
) -> tuple[WordCounts, CountStats]:
    """Count in-memory documents a batch at a time, reporting the text bytes counted, of a total
    estimated from the documents seen of `rows` (None when not known)."""
    counter = WordCounter(settings.pretokenizer)
    if progress is not None:
        progress("count", 0, None)
    documents = iter(texts)
    first_row = 0
    while batch := list(islice(documents, 8192)):
        counter.add_texts(batch, first_row)
        first_row += len(batch)
        if progress is not None:
            seen, counted = counter.stats.documents + counter.stats.null_rows, counter.stats.bytes
            progress("count", counted, max(counted, round(counted * rows / seen)) if rows and seen else None)
    if progress is not None:
        progress("count", counter.stats.bytes, counter.stats.bytes)
    return counter.result(), counter.stats


def _progress(progress: ProgressFn | bool | None) -> tuple[ProgressFn | None, Bars | None]:
    """What `train(progress=...)` reports to, and the bars to finish at the end (for True)."""
    if progress is True:
        bars = Bars(force=True)  # asked for: drawn in a notebook or a pipe too
        return bars, bars
    if progress is None or progress is False:
        return None, None
    if not callable(progress):
        raise SettingsError(
            f"progress: expected True, False, None or a callable progress(phase, done, total), got {progress!r}",
            parameter="progress",
        )
    return progress, None


def _merge_progress(progress: ProgressFn, total: int):
    """learn_merges's callback (merges just made; 0 as the loop starts) as progress("merge", done, total)."""
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


def build_manifest(settings: Settings, run: TrainingRun, started: float, base: Base | None = None) -> Manifest:
    """The manifest of a trained tokenizer: settings, base, data, counts, result, engine, time and
    library versions. Its `seconds.total` is the run's, from `started` (`time.perf_counter()` when
    it began) to now: the one place it is set (`save` adds the export time to it)."""
    merged, stats = run.merges, run.stats
    versions = library_versions()
    tokens = merged.tokens_after + sum(stats.special_tokens.values())
    merges = settings.base_merges + len(merged.merges)
    return Manifest(
        format=1,
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        settings=SettingsRecord(**settings.record()),
        data=DataRecord(
            fingerprint=data_fingerprint(run.fingerprints) if run.fingerprints is not None else None,
            shards=run.fingerprints if run.fingerprints is not None else "in-memory texts",
        ),
        counts=Counts(
            documents=stats.documents,
            bytes=stats.bytes,
            null_rows=stats.null_rows,
            pretokens=stats.pretokens,
            unique_words=run.unique_words,
            held_out_rows=stats.held_out_rows,
            special_tokens=stats.special_tokens,
        ),
        result=Result(
            merges=merges,
            vocab_size=settings.byte_tokens + merges + len(settings.special_tokens),
            stop_reason=merged.stop_reason,
            tokens=tokens,
            bytes_per_token=round(stats.bytes / tokens, 4) if tokens else None,
            new_merges=len(merged.merges) if base is not None else None,
        ),
        engine=EngineRecord.from_json(run.engine),
        seconds=Seconds.measured(run.seconds, time.perf_counter() - started),
        versions=versions,
        base=base.record() if base is not None else None,
        superwords=SuperwordsRecord(settings.transition, run.stages) if run.stages is not None else None,
    )

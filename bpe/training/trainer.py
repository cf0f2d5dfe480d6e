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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING

from bpe.engine.compilation import CompileWatch
from bpe.engine.cores import BusyCores, available_cores
from bpe.engine.resident import READER, release_code, release_memory
from bpe.errors import InputError, SettingsError, SkippedInputs, StoppedEarly, require_extra
from bpe.formats.roles import with_role_tokens
from bpe.inputs.discover import Skipped, discover
from bpe.inputs.shard import Shard, with_options
from bpe.languages.codes import language_error
from bpe.manifest import (
    Counts,
    DataRecord,
    EngineRecord,
    Manifest,
    Result,
    Seconds,
    SettingsRecord,
    SuperwordsRecord,
)
from bpe.progress import Bars, PhaseClock, ProgressFn, at_most, say_of
from bpe.schema import DEFAULT, FROM_BASE, LANGUAGE_SETTINGS, On, check, check_all, on, parse_limit
from bpe.tokenizer import Tokenizer
from bpe.training.counting import CountStats, ShardReader, WordCounter, count_shards, counting_threads
from bpe.training.extend import Base, base_settings, load_base, trained_tokenizer
from bpe.training.long_tokens import LongTokensWarning, long_tokens
from bpe.training.plan import LanguagePlan, refuse_without_languages
from bpe.training.results import STOPPED_SHORT, TrainingRun, why_stopped
from bpe.training.settings import Settings
from bpe.training.superwords import stage_progress, train_in_stages
from bpe.training.warm import Compiled, compile_ahead, groups_for, groups_of_run

if TYPE_CHECKING:  # the compiled engine is imported by the runs that use it (see `bpe.training.small_corpus`)
    from bpe.engine.count import WordCounts
    from bpe.engine.replay import BaseMerges
    from bpe.training.counts_files import CountedLanguages, CountedWords, CountsSource


def train(
    texts: Iterable[str] | Mapping[str, Iterable[str]] | None = None,
    vocab_size: int = DEFAULT["vocab_size"],
    pattern: str | None = None,
    special_tokens: Sequence[str] = DEFAULT["special_tokens"],
    *,
    base: Tokenizer | str | Path | Base | None = None,
    special_token_roles: dict[str, str] | None = None,
    model_max_length: int | None = None,
    files: str | Path | Sequence[str | Path] | Mapping[str, str | Path | Sequence[str | Path]] | None = None,
    counts: str | Path | Sequence[str | Path] | None = None,
    min_frequency: int = DEFAULT["min_frequency"],
    tie_break: str = DEFAULT["tie_break"],
    max_token_length: int | None = None,
    text_column: str = DEFAULT["text_column"],
    text_format: str = DEFAULT["text_format"],
    limit: str | None = None,
    sample: float | None = None,
    seed: int = DEFAULT["seed"],
    superwords: bool = DEFAULT["superwords"],
    transition: int | None = None,
    superword_pattern: str = DEFAULT["superword_pattern"],
    max_words: int | None = DEFAULT["max_words"],
    colon_space: bool = DEFAULT["colon_space"],
    lang_dir: str | Path | None = None,
    mix: str | dict[str, float] | None = None,
    parity: bool = DEFAULT["parity"],
    parity_dev: str | None = None,
    parity_ratio: str | dict[str, float] | None = None,
    global_merges: int = DEFAULT["global_merges"],
    parity_variant: str = DEFAULT["parity_variant"],
    parity_window: int = DEFAULT["parity_window"],
    parity_alpha: float = DEFAULT["parity_alpha"],
    engine: str = DEFAULT["engine"],
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
    tokens given are added to the base's). See `bpe.training.extend`.

    `texts`: an iterable of documents (str, None for a null row), of dicts (rows: the text in their
    `text_column` field), or a Hugging Face `datasets.Dataset`/`IterableDataset` (read in batches);
    a bare str is refused. `files`: paths, directories, globs, URLs or "-" (stdin) of .parquet,
    .jsonl, .json, .csv/.tsv or any other (text) file, compressed or not (.gz, .zst, .bz2, .xz);
    `text_format` "doc" reads a text file as one document, "lines" as one per line (see bpe.inputs.readers).
    `counts`: word counts instead of text (Parquet of `word` and `count`, as `bpe.count(...).save(DIR)`
    writes them or another engine does; see `bpe.training.counts_files`): the same merges as the
    text they were counted from, with the pattern and special tokens recorded beside them unless given.
    `limit` ("10MB", "5000rows") trains on the first documents only and `sample` on a fraction of
    them, chosen by a hash of each with `seed`; both for quick runs, recorded in the manifest.

    `special_token_roles` (`{"eos": "<|endoftext|>", "pad": "<|pad|>"}`) names the special tokens
    transformers uses as bos, eos, pad and unk (written to tokenizer_config.json by `save`); a
    role's token missing from `special_tokens` is added after them, within `vocab_size`.
    `model_max_length` (tokens) is what transformers truncates to, written there too.
    `max_token_length` (bytes, as Hugging Face's `BpeTrainer(max_token_length=...)`): no merge
    makes a longer token; a pair that would is skipped and the next best one merged. None: no limit.
    A run that makes tokens over 1,024 bytes (text with no break for the pattern) warns
    (`bpe.training.long_tokens.LongTokensWarning`): a cap is then usually wanted.

    Text by language (see `bpe.training.plan`): `files={"eng": "data/en/", "hin": [...]}` or
    `texts={"eng": [...], "hin": [...]}`, keyed by language codes (`eng`, `hin`: ISO 639-3, or any
    lower-case code), each language counted apart and held in the order of the codes; or
    `lang_dir="ud/"`, a directory holding a file or folder per language named by its code
    (`eng.parquet`, `hin/`; other names such as README.md are skipped), instead of either. `mix` weighs
    the languages (`"temperature=0.3"`: each as its bytes to the power 0.3; `"eng=1,hin=4"`: hin's
    words count four times), exactly, by multiplying word counts by integers (see `bpe.languages.mixture`).
    `parity=True` (or a `parity_dev` directory of parallel text, `<code>.txt` or `<code>.parquet`,
    or `parity_ratio` targets such as `"eng=1,hin=2.5"`) makes each merge serve one language, the
    one whose dev text is the longest in tokens (Foroutan et al. 2025, as Hugging Face's
    `ParityBpeTrainer`), after `global_merges` ordinary ones; `parity_variant="window"` skips a
    language that served more than `parity_alpha / languages` of the last `parity_window` merges.
    Limits (`limit`, `sample`) apply to each language. Parity cannot make superwords.

    `superwords=True` trains a superword tokenizer (SuperBPE, see `bpe.training.superwords`): ordinary BPE
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
    busy = BusyCores()  # other processes' load, over the run's start (for the threads it chooses)
    given = {  # the settings by name (bpe.schema), as the caller gave them
        "vocab_size": vocab_size,
        "pattern": pattern,
        "special_tokens": special_tokens,
        "base": base,
        "special_token_roles": special_token_roles,
        "model_max_length": model_max_length,
        "files": files,
        "counts": counts,
        "min_frequency": min_frequency,
        "tie_break": tie_break,
        "max_token_length": max_token_length,
        "text_column": text_column,
        "text_format": text_format,
        "limit": limit,
        "sample": sample,
        "seed": seed,
        "superwords": superwords,
        "transition": transition,
        "superword_pattern": superword_pattern,
        "max_words": max_words,
        "colon_space": colon_space,
        "lang_dir": lang_dir,
        "mix": mix,
        "parity": parity,
        "parity_dev": parity_dev,
        "parity_ratio": parity_ratio,
        "global_merges": global_merges,
        "parity_variant": parity_variant,
        "parity_window": parity_window,
        "parity_alpha": parity_alpha,
        "engine": engine,
        "threads": threads,
        "scheduler": scheduler,
        "workers": workers,
        "scratch": scratch,
    }
    check("vocab_size", vocab_size)
    counted = None
    if counts is not None:
        counted = _counted(given, texts)
        pattern = pattern if pattern is not None else counted.pattern
        if counted.special_tokens and not special_tokens:
            special_tokens = list(counted.special_tokens)
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
    say = say_of(progress)  # where compiling the kernels on a machine's first run is said
    started = time.perf_counter()
    limited = parse_limit(limit) if limit is not None else None
    if progress is not None and limited is not None and limited[0] == "bytes":
        progress = at_most(progress, "count", limited[1])  # the text counted cannot be more
    languages = {name: given[name] for name in LANGUAGE_SETTINGS}
    reading = Reading(text_format, sample, seed, limited)
    if counted is not None:
        counted.refuse_other_split(settings, lambda s: f"leave out {s.pattern}")
        inputs = TrainingInputs(None, None, None)
    else:
        inputs = _inputs(files, texts, lang_dir, settings, languages, reading)
    if inputs.skipped:
        warnings.warn(inputs.skipped, SkippedInputs, stacklevel=2)
    shards, texts, plan = inputs.shards, inputs.texts, inputs.plan

    def run_stage(stage: Settings, replayed: BaseMerges | None) -> TrainingRun:
        """One run of the engine with a stage's settings (the whole run unless superwords)."""
        reported = stage_progress(progress, stage)
        if counted is not None and engine != "dask":
            from bpe.training.counts_files import read_counts

            return train_locally(stage, None, None, threads=threads, progress=reported, base=replayed, say=say,
                                 counted=read_counts(counted), busy=busy)  # fmt: skip
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
                say=say,
                **({"languages": plan} if plan is not None else {}),
                **({"counts": counted} if counted is not None else {}),
                **engine_options,
            )
        if engine_options:
            raise TypeError(f"unknown options for the local engine: {', '.join(engine_options)}")
        return train_locally(
            stage,
            shards,
            documents(),
            threads=threads,
            progress=reported,
            rows=inputs.rows,
            base=replayed,
            languages=plan,
            input_bytes=inputs.input_bytes,
            say=say,
            busy=busy,
        )

    def documents() -> Iterable | list[Iterable] | None:
        if texts is None:
            return None
        if plan is not None:  # one iterable of documents per language, in the order of the codes
            return [reading.documents(t, text_column) for t in texts]
        return reading.documents(texts, text_column)

    try:
        run = train_in_stages(settings, run_stage, start.merges if start is not None else None)
    finally:
        if bars is not None:
            bars.finish()
    refuse_nothing_learnt(run, inputs)
    tokenizer = trained_tokenizer(
        run.merges.merges,
        settings,
        start,
        special_token_roles=special_token_roles,
        model_max_length=model_max_length,
    )
    tokenizer.manifest = build_manifest(settings, run, started, start, plan)
    if (why := stopped_early(tokenizer.manifest)) is not None:
        warnings.warn(why, StoppedEarly, stacklevel=2)
    made = long_tokens(tokenizer.vocab[256 + settings.base_merges :])
    if made is not None:
        warnings.warn(LongTokensWarning(made.message("max_token_length")), stacklevel=2)
    return tokenizer


def count(
    texts: Iterable[str] | Mapping[str, Iterable[str]] | None = None,
    *,
    files: str | Path | Sequence[str | Path] | Mapping[str, str | Path | Sequence[str | Path]] | None = None,
    lang_dir: str | Path | None = None,
    pattern: str | None = None,
    special_tokens: Sequence[str] = DEFAULT["special_tokens"],
    text_column: str = DEFAULT["text_column"],
    text_format: str = DEFAULT["text_format"],
    limit: str | None = None,
    sample: float | None = None,
    seed: int = DEFAULT["seed"],
    threads: int | None = None,
    progress: ProgressFn | bool | None = None,
    engine: str = DEFAULT["engine"],
    scheduler: str | None = None,
    workers: int | None = None,
    out: str | Path | None = None,
    force: bool = False,
) -> CountedWords | CountedLanguages | CountsSource:
    """Count the pre-tokens of `texts` or `files` as `train()` counts them before learning merges
    (the same inputs, pattern and special tokens; see its docstring), and learn none: `.save(DIR)`
    writes them for `train(counts=DIR)`, here or on another machine. Text by language (`files`
    or `texts` as a mapping of language code -> inputs, or `lang_dir`) is counted a language at a
    time, into `CountedLanguages`: saved, a file per language.

    With `engine="dask"` the Dask workers count `files` and write the word buckets they sum into
    `out` themselves (`bpe.distributed.counts_out`): no process holds every word. It returns
    the counts found there (`CountsSource`), for `train(counts=out)`."""
    from bpe.training.counts_files import CountedLanguages, CountedWords

    busy = BusyCores()  # other processes' load, over the start (for the threads it chooses)
    check("engine", engine)
    if engine != "dask" and (scheduler, workers, out) != (None, None, None):
        raise SettingsError(
            lambda s: f"{s.scheduler}, {s.workers} and out are for the dask engine ({s.given('engine', 'dask')})",
            parameter="engine",
        )
    if lang_dir is not None:
        files = _from_directory(str(lang_dir), files, texts)
    by_language = isinstance(files, Mapping) or (files is None and isinstance(texts, Mapping))
    if engine == "dask" and (by_language or files is None):
        raise SettingsError(
            lambda s: (
                f"{s.given('engine', 'dask')}: its workers count files, not texts or text by language; give {s.files}"
            ),
            parameter="engine",
        )
    if engine == "dask" and out is None:
        raise SettingsError("out: required with the dask engine: the workers write the counts there", parameter="out")
    if by_language:
        from bpe.languages.codes import by_language as checked

        name = "files" if files is not None else "texts"
        given = checked(files if files is not None else texts, name)
        options = {"pattern": pattern, "special_tokens": special_tokens, "text_column": text_column,
                   "text_format": text_format, "limit": limit, "sample": sample, "seed": seed, "threads": threads,
                   "progress": progress}  # fmt: skip
        return CountedLanguages({code: count(**{name: inputs}, **options) for code, inputs in given.items()})

    settings = Settings(vocab_size=1 << 16, pattern=pattern, special_tokens=tuple(special_tokens),
                        text_column=text_column)  # fmt: skip
    reading = Reading(text_format, sample, seed, parse_limit(limit) if limit is not None else None)
    skipped = Skipped()
    inputs = _one_text(files, texts, settings, reading, skipped)
    if skipped:
        warnings.warn(skipped.summary(), SkippedInputs, stacklevel=2)
    progress, bars = _progress(progress)
    try:
        if engine == "dask":
            require_extra("dask", "the Dask engine")
            from bpe.distributed.counts_out import count_to_files

            return count_to_files(settings, inputs.shards, out, force=force, scheduler=scheduler, workers=workers,
                                  progress=progress)  # fmt: skip
        counts, stats = count_text(settings, inputs, reading, threads, progress, say_of(progress), busy)
    finally:
        if bars is not None:
            bars.finish()
    return CountedWords(counts, settings.pattern, settings.special_tokens, stats)


# The settings that choose or cut text, which word counts have no more of.
TEXT_SETTINGS = ("files", "lang_dir", "limit", "sample", "superwords", "mix", "parity", "parity_dev", "parity_ratio")


def _counted(given: dict, texts: object) -> CountsSource:
    """The word counts `given["counts"]` names, found (`bpe.training.counts_files`; each engine
    reads them where it counts); refused beside text, or a setting that needs it, in one line."""
    from bpe.training.counts_files import find_counts

    needs_text = [name for name in TEXT_SETTINGS if given[name] not in (None, False)]
    if texts is not None or needs_text:
        name = "texts" if texts is not None else needs_text[0]
        raise SettingsError(
            lambda s: f"{s.counts}: trains on word counts, which hold no text; leave out {s(name)}",
            parameter="counts",
        )
    return find_counts(given["counts"])


@dataclass
class TrainingInputs:
    """What `train()` trains on, found and checked before any text is counted: `shards` (a list,
    or a list per language) or `texts` (an iterable of documents, or one per language), the
    multilingual `plan` (None: one text), and for texts given as a list their `rows` and
    `input_bytes` when known (the count bar's total; the small-corpus path). `skipped` says what
    finding the files passed over (train() warns it)."""

    shards: list | None
    texts: object | None
    plan: LanguagePlan | None
    rows: int | None = None
    input_bytes: int | None = None
    skipped: str | None = None


@dataclass(frozen=True)
class Reading:
    """How each input is read: `text_format`, a `sample` of its documents chosen with `seed`, and
    at most `limited` of them (("rows" | "bytes", n)); by language, each language's."""

    text_format: str
    sample: float | None
    seed: int
    limited: tuple[str, int] | None

    def shards(self, specs: object, skipped: Skipped, settings: Settings) -> list[Shard]:
        """The shards `specs` (a path, a Shard or a list of them) name, read this way, each Parquet
        file checked for its text column before anything is counted."""
        specs = [specs] if isinstance(specs, (str, Path, Shard)) else list(specs)
        found = discover([s if isinstance(s, Shard) else str(s) for s in specs], skipped)
        for shard in found:
            if shard.kind == "parquet":
                from bpe.inputs.readers import check_parquet  # pyarrow: loaded for Parquet inputs only

                check_parquet(shard, settings.text_column)
        found = with_options(found, self.text_format, self.sample, self.seed)
        if self.limited is not None:
            from bpe.inputs.read import apply_limit

            found = apply_limit(found, self.limited, settings.text_column, settings.pretokenizer)
        return found

    def documents(self, texts: object, text_column: str) -> Iterable:
        """The documents of `texts` (strings, or records with `text_column`), sampled and limited."""
        from bpe.inputs.documents import iter_texts

        return iter_texts(texts, text_column, self.sample, self.seed, self.limited)


def _inputs(
    files: object,
    texts: object,
    lang_dir: str | Path | None,
    settings: Settings,
    languages: dict[str, object],
    reading: Reading,
) -> TrainingInputs:
    """`train()`'s inputs as given (`files`, `texts`, `lang_dir`; the mixture and parity settings
    in `languages`), found, limited and checked: text by language gets its plan."""
    if lang_dir is not None:
        files = _from_directory(str(lang_dir), files, texts)
    skipped = Skipped()
    if isinstance(files, Mapping) or (files is None and isinstance(texts, Mapping)):
        inputs = _by_language(files, texts, settings, languages, reading, skipped)
    else:
        refuse_without_languages(languages)
        inputs = _one_text(files, texts, settings, reading, skipped)
    inputs.skipped = skipped.summary() if skipped else None
    return inputs


def _one_text(files: object, texts: object, settings: Settings, reading: Reading, skipped: Skipped) -> TrainingInputs:
    """The inputs of a run on one text: its shards, or its documents (with their number and
    bytes when a list of them tells)."""
    if files is not None:
        return TrainingInputs(reading.shards(files, skipped, settings), None, None)
    if texts is None:
        raise SettingsError("texts: give texts or files to train on", parameter="texts")
    rows = input_bytes = None  # known for a list of documents: the count bar's total, the small-corpus path
    if reading.sample is None and reading.limited is None:
        with contextlib.suppress(TypeError):  # a generator or an IterableDataset: not known
            rows = len(texts)
        input_bytes = _text_bytes(texts)
    if settings.superwords and iter(texts) is texts:
        texts = list(texts)  # read once per stage: a generator is kept for the second
    return TrainingInputs(None, texts, None, rows, input_bytes)


def refuse_nothing_learnt(run: TrainingRun, inputs: TrainingInputs) -> None:
    """Nothing was learnt (no pre-token counted): a 256-token tokenizer would hide a wrong input."""
    if run.stats.pretokens:
        return
    paths = [s.path for s in _flat(inputs.shards, inputs.plan)] if inputs.shards is not None else ["texts"]
    named = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
    raise InputError(
        f"{named}: no text to train on (no pre-token in {run.stats.documents:,} document(s); "
        f"{run.stats.null_rows:,} null row(s) skipped)"
    )


# train()'s parameters that are settings (bpe.schema): those Settings holds and checks (a base sets
# some: FROM_BASE), those checked where they are read (the base, the files, the roles), and the rest,
# checked by train() itself.
TRAIN_SETTINGS = {setting.name for setting in on(On.TRAIN)}
MERGE_SETTINGS = tuple(s.name for s in on(On.TRAIN | On.SETTINGS) if s.name not in FROM_BASE)
CHECKED_WHEN_READ = ("base", "files", "counts", "special_token_roles")
CHECKED_HERE = tuple(s.name for s in on(On.TRAIN) if On.SETTINGS not in s.on and s.name not in CHECKED_WHEN_READ)


def stopped_early(manifest: Manifest, name: Callable[[str], str] = str) -> str | None:
    """Why a run stopped below its vocabulary size, in one line, when no setting asked it to: pairs
    ran out, or only pairs that `max_token_length` or the superword rules refuse were left; None
    otherwise. `name` spells a setting as the caller does (the command: its flag)."""
    result = manifest.result
    if result.stop_reason not in STOPPED_SHORT:
        return None
    why = why_stopped(result.stop_reason, manifest.settings, name)
    return f"{why} after {result.merges:,} merges; the vocabulary is smaller than asked"


def _text_bytes(texts: object) -> int | None:
    """The UTF-8 bytes of a list or tuple of documents (str or None), counted only as far as the
    small-corpus size (an upper bound past it); None for anything else."""
    from bpe.training.small_corpus import SMALL_CORPUS_BYTES

    if not isinstance(texts, (list, tuple)):
        return None
    total = 0
    for text in texts:
        if text is None:
            continue
        if not isinstance(text, str):
            return None
        if len(text) > SMALL_CORPUS_BYTES:  # at least a byte a character: past the size, unencoded
            return len(text)
        total += len(text.encode("utf-8", "surrogatepass"))
        if total > SMALL_CORPUS_BYTES:
            return total
    return total


def _from_directory(lang_dir: str, files: object, texts: object) -> dict[str, list[str]]:
    """`lang_dir`'s text by language, as `files` takes it; refused with `files` or `texts` (one
    source of text: which would win, or how the two combine, is not for the library to guess)."""
    from bpe.languages.codes import languages_in

    if files is not None or texts is not None:
        given = "files" if files is not None else "texts"
        raise SettingsError(
            lambda s: f"{s.lang_dir}: gives the text by language; give it or {s(given)}, not both",
            parameter="lang_dir",
        )
    return languages_in(lang_dir)


def _by_language(
    files: Mapping | None,
    texts: Mapping | None,
    settings: Settings,
    languages: dict[str, object],
    reading: Reading,
    skipped: Skipped,
) -> TrainingInputs:
    """A multilingual run's plan, and its shards (a list per language) or texts (an iterable per
    language), in the order of the codes. Limits apply to each language."""
    from bpe.languages.codes import by_language
    from bpe.training.plan import ParitySettings, make_plan

    given = by_language(files if files is not None else texts, "files" if files is not None else "texts")
    parity = ParitySettings.of(languages)
    plan = make_plan(
        list(given), settings.pretokenizer, settings.text_column, settings.superwords, languages["mix"], parity
    )
    if files is None:  # a superword run reads its text once per stage: a generator is kept for the second
        texts = [list(t) if settings.superwords and iter(t) is t else t for t in given.values()]
        return TrainingInputs(None, texts, plan)
    shards = []
    for code, specs in given.items():
        specs = [specs] if isinstance(specs, (str, Path, Shard)) else list(specs)
        if not specs:
            raise language_error("files", f"{code}: no inputs given")
        shards.append(reading.shards(specs, skipped, settings))
    return TrainingInputs(shards, None, plan)


def _flat(shards: list, plan: LanguagePlan | None) -> list[Shard]:
    """The run's shards in one list (a multilingual run's, language after language)."""
    return [s for found in shards for s in found] if plan is not None else list(shards)


def train_locally(
    settings: Settings,
    shards: Sequence[Shard] | Sequence[Sequence[Shard]] | None,
    texts: Iterable[str] | Sequence[Iterable[str]] | None,
    threads: int | None = None,
    progress: ProgressFn | None = None,
    rows: int | None = None,
    base: BaseMerges | None = None,
    languages: LanguagePlan | None = None,
    input_bytes: int | None = None,
    say: Callable[[str], None] | None = None,
    counted: CountedWords | None = None,
    busy: BusyCores | None = None,
) -> TrainingRun:
    """The local engine: count on threads (or take the `counted` words), then learn the merges in
    this process (after replaying `base`'s). `busy`: the load of other processes, measured since
    the run started (`BusyCores`), for the threads left to the engine. `seconds` holds
    `merge_loop`, the merge loop's own time (as its progress bar measures it), within `merge`. A
    small input (`input_bytes`, or the files' sizes, at most `SMALL_CORPUS_BYTES`) with `threads`
    left to the engine takes the path without compiled kernels (`bpe.training.small_corpus`): the
    same merges, without loading numba.

    With `languages`, `shards` (or `texts`) holds a list per language in the order of its codes:
    each language is counted apart and `languages.stats` filled; then the merges are
    parity-aware (`languages.parity`), or plain over the languages' counts summed, each
    multiplied by its mixture multiplier (`languages.mix`; 1 without). The kernels the run needs
    that this machine has not compiled are compiled first, on every core (`bpe.training.warm`),
    which `say` is told of."""
    if shards is not None and input_bytes is None and languages is None:
        input_bytes = sum(shard.size * (4 if shard.kind == "parquet" or shard.compression else 1) for shard in shards)
    if counted is None and _small(settings, threads, base, languages, input_bytes):
        return _train_small(settings, shards, texts, progress, say)
    parity = languages is not None and languages.parity is not None
    if busy is None or busy.age() >= LOAD_KEPT_FOR:
        busy = BusyCores()  # the load is measured while the run starts, not in a sleep of its own
    release_memory()  # what an earlier stage or run freed: the counters are new threads, with arenas of their own
    read = shards if counted is None and languages is None else None
    groups = groups_of_run(settings, "local", threads, base is not None, parity)
    reader, busy, compiled = _compiled_while_reading(groups, read, settings, busy, say)
    t0 = time.perf_counter()
    with CompileWatch() as counting_compiles:
        if counted is not None:
            counts, stats, fingerprints = counted.counts, counted.stats, counted.fingerprints
        elif languages is not None:
            per_language, stats, fingerprints, multipliers = _count_languages(
                settings, shards, texts, threads, progress, languages, busy
            )
        elif shards is not None:
            pretokenizer, column = settings.pretokenizer, settings.text_column
            counts, stats, fingerprints = count_shards(
                shards, pretokenizer, column, threads, progress, busy=busy, reader=reader
            )
        else:
            counts, stats = _count_texts(texts or (), settings, progress, rows)
            fingerprints = None
        if languages is not None:
            from bpe.languages.mixture import weighted, weighted_sum

            if languages.parity is None:
                counts = weighted_sum(per_language, multipliers)
                del per_language
            else:
                per_language = weighted(per_language, multipliers)
    from bpe.engine.merge import learn_merges

    release_memory()
    release_code(READER)  # the merge loop reads no file
    t1, late = time.perf_counter(), 0.0
    with CompileWatch() as merging_compiles:
        words = len(counts) if languages is None or languages.parity is None else sum(map(len, per_language))
        merge_threads = threads or merge_threads_for(words, busy if busy.age() < LOAD_KEPT_FOR else None)
        if merge_threads > 1 and (languages is None or languages.parity is None):
            late = compile_ahead(["merge loop on threads"], say).seconds  # if not foreseen
            compiled.seconds += late
        loop = PhaseClock(progress, compiling=lambda: merging_compiles.seconds)
        if languages is not None and languages.parity is not None:
            from bpe.training.plan import learn_parity_merges_of

            report = _merge_progress(loop, settings.n_merges())
            merged = learn_parity_merges_of(languages, per_language, settings, merge_threads, base, report)
        else:
            merged = learn_merges(
                counts,
                settings.n_merges(),
                settings.merge_rules,
                progress=_merge_progress(loop, settings.n_merges()),
                threads=merge_threads,
                base=base,
                release_counts=True,
                on_index=lambda done, words: loop("index", done, words),
            )
    merging = time.perf_counter() - t1 - late  # the queue is made before learn_merges starts its clock: time it all
    compiling = compiled.seconds + counting_compiles.seconds + merging_compiles.seconds  # a first run only
    return TrainingRun(
        stats=stats,
        unique_words=words,
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
            "compiled": True,
        },
        languages=languages.stats if languages is not None else None,
    )


def count_text(
    settings: Settings,
    inputs: TrainingInputs,
    reading: Reading,
    threads: int | None = None,
    progress: ProgressFn | None = None,
    say: Callable[[str], None] | None = None,
    busy: BusyCores | None = None,
) -> tuple[WordCounts, CountStats]:
    """One text's pre-token counts, as the local engine counts them before merging (`bpe count`);
    `busy`: the load of other processes measured since the command started, for threads left to it."""
    groups = [name for name in groups_of_run(settings, "local", threads) if name.startswith("count ")]
    reader, busy, _ = _compiled_while_reading(groups, inputs.shards, settings, busy or BusyCores(), say)
    if inputs.shards is not None:
        counts, stats, _ = count_shards(
            inputs.shards, settings.pretokenizer, settings.text_column, threads, progress, busy=busy, reader=reader
        )
        return counts, stats
    return _count_texts(reading.documents(inputs.texts, settings.text_column), settings, progress, inputs.rows)


def _compiled_while_reading(
    groups: list[str],
    shards: Sequence[Shard] | None,
    settings: Settings,
    busy: BusyCores,
    say: Callable[[str], None] | None,
) -> tuple[ShardReader | None, BusyCores, Compiled]:
    """Compile the kernel `groups` the cache lacks (`compile_ahead`) while a reader thread starts
    on `shards` (None: nothing to read), so that the second core reads while the engine loads.
    Returns the reader, the load window (a new one if compiling ran processes, which it would
    count as another process's load) and what was compiled."""
    reader = ShardReader(shards, settings.text_column, settings.pretokenizer, busy) if shards is not None else None
    try:
        compiled = compile_ahead(groups, say)
    except BaseException:
        if reader is not None:
            reader.close()
        raise
    return reader, BusyCores() if compiled.processes else busy, compiled


def _small(
    settings: Settings,
    threads: int | None,
    base: BaseMerges | None,
    languages: LanguagePlan | None,
    input_bytes: int | None,
) -> bool:
    """Whether a local run takes the path without compiled kernels (see `train_locally`)."""
    from bpe.training.small_corpus import SMALL_CORPUS_BYTES

    plain = threads is None and base is None and languages is None and settings.superword_rules is None
    return plain and input_bytes is not None and input_bytes <= SMALL_CORPUS_BYTES


def _train_small(
    settings: Settings,
    shards: Sequence[Shard] | None,
    texts: Iterable[str] | None,
    progress: ProgressFn | None,
    say: Callable[[str], None] | None = None,
) -> TrainingRun:
    """A small input counted with the `regex` module, and its merges learnt in pure Python unless
    its words are too long for that (then by the compiled engine, on one thread)."""
    from bpe.training.small_corpus import SMALL_CORPUS_WORK, learn_merges_small, merge_work

    t0 = time.perf_counter()
    if shards is not None and all(_plain_text(shard) for shard in shards):
        words, stats, fingerprints = _count_text_files(shards, settings, progress)
    elif shards is not None:
        words, stats, fingerprints = count_shards(
            shards, settings.pretokenizer, settings.text_column, progress=progress, compiled=False
        )
    else:
        words, stats = _count_texts(texts or (), settings, progress, compiled=False)
        fingerprints = None
    t1 = time.perf_counter()
    compiled = merge_work(words) > SMALL_CORPUS_WORK
    ahead = compile_ahead(groups_for((), "local"), say).seconds if compiled else 0.0  # the loop on one thread
    with CompileWatch() as compiles:
        loop = PhaseClock(progress, compiling=lambda: compiles.seconds)
        report = _merge_progress(loop, settings.n_merges())
        if compiled:
            from bpe.engine.count import WordCounts
            from bpe.engine.merge import learn_merges

            counts = WordCounts.from_dict(words)
            del words
            merged = learn_merges(counts, settings.n_merges(), settings.merge_rules, progress=report)
            unique_words = len(counts)
        else:
            merged = learn_merges_small(words, settings.n_merges(), settings.merge_rules, progress=report)
            unique_words = len(words)
    merging = time.perf_counter() - t1 - ahead
    return TrainingRun(
        stats=stats,
        unique_words=unique_words,
        merges=merged,
        fingerprints=fingerprints,
        seconds={
            "compile": ahead + compiles.seconds,
            "count": t1 - t0,
            "merge": max(merging - compiles.seconds, 0.0),
            "merge_loop": loop.seconds("merge"),
        },
        engine={
            "engine": "local",
            "threads": "auto",
            "merge_threads": 1,
            "rounds": merged.rounds,
            "compiled": compiled,
        },
    )


def _plain_text(shard: Shard) -> bool:
    """A text file read whole, as it is (not compressed, sampled or cut by a limit)."""
    return shard.kind == "txt" and shard.compression is None and shard.sample is None and shard.budget is None


def _count_text_files(
    shards: Sequence[Shard], settings: Settings, progress: ProgressFn | None
) -> tuple[dict[bytes, int], CountStats, list[dict]]:
    """Count plain text files in Python, as `count_shards` counts them, without Arrow."""
    from bpe.inputs.plain_text import read_documents

    counter = WordCounter(settings.pretokenizer, compiled=False)
    total = sum(shard.size for shard in shards)
    fingerprints = []
    if progress is not None:
        progress("count", 0, total)
    for shard in shards:
        fingerprints.append(shard.fingerprint())
        with shard.open_raw() as f:
            raw = f.read()
        counter.add_strings(read_documents(raw, shard.path, shard.text_format))
        if progress is not None:
            progress("count", counter.stats.bytes, total)
    if progress is not None:
        progress("count", counter.stats.bytes, counter.stats.bytes)
    return counter.word_counts(), counter.stats, fingerprints


def _count_languages(
    settings: Settings,
    shards: Sequence[Sequence[Shard]] | None,
    texts: Sequence[Iterable[str]] | None,
    threads: int | None,
    progress: ProgressFn | None,
    plan: LanguagePlan,
    busy: BusyCores | None = None,
) -> tuple[list[WordCounts], CountStats, list[dict] | None, tuple[int, ...]]:
    """Count each language apart (its words never mixed with another's), filling `plan.stats`;
    returns the counts per language, what was seen in all, each file's fingerprint (with its
    language; None for texts) and each language's mixture multiplier. `busy`: the run's load
    window, for the counting threads when `threads` is None."""
    per_language, by_language, total = [], [], CountStats()
    fingerprints = [] if shards is not None else None
    sizes = [sum(s.size for s in found) for found in shards] if shards is not None else None
    if shards is not None and threads is None:
        threads = counting_threads(busy)  # once for the phase, not a language at a time
    for i, code in enumerate(plan.codes):
        reported = _after(progress, total.bytes, sum(sizes[i + 1 :]) if sizes is not None else None)
        if shards is not None:
            counts, stats, found = count_shards(
                shards[i], settings.pretokenizer, settings.text_column, threads, reported
            )
            fingerprints += [{**fp, "language": code} for fp in found]
        else:
            counts, stats = _count_texts(texts[i] if texts is not None else (), settings, reported)
        total.add(stats)
        per_language.append(counts)
        by_language.append(stats)
    paths = [[s.path for s in found] for found in shards] if shards is not None else None
    multipliers = plan.counted(by_language, [len(counts) for counts in per_language], paths)
    return per_language, total, fingerprints, multipliers


def _after(progress: ProgressFn | None, start: int, rest: int | None) -> ProgressFn | None:
    """One language's count progress as part of the whole run's: after the `start` bytes counted
    of the languages before it, with `rest` bytes (files' sizes; None: not known) still to come."""
    if progress is None:
        return None

    def report(phase: str, done: int, total: int | None) -> None:
        progress(phase, start + done, None if total is None or rest is None else start + total + rest)

    return report


# Below this many unique words a round's work is too small to share: handing it to another thread
# costs more than it saves. Measured on slices of the English corpus, 2 cores, threads that spin
# between rounds: 2,000 words 1.2x slower on 2 threads, 10,000 words 1.1x faster, 100,000 1.6x.
THREADED_MERGE_MIN_WORDS = 10_000


# A merge loop starting less than this after its run's load was measured (`BusyCores`, opened as the
# run started) uses that figure: the load of other processes rarely changes within seconds, and
# measuring again takes 50 ms.
LOAD_KEPT_FOR = 5.0


def merge_threads_for(unique_words: int, busy: BusyCores | None = None) -> int:
    """Threads for the merge loop when the user did not choose: for a word table large enough to
    gain from them, the cores available less those other processes keep busy (measured over 50 ms
    as the loop starts, or taken from `busy`): threads that spin between rounds on a busy core slow
    both down."""
    cores = available_cores()
    if unique_words < THREADED_MERGE_MIN_WORDS or cores == 1:
        return 1
    return max(1, cores - round((busy or BusyCores()).measured()))


def _count_texts(
    texts: Iterable[str],
    settings: Settings,
    progress: ProgressFn | None = None,
    rows: int | None = None,
    compiled: bool = True,
) -> tuple[WordCounts | dict[bytes, int], CountStats]:
    """Count in-memory documents a batch at a time, reporting the text bytes counted, of a total
    estimated from the documents seen of `rows` (None when not known). `compiled=False`: with the
    `regex` module only, the counts a dict."""
    counter = WordCounter(settings.pretokenizer, compiled=compiled)
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
    return (counter.result() if compiled else counter.word_counts()), counter.stats


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
    """One hash for the whole input: SHA-256 over the sorted shard hashes and sizes (and languages,
    in a multilingual run, whose parity dev set's files count too: `dev_fingerprints`)."""
    digest = hashlib.sha256()
    for fp in sorted(fingerprints, key=lambda f: (f["sha256"], f.get("language", ""))):
        language = f" {fp['language']}" if "language" in fp else ""  # a file moved to another language is new data
        digest.update(f"{fp['sha256']} {fp['size']}{language}\n".encode())
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


def trained_bytes(run: TrainingRun) -> int:
    """The bytes of text the merges were learnt on: with a mixture, each language's bytes times its
    multiplier, as its words were counted (the engines' token counts are of the same weighted text)."""
    if not run.languages:
        return run.stats.bytes
    return sum(language.bytes * language.multiplier for language in run.languages)


def build_manifest(
    settings: Settings,
    run: TrainingRun,
    started: float,
    base: Base | None = None,
    languages: LanguagePlan | None = None,
) -> Manifest:
    """The manifest of a trained tokenizer: settings, base, data, counts, result, engine, time,
    library versions and, for a multilingual run (`languages`), each language's record. Its
    `seconds.total` is the run's, from `started` (`time.perf_counter()` when it began) to now: the
    one place it is set (`save` adds the export time to it)."""
    merged, stats = run.merges, run.stats
    versions = library_versions()
    record, dev = None, []
    if languages is not None:
        from bpe.training.plan import dev_fingerprints, languages_record

        record, dev = languages_record(languages, getattr(merged, "languages", None)), dev_fingerprints(languages)
    tokens = merged.tokens_after + sum(stats.special_tokens.values())
    merges = settings.base_merges + len(merged.merges)
    return Manifest(
        format=1,
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        settings=SettingsRecord(**settings.record()),
        data=DataRecord(
            fingerprint=data_fingerprint(run.fingerprints + dev) if run.fingerprints is not None else None,
            shards=run.fingerprints if run.fingerprints is not None else "in-memory texts",
        ),
        counts=Counts(**asdict(stats), unique_words=run.unique_words),
        result=Result(
            merges=merges,
            vocab_size=settings.byte_tokens + merges + len(settings.special_tokens),
            stop_reason=merged.stop_reason,
            tokens=tokens,
            bytes_per_token=round(trained_bytes(run) / tokens, 4) if tokens else None,
            new_merges=len(merged.merges) if base is not None else None,
        ),
        engine=EngineRecord.from_json(run.engine),
        seconds=Seconds.measured(run.seconds, time.perf_counter() - started),
        versions=versions,
        base=base.record() if base is not None else None,
        superwords=SuperwordsRecord(settings.transition, run.stages) if run.stages is not None else None,
        languages=record,
    )

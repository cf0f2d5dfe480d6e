"""`Manifest`: what manifest.json says about a tokenizer, typed. How it was trained (settings,
data, counts, result, engine, time, library versions, base), what the pipeline adds (name, version,
configuration, evaluation, Prefect run, channel), what `save` adds (the tokenizer section, each
file's checksum), and what a cut records (`truncation`).

`bpe.training.trainer.build_manifest` writes one, the pipeline and `save` fill in their sections, and every
reader reads attributes. `to_json()` is the JSON written to disk, `Manifest.from_json` reads it
back. A manifest read from disk is written back as it was read: keys this version has no field for
are kept (in `extra`) in their place, and a key that was absent stays absent.

>>> m = Manifest.from_json({"counts": {"documents": 3, "bytes": 12}, "added_later": [1]})
>>> m.counts.documents, m.to_json()
(3, {'counts': {'documents': 3, 'bytes': 12}, 'added_later': [1]})
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, make_dataclass
from typing import Any, Self


@dataclass(kw_only=True)
class Section:
    """Base of the manifest's sections: typed keys, the keys this version does not know (`extra`),
    and the order they were read in. A section made here writes every key but the optional ones
    (`_optional`, written only when set); one read from disk writes the keys it was read with, then any set since."""

    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    _read: tuple[str, ...] | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    @functools.cache
    def _optional(cls) -> tuple[str, ...]:
        """The keys written only when set: those whose field defaults to None (`key: T | None = None`)."""
        return tuple(f.name for f in fields(cls) if f.init and f.default is None)

    def typed(self) -> dict[str, Any]:
        """The typed keys and their values, in the order this version writes them."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("extra", "_read")}

    def to_json(self) -> dict[str, Any]:
        """The section as manifest.json holds it."""
        return _ordered(self.typed(), self.extra, self._read, self._optional())

    def present(self, key: str) -> bool:
        """Whether `key` is in the JSON (read from disk with it, or set since), even as null."""
        return key in self.to_json()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        """The section as read from manifest.json; a key it lacks reads as None."""
        names = [f.name for f in fields(cls) if f.init and f.name != "extra"]
        section = cls(
            **{name: data.get(name) for name in names}, extra={k: v for k, v in data.items() if k not in names}
        )
        section._read = tuple(data)
        return section


def _ordered(
    values: dict[str, Any], extra: dict[str, Any], read: tuple[str, ...] | None, optional: tuple[str, ...]
) -> dict[str, Any]:
    """The JSON of typed `values` and `extra` keys: those `read` first, in that order (null
    included), then the others set since (made here: all but unset `optional` ones)."""
    written: dict[str, Any] = {}
    for key in read or ():
        if key in values:
            written[key] = _json(values[key])
        elif key in extra:
            written[key] = extra[key]
    for key, value in values.items():
        if key not in written and (value is not None or (read is None and key not in optional)):
            written[key] = _json(value)
    for key, value in extra.items():
        written.setdefault(key, value)
    return written


def _json(value: Any) -> Any:
    return value.to_json() if isinstance(value, Section) else value


class _SettingsRecord(Section):
    """`settings`: `bpe.training.settings.Settings` as recorded (`Settings.record()`: the pattern's name and
    its regex): the schema's settings marked `On.RECORD` (`bpe.schema`), with what the record adds;
    the pipeline adds the `holdout_fraction` its counts were made with. A superword run's settings
    are recorded for such a run only."""

    def to_json(self) -> dict[str, Any]:
        """A superword run writes all its settings, a null `max_words` (no limit) too."""
        optional = ("holdout_fraction",) if self.superwords else self._optional()
        return _ordered(self.typed(), self.extra, self._read, optional)


def _settings_record() -> type[Section]:
    """SettingsRecord: the recorded settings in the schema's order, each that is not a setting
    given (a base's merges, the regexes) after the one it has always followed in manifests."""
    from bpe.schema import RESOLVED, SETTINGS, SUPERWORD_KEYS, On

    after = {"max_token_length": ["base_merges"], "seed": ["regex"], "colon_space": ["superword_regex"]}
    kinds = {s.name: s.type | None if s.optional else s.type for s in (*SETTINGS, *RESOLVED) if On.RECORD in s.on}
    kinds.update(regex=str, superword_regex=str)
    optional = ("holdout_fraction", "superwords", *SUPERWORD_KEYS, "superword_regex")
    names = []
    for setting in SETTINGS:
        names += ([setting.name] if On.RECORD in setting.on else []) + after.get(setting.name, [])
    assert set(names) == set(kinds), "a recorded setting has no place in the record"
    names.sort(key=lambda name: name in optional)  # those always written first (a dataclass's order too)
    typed = [(n, kinds[n]) if n not in optional else (n, kinds[n] | None, field(default=None)) for n in names]
    record = make_dataclass("SettingsRecord", typed, bases=(_SettingsRecord,), namespace={"__module__": __name__})
    record.__doc__ = _SettingsRecord.__doc__
    return record


SettingsRecord = _settings_record()


@dataclass
class DataRecord(Section):
    """`data`: every input file (path, size, sha256; in the pipeline, kind) and one hash over them
    all, or "in-memory texts" and None; the pipeline adds how many shards were counted or cached."""

    fingerprint: str | None
    shards: list[dict[str, Any]] | str
    counted_shards: int | None = None
    cached_shards: int | None = None


@dataclass
class Counts(Section):
    """`counts`: what counting saw (`bpe.training.counting.CountStats`) and the unique words it found."""

    documents: int
    bytes: int
    null_rows: int
    pretokens: int
    unique_words: int
    held_out_rows: int
    special_tokens: dict[str, int]


@dataclass
class Result(Section):
    """`result`: merges and vocabulary made, why training stopped, and the training text's token
    count (None in a cut tokenizer); `new_merges`, those after a base's."""

    merges: int
    vocab_size: int
    stop_reason: str
    tokens: int | None
    bytes_per_token: float | None
    new_merges: int | None = None


@dataclass
class EngineRecord(Section):
    """`engine`: how the engine ran, as it describes itself (`TrainingRun.engine`): the local
    engine's threads, the Dask engine's cluster and word buckets, and both engines' rounds."""

    engine: str
    rounds: int
    scheduler: str | None = None
    cluster_started_here: bool | None = None
    threads: int | str | None = None
    merge_threads: int | None = None
    workers: int | None = None
    word_buckets: int | None = None
    merges_per_round: float | None = None
    recoveries: int | None = None
    seconds_waiting_for_buckets: float | None = None
    pair_deltas: int | None = None  # the Dask engine: pair-count deltas the holders sent back, over all rounds
    bucket_peak_mb: list[int] | None = None
    bucket_threads: list[int] | None = None
    compiled: bool | None = None  # the local engine: False on the path for small corpora (bpe.training.small_corpus)


@dataclass
class Seconds(Section):
    """`seconds`: time per phase (the engine's: compile, count, merge, ...), `total` (the whole run,
    as whoever ran it measured it) and `export` (writing the files, which `total` includes)."""

    phases: dict[str, float] = field(default_factory=dict)
    total: float | None = None
    export: float | None = None

    @classmethod
    def measured(cls, phases: Mapping[str, float], total: float) -> Seconds:
        """The engine's phases and the run's total, to the millisecond."""
        return cls(phases={k: round(v, 3) for k, v in phases.items()}, total=round(total, 3))

    def add_export(self, seconds: float) -> None:
        """Record the time the files took to write, and count it in the total."""
        self.export = round(seconds, 3)
        self.total = round((self.total or 0) + self.export, 3)

    def typed(self) -> dict[str, Any]:
        return {**self.phases, "total": self.total, "export": self.export}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Seconds:
        phases = {k: v for k, v in data.items() if k not in ("total", "export")}
        seconds = cls(phases=phases, total=data.get("total"), export=data.get("export"))
        seconds._read = tuple(data)
        return seconds


@dataclass
class BaseRecord(Section):
    """`base`: the tokenizer training started from (`bpe.training.extend.Base`): where it came from and
    the SHA-256 of what decides the extended tokenizer."""

    source: str
    sha256: str
    vocab_size: int
    merges: int
    max_token_id: int


@dataclass
class Truncation(Section):
    """`truncation`: the size a tokenizer was cut to (`Tokenizer.truncated`) and the one it was
    cut from; `of`, the directory of that run (`bpe train --also-save`)."""

    vocab_size: int
    merges: int
    of_vocab_size: int
    of_merges: int
    of: str | None = None


@dataclass
class TokenizerSection(Section):
    """`tokenizer`: what `Tokenizer.describe()` says (pattern, special tokens, sizes; the roles,
    model_max_length and kept ids only when set), which loading reads and checks."""

    pattern: str
    regex: str
    special_tokens: dict[str, int]
    vocab_size: int
    merges: int
    special_token_roles: dict[str, str] | None = None
    model_max_length: int | None = None
    ids: str | None = None


@dataclass
class SuperwordsRecord(Section):
    """`superwords`: a superword run's transition and what each of its two stages did
    (`bpe.training.superwords.stage_record`: merges, unique words or pieces, stop reason, seconds)."""

    transition: int
    stages: list[dict[str, Any]]


@dataclass
class LanguagesRecord(Section):
    """`languages`: a multilingual run's languages in the order of their codes, and for each
    (`by_language`) its documents, bytes, words (pre-tokens) and unique words counted, its share
    of the bytes, the integer its word counts were multiplied by and its share of the bytes so
    weighted (`weighted_share`), and, for a parity-aware run, the merges that served it; the
    mixture as given (`mix`, `bpe.languages.mixture.Mix.record`) and the parity settings (`parity`: variant,
    global merges, window, alpha, ratios, the dev set's files with their SHA-256, and the global
    merges made). The merges served are the whole run's, in a tokenizer cut from it too."""

    codes: list[str]
    by_language: dict[str, dict[str, Any]]
    mix: dict[str, Any] | None = None
    parity: dict[str, Any] | None = None


SECTIONS: dict[str, type[Section]] = {
    "settings": SettingsRecord,
    "data": DataRecord,
    "counts": Counts,
    "result": Result,
    "engine": EngineRecord,
    "seconds": Seconds,
    "base": BaseRecord,
    "truncation": Truncation,
    "tokenizer": TokenizerSection,
    "superwords": SuperwordsRecord,
    "languages": LanguagesRecord,
}


@dataclass(eq=False)
class Manifest(Section, Mapping):
    """A tokenizer's manifest. Every key is optional (a tokenizer made from merges has none; one
    loaded from another tool's files none but `tokenizer` and `files` once saved). The sections
    of `SECTIONS` are typed; `versions` (package -> version), `config`, `evaluation` and `prefect`
    are kept as the JSON their writers give.

    As a read-only mapping it is its JSON (`manifest["counts"]["bytes"]`), for code written when
    the manifest was a dict: those values are copies, so change a manifest by its attributes."""

    name: str | None = None  # the pipeline's: the tokenizer's name and the version published
    version: str | None = None
    format: int | None = None
    created: str | None = None
    settings: SettingsRecord | None = None
    data: DataRecord | None = None
    counts: Counts | None = None
    result: Result | None = None
    engine: EngineRecord | None = None
    seconds: Seconds | None = None
    versions: dict[str, str] | None = None
    base: BaseRecord | None = None
    superwords: SuperwordsRecord | None = None
    languages: LanguagesRecord | None = None  # a multilingual run's (bpe.training.plan.languages_record)
    truncation: Truncation | None = None
    config: dict[str, Any] | None = None  # the pipeline's: its configuration (`TokenizerConfig.as_dict`)
    evaluation: dict[str, Any] | None = None  # `bpe.pipeline.evaluate.evaluate_version_on_set`
    prefect: dict[str, str] | None = None  # the flow run that made the version
    tokenizer: TokenizerSection | None = None
    channel: str | None = None  # `main` or `experiment`
    promoted: bool | None = None  # whether publishing it moved `latest`
    files: dict[str, dict[str, Any]] | None = None  # name -> size and sha256, written last by `save`

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Manifest:
        """The manifest manifest.json holds. A section that is not a JSON object (an old or damaged
        file) is kept as it was, in `extra`, and its attribute is None; ValueError for anything
        but a JSON object."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a manifest is a JSON object, not {type(data).__name__}")
        names = [f.name for f in fields(cls) if f.init and f.name != "extra"]
        typed, extra = {}, {}
        for key, value in data.items():
            if key not in names:
                extra[key] = value
            elif key not in SECTIONS:
                typed[key] = value
            elif isinstance(value, Mapping):
                typed[key] = SECTIONS[key].from_json(value)
            else:
                extra[key] = value
        manifest = cls(**typed, extra=extra)
        manifest._read = tuple(data)
        return manifest

    def copy(self, without: tuple[str, ...] = ()) -> Manifest:
        """An independent copy (through JSON, as it would be written), `without` these keys."""
        written = json.loads(json.dumps(self.to_json()))
        return Manifest.from_json({k: v for k, v in written.items() if k not in without})

    def __eq__(self, other: object) -> bool:  # as a mapping: the same JSON
        return Mapping.__eq__(self, other)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __getitem__(self, key: str) -> Any:
        return self.to_json()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_json())

    def __len__(self) -> int:
        return len(self.to_json())


def as_manifest(value: Manifest | Mapping[str, Any] | None) -> Manifest:
    """A Manifest for what callers may give: a Manifest, its JSON (a dict), or None (an empty one)."""
    if value is None:
        return Manifest()
    return value if isinstance(value, Manifest) else Manifest.from_json(value)

"""Tokenizer configurations: one YAML file per tokenizer in `conf/`, validated on load.

A configuration's keys are the schema's (`bpe.schema`: the settings a configuration holds, with
their key paths) and the pipeline's own (`PIPELINE_SETTINGS`, declared here in the same form);
`TokenizerConfig` and its sections are made from them. Every key can be overridden from the
environment: BPE_<KEY> for every tokenizer (for example BPE_DASK_SCHEDULER or BPE_ARTIFACT_ROOT),
BPE_<NAME>_<KEY> for one (BPE_EN_DATA=/data/en); the flow's parameters win over both. Errors name
a value as it was given (`Sources`): the file and the key path, the variable, or the parameter:

    conf/en.yaml: superwords.max_words: expected an integer >= 1 or null (no limit), got 0
    BPE_VOCAB_SIZE: expected an integer >= 256, got 12
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, make_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from bpe.engine.errors import Spelling, shown
from bpe.errors import SettingsError
from bpe.pretokenize import DEFAULT_PATTERN
from bpe.schema import (
    LANGUAGE_SETTINGS,
    SETTINGS,
    YES_NO,
    Check,
    Number,
    On,
    Setting,
    check,
    in_group,
    integer,
    on,
    text,
)
from bpe.storage import Checked, read_regular
from bpe.training.plan import refuse_without_languages
from bpe.training.settings import Settings

if TYPE_CHECKING:
    from bpe.training.extend import Base

ENV_PREFIX = "BPE_"


def _safe_name(value: Any) -> bool:
    from bpe.pipeline.store import SAFE_NAME

    return isinstance(value, str) and SAFE_NAME.fullmatch(value) is not None


def _cron(value: Any) -> bool:
    return isinstance(value, str) and len(value.split()) in (5, 6)


def _sizes(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 256 for v in value)


def _language_code(value: Any) -> bool:
    from bpe.evaluation.dev_set import CODE

    return isinstance(value, str) and CODE.fullmatch(value) is not None


def _webhook(value: Any) -> bool:
    """An http:// or https:// URL with a host (and a port that is a number in range, if any)."""
    from urllib.parse import urlsplit

    if not isinstance(value, str) or any(c.isspace() for c in value):
        return False
    try:
        parts = urlsplit(value)
        _ = parts.port  # a port that is not a number in range raises ValueError
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


# The pipeline's own keys, in the schema's form (group "pipeline"; none changes the merges): a
# configuration's and, for some, a flow run's. `retention.*`, `alerts.*` and `evaluation.*` are sections
# (`retention: {keep_versions: 10}`).
_pipeline = in_group("pipeline", on=On.YAML, merges=False)
PIPELINE_SETTINGS = (
    _pipeline(
        "name",
        str,
        None,
        "the tokenizer's name: its deployment is train-bpe/<name>, its versions are stored under it",
        Check("letters, digits, '.', '_' or '-', starting with a letter or digit", _safe_name),
        on=On.YAML | On.FLOW,
        required=True,
        example="en",
    ),
    _pipeline(
        "artifact_root",
        str,
        "artifacts",
        "where versions are published: a directory or an object store URL",
        text("a non-empty string"),
        on=On.YAML | On.FLOW,
        example="s3://bucket/tokenizers",
    ),
    _pipeline(
        "cache_dir",
        str,
        None,
        "where shard counts persist, for the next run to reuse: a path every worker reaches or an object store URL",
        text("a non-empty string"),
        none="<artifact_root>/.cache",
        example="s3://bucket/cache",
    ),
    _pipeline(
        "schedule",
        str,
        None,
        "when the deployment retrains (if the data changed): a cron expression",
        Check("a cron expression such as '0 3 * * *'", _cron),
        none="no schedule",
        example="0 3 * * *",
    ),
    _pipeline(
        "eval_sizes",
        list[int],
        (),
        "smaller vocabulary sizes to report held-out compression at (cut from the same run)",
        Check("a list of integers >= 256", _sizes),
        example=[8192, 16384],
    ),
    _pipeline(
        "keep_versions",
        int,
        None,
        "after publishing, remove versions beyond the newest N (never latest, the version a rollback would "
        "return to, or the newest main-line one)",
        integer(1),
        none="keep every version",
        key="retention.keep_versions",
        example=10,
    ),
    _pipeline(
        "cache_days",
        float,
        None,
        "after publishing, remove count cache entries no run has used for this many days",
        Number("a number of days > 0", above=0),
        none="keep every entry",
        key="retention.cache_days",
        example=30.0,
    ),
    _pipeline(
        "webhook",
        str,
        None,
        "an http(s) URL the Prefect server POSTs a message to when a run fails or crashes (set up by bpe deploy)",
        Check("an http:// or https:// URL with a host", _webhook),
        none="no alerts",
        key="alerts.webhook",
        example="https://hooks.example.com/T0/B0/x",
    ),
    _pipeline(
        "evaluation_dev",
        str,
        None,
        "a parallel dev set (a directory or URL of <code>.txt or <code>.parquet files, line i the same sentence in "
        "every language) that every version is measured on language by language, with its Gini coefficient",
        text("the path or URL of a directory"),
        none="no per-language evaluation",
        key="evaluation.dev",
        example="dev/ntrex",
    ),
    _pipeline(
        "evaluation_pivot",
        str,
        None,
        "the language of {evaluation_dev} that parity is measured against",
        Check("a language code such as eng", _language_code),
        none="eng when the dev set has it, else no parity",
        key="evaluation.pivot",
        example="hin",
    ),
    _pipeline(
        "gini_margin",
        float,
        0.01,
        "alert (on {webhook}) when a version's Gini coefficient on {evaluation_dev} is above the promoted version's by "
        "more than this",
        Number("a number >= 0", least=0),
        key="evaluation.gini_margin",
        example=0.05,
    ),
    _pipeline(
        "demo_corpus",
        bool,
        False,
        "the data is the demo corpus: a run writes it where {files} points, if it is missing",
        YES_NO,
        example=True,
    ),
)

# Every key of a configuration, in the order a configuration lists them: the tokenizer's name, the
# schema's settings, then the pipeline's.
CONFIG_SETTINGS = (PIPELINE_SETTINGS[0], *on(On.YAML, SETTINGS), *PIPELINE_SETTINGS[1:])
BY_KEY = {setting.key: setting for setting in CONFIG_SETTINGS}


class KeySpelling(Spelling):
    """A configuration's spelling: a setting by its key path (`superwords.max_words`), null for none."""

    none = "null"

    def on(self, name: str) -> str:
        return self(name)  # a section that turns it on: `superwords`

    def given(self, name: str, value: object) -> str:
        return f"{self(name)}: {value}"

    def by_language(self) -> str:
        return "languages: or lang_dir:"


IN_KEYS = KeySpelling({setting.name: setting.key for setting in (*SETTINGS, *CONFIG_SETTINGS) if setting.key})
PARAMETER = "parameter"  # a value a flow run's parameter gave (`-p mix=...`), in `Sources.given`


@dataclass(frozen=True)
class Sources:
    """Where a configuration's values came from, so that an error names a value as its giver spelt
    it: a key of the file by the file and its key path (`conf/en.yaml: parity.alpha`), a value of
    the environment by its variable (`BPE_PARITY (parity.alpha)`), a flow run's parameter by its
    name, the key path (`parity.alpha`). `given`: top-level key -> its variable, or PARAMETER."""

    file: str
    given: Mapping[str, str] = field(default_factory=dict)

    def spelling(self) -> KeySpelling:
        """Each setting by its key path, or by its variable when the environment gave it."""
        return KeySpelling({name: self.name(key) for name, key in IN_KEYS.names.items()})

    def at(self, key: str) -> str:
        """A key path as a message starts with it: after the file's name when the file gave it."""
        return self.name(key) if key.split(".")[0] in self.given else f"{self.file}: {key}"

    def name(self, key: str) -> str:
        """A key path as its giver spelt it: the key path, or the variable (with the key path inside a section)."""
        giver = self.given.get(key.split(".")[0], PARAMETER)
        if giver == PARAMETER:
            return key
        return giver if "." not in key else f"{giver} ({key})"

    def located(self, exc: SettingsError) -> SettingsError:
        """`exc` with its settings spelt as their givers spelt them, after the file's name unless
        the setting at fault (`exc.parameter`) came from elsewhere."""
        head = IN_KEYS(exc.parameter).split(".")[0] if exc.parameter else None
        message = exc.spelt(self.spelling())
        return SettingsError(message if head in self.given else f"{self.file}: {message}", parameter=exc.parameter)


def _sections() -> dict[str, list[Setting]]:
    """The sections of a configuration (`superwords`, `retention`, `alerts`) and their keys."""
    found: dict[str, list[Setting]] = {}
    for setting in CONFIG_SETTINGS:
        if "." in setting.key:
            found.setdefault(setting.key.split(".")[0], []).append(setting)
    return found


SECTIONS = _sections()


# The keys a section cannot be without, when it is given: a superword tokenizer needs its transition,
# a per-language evaluation its dev set.
SECTION_REQUIRES = ("superwords.transition", "evaluation.dev")


def _section_class(section: str) -> type:
    """The dataclass of a section: its keys (the part after `section.`), each with its default."""
    keys = []
    for setting in SECTIONS[section]:
        name = setting.key.split(".", 1)[1]
        if setting.key in SECTION_REQUIRES and section in BY_KEY:  # a section that turns something on
            keys.insert(0, (name, setting.type))
        else:
            keys.append(
                (name, setting.type | None if setting.optional else setting.type, field(default=setting.default))
            )
    doc = f"`{section}:` in a configuration: {', '.join(name for name, *_ in keys)} (see `bpe.schema`)."
    return make_dataclass(section.capitalize(), keys, frozen=True, namespace={"__module__": __name__, "__doc__": doc})


Superwords = _section_class("superwords")  # a superword tokenizer's stages; absent: plain BPE
Parity = _section_class("parity")  # parity-aware merges between the languages; absent: plain BPE
Retention = _section_class("retention")  # what the flow removes after it publishes; absent: nothing
Alerts = _section_class("alerts")  # where a failed run is reported (set up by `bpe deploy`); absent: nowhere
EvaluationKeys = _section_class("evaluation")  # the per-language evaluation's dev set; absent: none
SECTION_CLASSES = {
    "superwords": Superwords,
    "parity": Parity,
    "retention": Retention,
    "alerts": Alerts,
    "evaluation": EvaluationKeys,
}


class _TokenizerConfig:
    """Where the data is, what to train, where versions go, and when to retrain: a configuration's
    keys (`CONFIG_SETTINGS`), and `source`, the file it came from."""

    def settings(self, base: Base | None = None) -> Settings:
        """The training settings this configuration describes (`base`: the tokenizer `base` names,
        loaded, whose pattern and special tokens it starts from). Errors name the file and the key."""
        values = {s.name: config_value(self, s) for s in CONFIG_SETTINGS if On.SETTINGS in s.on}
        try:
            if base is not None:
                from bpe.training.extend import base_settings

                values.update(base_settings(base, self.vocab_size, self.special_tokens, self.pattern))
            return Settings(**values)
        except SettingsError as exc:
            raise self.located(exc) from None

    def located(self, exc: SettingsError) -> SettingsError:
        """`exc` naming the file and key, the variable or the parameter that gave the setting at fault."""
        return Sources(self.source, self.origins).located(exc)

    def at(self, key: str) -> str:
        """A key path as an error about its value starts: `conf/en.yaml: evaluation.pivot`, or the variable."""
        return Sources(self.source, self.origins).at(key)

    def training_settings(self) -> dict:
        """What decides the merges (a change here means retraining even if the data is the same),
        as the manifest's `config` records them."""
        settings = {key: getattr(self, key) for key in TRAINING_KEYS}
        settings["special_tokens"] = list(self.special_tokens)
        settings["superwords"] = asdict(self.superwords) if self.superwords is not None else None
        settings["parity"] = asdict(self.parity) if self.parity is not None else None
        return settings

    def language_settings(self) -> dict:
        """The mixture and parity settings, as `train()` and `bpe.training.plan.make_plan` take them."""
        return {s.name: config_value(self, s) for s in CONFIG_SETTINGS if s.name in LANGUAGE_SETTINGS}

    def input_paths(self) -> list[str]:
        """Every path, glob or URL a run reads: the data (or each language's inputs) and the parity dev set."""
        paths = list(self.data or []) + [p for paths in (self.language_inputs() or {}).values() for p in paths]
        return paths + ([self.parity.dev] if self.parity is not None and self.parity.dev else [])

    def language_inputs(self) -> dict[str, list[str]] | None:
        """The inputs of each language (`languages:`, or the entries of `lang_dir:`), sorted by
        code; None for one text (`data:`)."""
        if self.lang_dir:
            from bpe.languages.codes import languages_in

            try:
                return languages_in(self.lang_dir)
            except SettingsError as exc:
                raise self.located(exc) from None
        return {code: self.languages[code] for code in sorted(self.languages)} if self.languages else None

    @property
    def counts_cache(self) -> str:
        """Where shard counts persist, as an absolute path or an object store URL: Dask workers
        (other processes, maybe other machines) read and write it too."""
        from bpe import storage

        path = self.cache_dir or storage.join(self.artifact_root, ".cache")
        return path if storage.is_remote(path) else os.path.abspath(storage.local_path(path))

    def as_dict(self) -> dict:
        """The configuration as plain data (recorded in each version's manifest), with the alert
        webhook cut to its scheme and host: a webhook's path is often its secret (Slack's are)."""
        values = asdict(self)
        values.pop("origins")
        values["alerts"] = {"webhook": redact_url(self.alerts.webhook)}
        return values


def _config_fields() -> list[tuple]:
    """TokenizerConfig's fields: the top-level keys (the required ones first), then `source`."""
    made, later = [], []
    for setting in CONFIG_SETTINGS:
        key = setting.key.split(".")[0]
        if "." in setting.key:
            if key in SECTIONS and key not in BY_KEY and all(f[0] != key for f in later):
                later.append((key, SECTION_CLASSES[key], field(default_factory=SECTION_CLASSES[key])))
            continue
        if key in SECTIONS:  # a section's switch: the section, or None
            later.append((key, SECTION_CLASSES[key] | None, field(default=None)))
        elif setting.required:
            made.append((key, setting.type))
        elif isinstance(setting.default, tuple):
            later.append((key, setting.type, field(default_factory=list)))
        else:
            later.append(
                (key, setting.type | None if setting.optional else setting.type, field(default=setting.default))
            )
    # `source`: the file; `origins`: the keys given by the environment or a run's parameters (`Sources.given`)
    origins = ("origins", dict, field(default_factory=dict, compare=False, repr=False))
    return [*made, *later, ("source", str, field(default="")), origins]


TokenizerConfig = make_dataclass(
    "TokenizerConfig",
    _config_fields(),
    bases=(_TokenizerConfig,),
    frozen=True,
    namespace={"__module__": __name__, "__doc__": _TokenizerConfig.__doc__},
)
# The keys that decide a version's merges: the same data with the same values trains the same (the
# data itself is compared by its fingerprint).
# The inputs (`data`, `counts`, `languages`, `lang_dir`) are compared by their content's fingerprint instead.
INPUT_SETTINGS = ("files", "counts", "languages", "lang_dir")
INPUT_KEYS = ("data", "counts", "languages", "lang_dir")  # a run's inputs, of one kind, replace the configuration's
TRAINING_KEYS = tuple(
    dict.fromkeys(s.key.split(".")[0] for s in CONFIG_SETTINGS if s.merges and s.name not in INPUT_SETTINGS)
)
_KEYS = tuple(f.name for f in fields(TokenizerConfig) if f.name not in ("source", "origins"))


def config_value(cfg, setting: Setting) -> Any:
    """A setting's value in a configuration, found by its key path (a section's key: the
    section's, or the setting's default when the section is absent)."""
    head, _, tail = setting.key.partition(".")
    value = getattr(cfg, head)
    if head in SECTIONS and not tail:  # the section's switch: whether it is there
        return value is not None
    if not tail:
        return value
    return setting.default if value is None else getattr(value, tail)


# A configuration is a screenful of keys (those in conf/ are under 2 KB): 1 MiB holds any real one,
# with thousands of inputs or special tokens, and stops /dev/zero or a runaway file before YAML
# parses it (parsed YAML takes tens of times its text's size in memory).
MAX_CONFIG_BYTES = 1 << 20
CONFIG_FILE = Checked(SettingsError, ", so not a configuration file", MAX_CONFIG_BYTES, "1 MiB (no configuration is)")


class AliasRefused(yaml.MarkedYAMLError):
    """An alias (`*name`) in a configuration: `_NoAliases` refuses them."""


class _NoAliases(yaml.SafeLoader):
    """YAML as a configuration is read: an alias (`*name`) is refused, so that a value holds no more
    than its text says (nine lines of aliases can hold a billion items, which any check, message
    or manifest would then walk)."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise AliasRefused(problem=f"*{event.anchor}", problem_mark=event.start_mark)
        return super().compose_node(parent, index)


def parse_yaml(text: str) -> Any:
    """`text` read as YAML without aliases (`_NoAliases`); yaml.YAMLError if it is not that."""
    return yaml.load(text, Loader=_NoAliases)  # noqa: S506 (a SafeLoader)


def _read_config(path: Path) -> dict:
    """The mapping a configuration file holds: a regular file (`CONFIG_FILE`), UTF-8, YAML."""
    where = str(path)
    if not path.exists():
        raise SettingsError(f"{where}: no such configuration file")
    try:
        raw = parse_yaml(read_regular(path, CONFIG_FILE).decode("utf-8")) or {}
    except UnicodeDecodeError as exc:
        raise SettingsError(f"{where}: not UTF-8 text (byte {exc.start})") from None
    except AliasRefused as exc:
        raise SettingsError(
            f"{where}: line {exc.problem_mark.line + 1}: {exc.problem} is an alias, which a configuration does not "
            "take: write the value out"
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f"line {mark.line + 1}: " if mark is not None else ""
        raise SettingsError(f"{where}: {at}not valid YAML ({exc.problem or exc.context})") from None
    except yaml.YAMLError as exc:
        raise SettingsError(f"{where}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(raw, dict):
        raise SettingsError(f"{where}: expected a mapping of keys to values")
    return raw


def environment_value(key: str, text: str) -> Any:
    """A BPE_<KEY> variable's value: its text read as YAML (a number, a list, a mapping, null),
    unless that is not YAML, or gives a string key something other than a string (or a list key
    something other than a list), where a user means the text as it is: a cron expression (`*`
    starts a YAML alias), a regex class (`[a-z]`, a YAML list), a path with `: ` (a YAML mapping)."""
    try:
        value = parse_yaml(text)
    except yaml.YAMLError:
        return text
    kind = BY_KEY[key].type if key in BY_KEY and key not in SECTIONS else None
    wanted = str if kind is str else (str, list) if kind == list[str] else object
    return text if value is not None and not isinstance(value, wanted) else value


def load_config(path: str | Path, overrides: dict | None = None, environ: dict | None = None) -> TokenizerConfig:
    """Read, override (environment, then `overrides`), and validate one configuration file. Errors
    name what gave the value at fault: the file and key, the variable, or the parameter (`Sources`)."""
    path = Path(path)
    where = str(path)
    raw = _read_config(path)
    unknown = sorted(set(raw) - set(_KEYS))
    if unknown:
        raise SettingsError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(_KEYS)})")
    values = dict(raw)
    given: dict[str, str] = {}  # the keys given other than by the file (`Sources.given`)
    env = os.environ if environ is None else environ
    scoped = ENV_PREFIX + "".join(c if c.isalnum() else "_" for c in str(values.get("name", ""))).upper() + "_"
    for prefix in (ENV_PREFIX, scoped):  # BPE_<KEY> for every tokenizer, then BPE_<NAME>_<KEY> for this one
        for key in _KEYS:
            if prefix + key.upper() in env:
                values[key], given[key] = environment_value(key, env[prefix + key.upper()]), prefix + key.upper()
    for key, value in (overrides or {}).items():
        if value is not None:
            if key not in _KEYS:
                raise SettingsError(f"{key}: unknown parameter (known: {', '.join(_KEYS)})")
            values[key], given[key] = value, PARAMETER
            if key in INPUT_KEYS:  # a run's inputs replace the configuration's, whichever kind
                for other in set(INPUT_KEYS) - {key}:
                    values.pop(other, None)
    sources = Sources(where, given)
    if values.get("lang_dir") not in (None, ""):  # text by language from a directory
        other = next((k for k in ("languages", "data") if values.get(k) not in (None, "", [], {})), None)
        if other is not None:
            raise SettingsError(
                f"{sources.at('lang_dir')}: gives the text by language; give it, {sources.name('languages')} or "
                f"{sources.name('data')}, one of them (got {sources.name(other)})"
            )
        values["data"] = None
    if values.get("languages") not in (None, {}):  # text by language instead of `data`
        if values.get("data") not in (None, "", []):
            data = sources.name("data")
            raise SettingsError(f"{sources.at('languages')}: replaces {data} (the text by language); give one of them")
        values["data"] = None
    if values.get("counts") not in (None, "", []):  # word counts instead of text
        _counts_instead_of_text(sources, values)
    by_language = values.get("languages") or values.get("lang_dir")
    for setting in CONFIG_SETTINGS:
        if (
            setting.required
            and values.get(setting.key) in (None, "", [])
            and not by_language
            and not values.get("counts")
        ):
            by = "languages: or lang_dir: the text by language, or counts: word counts"
            raise SettingsError(f"{sources.at(setting.key)}: required (or {by})")
    if values.get("base") and "pattern" not in values:
        values["pattern"] = None  # the base's
    elif "pattern" not in values:
        values["pattern"] = DEFAULT_PATTERN
    checked = {key: _checked(sources, key, value) for key, value in values.items()}
    cfg = TokenizerConfig(**checked, source=where, origins=given)
    if cfg.languages is None and cfg.lang_dir is None:
        try:
            refuse_without_languages(cfg.language_settings())
        except SettingsError as exc:
            raise sources.located(exc) from None
    if cfg.demo_corpus and (cfg.data is None or len(cfg.data) != 1 or "://" in cfg.data[0]):
        raise SettingsError(f"{sources.at('demo_corpus')}: true needs `data` to be one local directory, got {cfg.data}")
    if cfg.base is None:
        cfg.settings()  # what no key can say alone (a transition within the vocabulary); with a base, once loaded
    return cfg


# What needs the rows of text, which word counts have none of: a key given with `counts:` is refused.
NEEDS_TEXT = {
    "data": "the text itself",
    "languages": "the text by language",
    "lang_dir": "the text by language",
    "superwords": "the text (the second stage splits it again)",
    "demo_corpus": "the demo's text",
    "holdout_fraction": "rows of text held out",
    "eval_sizes": "held-out rows of text to measure",
}


def _counts_instead_of_text(sources: Sources, values: dict) -> None:
    """A configuration that trains on word counts (`counts:`): refuse in one line any key that
    needs the text; no row is held out (holdout_fraction 0)."""
    for key, needs in NEEDS_TEXT.items():
        if values.get(key) not in (None, "", [], {}, False, 0, 0.0):
            raise SettingsError(
                f"{sources.at(key)}: needs {needs}, and {sources.name('counts')} trains on word counts, which hold "
                f"none; leave out one of them"
            )
    values["data"] = None
    values["holdout_fraction"] = 0.0


def _checked(sources: Sources, key: str, value: Any) -> Any:
    """A top-level key's value, checked (a section's keys each), as TokenizerConfig holds it."""
    if key in SECTIONS:
        return _section(sources, key, value)
    setting = BY_KEY[key]
    if key == "pattern" and value is None:  # set so only for a configuration with `base`
        return value
    return _value(sources, setting, value)


def _value(sources: Sources, setting: Setting, value: Any) -> Any:
    """One key's value, checked (naming what gave it) and as the configuration holds it."""
    if value is None and isinstance(setting.default, tuple):
        return []  # a list left empty
    try:
        check(setting.name, value, setting)
    except SettingsError as exc:
        raise sources.located(exc) from None
    if isinstance(value, str) and setting.type == list[str]:
        return [value]  # `data: corpus/`: one path (a check refuses one string for any other list)
    if setting.type == dict[str, list[str]] and value is not None:  # `languages:`: code -> path(s), sorted
        return {code: [value[code]] if isinstance(value[code], str) else list(value[code]) for code in sorted(value)}
    if setting.type is float and value is not None:
        return float(value)
    return list(value) if isinstance(value, list) else value


def _section(sources: Sources, key: str, value: Any):
    """A section (`superwords:`, `parity:`, `retention:`, `alerts:`): null is its default (None for
    one that turns something on, the section's defaults otherwise), a mapping is checked key by
    key; `true` turns a section on with its defaults, `false` leaves it off."""
    cls = SECTION_CLASSES[key]
    switch = key in BY_KEY
    if switch and isinstance(value, bool):
        value = {} if value else None
    if value is None:
        return None if switch else cls()
    if isinstance(value, cls):
        return value
    known = [f.name for f in fields(cls)]
    if not isinstance(value, dict):
        raise SettingsError(f"{sources.at(key)}: expected a mapping with {' and/or '.join(known)}, got {shown(value)}")
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise SettingsError(f"{sources.at(key)}: unknown key {unknown[0]!r} (known: {', '.join(known)})")
    found = {}
    for setting in SECTIONS[key]:
        name = setting.key.split(".", 1)[1]
        if name not in value:
            if setting.key in SECTION_REQUIRES:
                raise SettingsError(f"{sources.at(setting.key)}: required ({setting.doc_spelt(sources.spelling())})")
            continue
        found[name] = _value(sources, setting, value[name])
    return cls(**found)


def check_webhook_url(url) -> str:
    """An http:// or https:// URL with a host, returned as given; SettingsError (one line, which the
    caller prefixes with where the URL came from) for anything else."""
    if not _webhook(url):
        raise SettingsError(f"expected an http:// or https:// URL with a host, got {url!r}")
    return url


def redact_url(url: str | None) -> str | None:
    """`scheme://host[:port]/...` of a URL, without its user, path or query (where secrets sit)."""
    if not url:
        return url
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}/..."


def packaged_config(name: str) -> Path:
    """A configuration shipped with the package (`conf/<name>.yaml` in the source tree), e.g. the
    demo's, so that an installed `bpe demo` works without a checkout."""
    from importlib.resources import files

    return Path(str(files("bpe.conf").joinpath(f"{name}.yaml")))


def find_configs(directory: str | Path = "conf") -> list[TokenizerConfig]:
    """Every configuration in a directory, validated."""
    return [load_config(p) for p in sorted(Path(directory).glob("*.yaml"))]

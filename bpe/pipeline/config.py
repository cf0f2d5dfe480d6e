"""Tokenizer configurations: one YAML file per tokenizer in `conf/`, validated on load.

Every key can be overridden from the environment: BPE_<KEY> for every tokenizer (for example
BPE_DASK_SCHEDULER or BPE_ARTIFACT_ROOT), BPE_<NAME>_<KEY> for one (BPE_EN_DATA=/data/en); the
flow's parameters win over both. Errors name the file and the key:

    conf/en.yaml: vocab_size: expected an integer >= 256, got 'big'
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from bpe.errors import SettingsError
from bpe.pretokenize import DEFAULT_PATTERN, SUPERWORD_PATTERN
from bpe.settings import Settings, check_setting

if TYPE_CHECKING:
    from bpe.extend import Base

ENV_PREFIX = "BPE_"
# The settings that decide a version's merges: the same data with the same values trains the same.
TRAINING_KEYS = (
    "vocab_size",
    "pattern",
    "special_tokens",
    "min_frequency",
    "tie_break",
    "max_token_length",
    "base",
    "text_column",
    "holdout_fraction",
    "superwords",
)


@dataclass(frozen=True)
class Superwords:
    """A superword tokenizer (`superwords:` in the configuration; plain BPE when absent): ordinary
    BPE until the vocabulary holds `transition` tokens, then merges across words with the text split
    by `pattern` (`superbpe`, the paper's, or a Split regex), each superword of at most `max_words`
    words (null: no limit) and, unless `colon_space`, no ": " (see `bpe.superwords`)."""

    transition: int
    pattern: str = SUPERWORD_PATTERN
    max_words: int | None = 4
    colon_space: bool = False


@dataclass(frozen=True)
class Retention:
    """What the flow removes after it publishes (`retention:` in the configuration; nothing when
    absent): versions beyond the newest `keep_versions` (never `latest`, the version a rollback
    would return to, or the newest main-line version), and count cache entries no run has used for
    `cache_days` days. `bpe prune` and `bpe prune-cache` do the same by hand."""

    keep_versions: int | None = None
    cache_days: float | None = None


@dataclass(frozen=True)
class Alerts:
    """Where a failed or crashed run of this tokenizer's deployment is reported (`alerts:` in the
    configuration; none when absent): `webhook`, an http(s) URL that the Prefect server POSTs a JSON
    message to (see `bpe.pipeline.alerts`). `bpe deploy` sets it up; BPE_ALERT_WEBHOOK gives one to
    every configuration that names none."""

    webhook: str | None = None


@dataclass(frozen=True)
class TokenizerConfig:
    """Where the data is, what to train, where versions go, and when to retrain."""

    name: str
    data: list[str]
    vocab_size: int
    text_column: str = "text"
    pattern: str | None = DEFAULT_PATTERN  # None only with `base`: the base's pattern
    base: str | None = None  # a tokenizer (path or URL) whose merges training starts from (bpe.extend)
    special_tokens: list[str] = field(default_factory=list)
    min_frequency: int = 1
    tie_break: str = "bytes"
    max_token_length: int | None = None  # bytes; none: no limit
    superwords: Superwords | None = None  # a superword tokenizer's stages; none: plain BPE
    holdout_fraction: float = 0.01
    artifact_root: str = "artifacts"
    cache_dir: str | None = None  # shard counts persist here; default <artifact_root>/.cache
    dask_scheduler: str | None = None  # tcp://host:8786; none: start a local cluster
    dask_workers: int | None = None  # size of that local cluster (default: one per core)
    schedule: str | None = None  # cron of the scheduled deployment; none: no schedule
    eval_sizes: list[int] = field(default_factory=list)  # vocabulary sizes to report compression at
    retention: Retention = field(default_factory=Retention)  # what to remove after publishing
    alerts: Alerts = field(default_factory=Alerts)  # where a failed run is reported (set up by `bpe deploy`)
    demo_corpus: bool = False  # the data is the demo corpus: a run writes it where `data` points, if missing
    source: str = ""  # the file it came from (set on load)

    def settings(self, base: Base | None = None) -> Settings:
        """The training settings this configuration describes (`base`: the tokenizer `base` names,
        loaded, whose pattern and special tokens it starts from)."""
        started_from = {"pattern": self.pattern or DEFAULT_PATTERN, "special_tokens": tuple(self.special_tokens)}
        if base is not None:
            from bpe.extend import base_settings

            started_from = base_settings(base, self.vocab_size, self.special_tokens, self.pattern)
        return Settings(
            vocab_size=self.vocab_size,
            **started_from,
            min_frequency=self.min_frequency,
            tie_break=self.tie_break,
            max_token_length=self.max_token_length,
            text_column=self.text_column,
            **self.superword_settings(),
        )

    def superword_settings(self) -> dict:
        """The `Settings` keywords of the `superwords:` section (none for plain BPE)."""
        if self.superwords is None:
            return {}
        return {
            "superwords": True,
            "transition": self.superwords.transition,
            "superword_pattern": self.superwords.pattern,
            "max_words": self.superwords.max_words,
            "colon_space": self.superwords.colon_space,
        }

    def training_settings(self) -> dict:
        """What decides the merges (a change here means retraining even if the data is the same),
        as the manifest's `config` records them."""
        settings = {key: getattr(self, key) for key in TRAINING_KEYS}
        settings["special_tokens"] = list(self.special_tokens)
        settings["superwords"] = asdict(self.superwords) if self.superwords is not None else None
        return settings

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
        values["alerts"] = {"webhook": redact_url(self.alerts.webhook)}
        return values


_TYPES = {f.name: f.type for f in fields(TokenizerConfig)}
_REQUIRED = ("name", "data", "vocab_size")


def load_config(path: str | Path, overrides: dict | None = None, environ: dict | None = None) -> TokenizerConfig:
    """Read, override (environment, then `overrides`), and validate one configuration file."""
    path = Path(path)
    where = str(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise SettingsError(f"{where}: no such configuration file") from None
    except yaml.YAMLError as exc:
        raise SettingsError(f"{where}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(raw, dict):
        raise SettingsError(f"{where}: expected a mapping of keys to values")
    unknown = sorted(set(raw) - (set(_TYPES) - {"source"}))
    if unknown:
        known = ", ".join(k for k in _TYPES if k != "source")
        raise SettingsError(f"{where}: unknown key {unknown[0]!r} (known: {known})")
    values = dict(raw)
    env = os.environ if environ is None else environ
    scoped = ENV_PREFIX + "".join(c if c.isalnum() else "_" for c in str(values.get("name", ""))).upper() + "_"
    for prefix in (ENV_PREFIX, scoped):  # BPE_<KEY> for every tokenizer, then BPE_<NAME>_<KEY> for this one
        for key in _TYPES:
            if prefix + key.upper() in env:
                values[key] = yaml.safe_load(env[prefix + key.upper()])
    for key, value in (overrides or {}).items():
        if value is not None:
            if key not in _TYPES:
                raise SettingsError(f"{where}: unknown parameter {key!r}")
            values[key] = value
    for key in _REQUIRED:
        if values.get(key) in (None, "", []):
            raise SettingsError(f"{where}: {key}: required")
    if values.get("base") and "pattern" not in values:
        values["pattern"] = None  # the base's
    values["source"] = where
    cfg = TokenizerConfig(**{k: _check(where, k, v) for k, v in values.items()})
    if cfg.demo_corpus and (len(cfg.data) != 1 or "://" in cfg.data[0]):
        raise SettingsError(f"{where}: demo_corpus: true needs `data` to be one local directory, got {cfg.data}")
    return cfg


def _check(where: str, key: str, value):
    def fail(expected: str):
        raise SettingsError(f"{where}: {key}: expected {expected}, got {value!r}")

    if key == "name":
        from bpe.pipeline.store import check_name

        try:
            return check_name(value)
        except SettingsError as exc:
            raise SettingsError(f"{where}: {exc}", parameter=key) from None
    if key == "data":
        value = [value] if isinstance(value, str) else value
        if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
            fail("a path, glob or URL, or a list of them")
        return [str(v) for v in value]
    if key == "pattern" and value is None:  # set so only for a configuration with `base`
        return value
    if key in ("vocab_size", "min_frequency", "tie_break", "max_token_length", "pattern", "text_column"):
        try:
            check_setting(key, value)
        except SettingsError as exc:
            raise SettingsError(f"{where}: {exc}", parameter=key) from None
        return value
    if key == "dask_workers":
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            fail("an integer >= 1 or null")
        return value
    if key == "holdout_fraction":
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 0.5:
            fail("a number in [0, 0.5)")
        return float(value)
    if key == "special_tokens":
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            fail("a list of non-empty strings")
        return list(value)
    if key == "eval_sizes":
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, int) and v >= 256 for v in value):
            fail("a list of integers >= 256")
        return list(value)
    if key == "retention":
        return _check_retention(where, value)
    if key == "alerts":
        return _check_alerts(where, value)
    if key == "superwords":
        return _check_superwords(where, value)
    if key == "schedule":
        if value is None:
            return None
        if not isinstance(value, str) or len(value.split()) not in (5, 6):
            fail("a cron expression such as '0 3 * * *', or null")
        return value
    if key == "artifact_root":
        if not isinstance(value, str) or not value:
            fail("a non-empty string")
        return value
    if key == "demo_corpus":
        if not isinstance(value, bool):
            fail("true or false")
        return value
    if key in ("cache_dir", "dask_scheduler", "base"):
        if value is not None and (not isinstance(value, str) or not value):
            fail("a non-empty string or null")
        return value
    return value


def _section(where: str, key: str, value, cls):
    """A key holding a mapping of its own (`retention:`, `alerts:`): null is `cls()` (the defaults),
    a `cls` stays as it is, and a mapping is returned once it holds only `cls`'s fields."""
    if value is None:
        return cls()
    if isinstance(value, cls):
        return value
    known = [f.name for f in fields(cls)]
    if not isinstance(value, dict):
        raise SettingsError(f"{where}: {key}: expected a mapping with {' and/or '.join(known)}, got {value!r}")
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise SettingsError(f"{where}: {key}: unknown key {unknown[0]!r} (known: {', '.join(known)})")
    return value


def _check_retention(where: str, value) -> Retention:
    """`retention: {keep_versions: 10, cache_days: 30}`: either key may be left out or null."""
    value = _section(where, "retention", value, Retention)
    if isinstance(value, Retention):
        return value
    keep, days = value.get("keep_versions"), value.get("cache_days")
    if keep is not None and (not isinstance(keep, int) or isinstance(keep, bool) or keep < 1):
        raise SettingsError(f"{where}: retention: keep_versions: expected an integer >= 1 or null, got {keep!r}")
    if days is not None and (not isinstance(days, (int, float)) or isinstance(days, bool) or not days > 0):
        raise SettingsError(f"{where}: retention: cache_days: expected a number of days > 0 or null, got {days!r}")
    return Retention(keep_versions=keep, cache_days=None if days is None else float(days))


def _check_superwords(where: str, value) -> Superwords | None:
    """`superwords: {transition: 24576, pattern: superbpe, max_words: 4, colon_space: false}`; only
    `transition` is required; null or absent: plain BPE."""
    if value is None or isinstance(value, Superwords):
        return value
    value = _section(where, "superwords", value, Superwords)
    if "transition" not in value:
        raise SettingsError(f"{where}: superwords: transition: required (the vocabulary size where superwords start)")
    found = Superwords(**value)
    for key, name in (("transition", "transition"), ("pattern", "superword_pattern"), ("max_words", "max_words")):
        try:
            check_setting(name, getattr(found, key))
        except SettingsError as exc:
            message = str(exc).removeprefix(f"{name}: ")
            raise SettingsError(f"{where}: superwords: {key}: {message}", parameter="superwords") from None
    if not isinstance(found.colon_space, bool):
        raise SettingsError(f"{where}: superwords: colon_space: expected true or false, got {found.colon_space!r}")
    return found


def _check_alerts(where: str, value) -> Alerts:
    """`alerts: {webhook: https://hooks.example.com/...}`; null or absent: no alerts."""
    value = _section(where, "alerts", value, Alerts)
    if isinstance(value, Alerts):
        return value
    webhook = value.get("webhook")
    if webhook is not None:
        try:
            check_webhook_url(webhook)
        except SettingsError as exc:
            raise SettingsError(f"{where}: alerts: webhook: {exc}", parameter="alerts") from None
    return Alerts(webhook=webhook)


def check_webhook_url(url) -> str:
    """An http:// or https:// URL with a host, returned as given; SettingsError (one line, which the
    caller prefixes with where the URL came from) for anything else."""
    from urllib.parse import urlsplit

    def valid() -> bool:
        if not isinstance(url, str) or any(c.isspace() for c in url):
            return False
        try:
            parts = urlsplit(url)
            _ = parts.port  # a port that is not a number in range raises ValueError
        except ValueError:
            return False
        return parts.scheme in ("http", "https") and bool(parts.hostname)

    if not valid():
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

"""Training settings: everything that decides the merges, validated in one place.

The names users choose from (engines, tie-breaks, patterns) are listed here once (the tie-breaks
are the pair queue's own, `bpe.engine.TIE_BREAKS`); the command's flags and the configuration
files take them from here. Errors name the parameter
(`tie_break: expected one of bytes, ids, got 'max'`); the `bpe` command shows it as its flag.

>>> Settings(vocab_size=300, pattern="gpt2").n_merges()
44
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace

from bpe.engine import TIE_BREAKS
from bpe.engine.rules import SuperwordRules
from bpe.errors import SettingsError
from bpe.formats.files import ID_LIMIT
from bpe.pretokenize import DEFAULT_PATTERN, PATTERNS, SUPERWORD_PATTERN, Pretokenizer, resolve_pattern, superword_regex

ENGINES = ("local", "dask")
# A superword run's settings describe the whole run ("whole"), or one of its two stages: ordinary
# BPE up to the transition ("subwords"), then merges across words ("superwords"). See bpe.superwords.
STAGES = ("whole", "subwords", "superwords")
# The settings that only a superword run reads (the manifest records them for such a run only).
SUPERWORD_KEYS = ("transition", "superword_pattern", "max_words", "colon_space")
TEXT_FORMATS = ("doc", "lines")  # a text file is one document, or one document per line (bpe.inputs.formats)
# --limit: decimal and binary byte units, or rows (documents).
LIMIT_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "row": 0,
    "rows": 0,
}

# Upper bounds, so that a number too large for the kernels (64-bit) is one line naming its setting,
# never an overflow deep inside: token ids are unsigned 32-bit, counts 64-bit, and no token or word
# count comes near 2**31.
MAX_VOCAB_SIZE = ID_LIMIT
MAX_COUNT = 2**63 - 1
MAX_LENGTH = 2**31 - 1
# A local Dask cluster's workers are processes of about 150 MB each on this machine.
MAX_LOCAL_WORKERS = 256

__all__ = [
    "ENGINES",
    "PATTERNS",
    "STAGES",
    "SUPERWORD_KEYS",
    "TEXT_FORMATS",
    "TIE_BREAKS",
    "Settings",
    "check_setting",
    "parse_limit",
]


def parse_limit(text: str) -> tuple[str, int]:
    """`--limit`: ("bytes", n) for a size with its unit, ("rows", n) for a count of rows.

    >>> parse_limit("10MB"), parse_limit("1.5 KiB"), parse_limit("5000rows")
    (('bytes', 10000000), ('bytes', 1536), ('rows', 5000))
    """
    import re

    def fail() -> None:
        raise SettingsError(
            f"limit: expected a size such as 10MB, 512KiB, 1.5GB or a row count such as 5000rows, got {text!r}",
            parameter="limit",
        )

    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]+)\s*", text) if isinstance(text, str) else None
    if match is None or match.group(2).lower() not in LIMIT_UNITS:
        fail()
    number, unit = match.group(1), LIMIT_UNITS[match.group(2).lower()]
    if unit == 0:
        if "." in number or int(number) < 1:
            fail()
        return "rows", int(number)
    amount = int(float(number) * unit)
    if amount < 1:
        fail()
    return "bytes", amount


def check_setting(name: str, value) -> None:
    """Raise SettingsError (naming `name`) if `value` cannot work for that setting."""

    def fail(expected: str) -> None:
        raise SettingsError(f"{name}: expected {expected}, got {value!r}", parameter=name)

    def at_most(most: int, what: str) -> None:
        if value is not None and value > most:
            fail(f"at most {most:,} {what}")

    if name == "vocab_size":
        if not isinstance(value, int) or isinstance(value, bool) or value < 256:
            fail("an integer >= 256")
        at_most(MAX_VOCAB_SIZE, "tokens (token ids are unsigned 32-bit)")
    elif name == "base_merges":
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            fail("an integer >= 0")
    elif name == "base_missing_bytes":
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 13:
            fail("an integer from 0 to 13 (the bytes valid UTF-8 never holds)")
    elif name == "min_frequency":
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            fail("an integer >= 1")
        at_most(MAX_COUNT, "(counts are 64-bit)")
    elif name == "max_token_length":  # None: no limit
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 2):
            fail("an integer >= 2 (bytes) or None (no limit)")
        at_most(MAX_LENGTH, "bytes")
    elif name == "threads":  # None: the cores available
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            fail("an integer >= 1")
    elif name == "workers":  # None: one per core; a local Dask cluster's worker processes
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            fail("an integer >= 1 (worker processes of the local Dask cluster)")
        at_most(MAX_LOCAL_WORKERS, "processes on this machine")
    elif name == "tie_break":
        if value not in TIE_BREAKS:
            fail(f"one of {', '.join(TIE_BREAKS)}")
    elif name == "engine":
        if value not in ENGINES:
            fail(f"one of {', '.join(ENGINES)}")
    elif name == "text_column":
        if not isinstance(value, str) or not value:
            fail("a non-empty column or field name")
    elif name == "pattern":
        if not isinstance(value, str) or not value:
            fail(f"one of {', '.join(PATTERNS)} or a regex")
        resolve_pattern(value)
    elif name == "text_format":
        if value not in TEXT_FORMATS:
            fail(f"one of {', '.join(TEXT_FORMATS)}")
    elif name == "limit":  # None: no limit
        if value is not None:
            parse_limit(value)
    elif name == "sample":  # None: every row
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value <= 1):
            fail("a fraction of rows to keep, above 0 and at most 1")
    elif name == "seed":
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            fail("an integer >= 0")
    elif name == "superwords" or name == "colon_space":
        if not isinstance(value, bool):
            fail("true or false")
    elif name == "transition":  # None: no superword stage
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 256):
            fail("a vocabulary size >= 256 at which the superword stage starts")
    elif name == "superword_pattern":
        if not isinstance(value, str) or not value:
            fail(f"{SUPERWORD_PATTERN} or a regex")
        superword_regex(value)
    elif name == "max_words":  # None: no limit
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            fail("an integer >= 1 or None (no limit)")
        at_most(MAX_LENGTH, "words")
    elif name == "special_tokens":
        if isinstance(value, str) or not all(isinstance(t, str) for t in value):
            fail("a list of strings")
        Pretokenizer("gpt2", value)  # empty or repeated tokens


@dataclass(frozen=True)
class Settings:
    """Everything that decides the merges (plus where the text comes from), validated when made."""

    vocab_size: int
    pattern: str = DEFAULT_PATTERN
    special_tokens: Sequence[str] = field(default=())
    min_frequency: int = 1
    tie_break: str = "bytes"
    max_token_length: int | None = None  # no merge makes a token longer than this many bytes; None: no limit
    base_merges: int = 0  # merges of the tokenizer training starts from (bpe.extend), replayed first
    # bytes that base has no id for (of the 13 valid UTF-8 never holds): the vocabulary counts ids,
    # so as many more merges fit in it
    base_missing_bytes: int = 0
    text_column: str = "text"
    text_format: str = "doc"  # how a text file is read: one document, or one per line
    limit: str | None = None  # "10MB" or "5000rows": train on the first of the input only
    sample: float | None = None  # train on this fraction of the rows (chosen by a hash of each, with seed)
    seed: int = 0
    superwords: bool = False  # a superword tokenizer (SuperBPE): merges across words after `transition`
    transition: int | None = None  # the vocabulary size (special tokens aside) where superwords start
    superword_pattern: str = SUPERWORD_PATTERN  # how the superword stage splits text (a Split, "isolated")
    max_words: int | None = 4  # a superword holds at most this many words; None: no limit
    colon_space: bool = False  # whether a superword may hold ": "
    stage: str = "whole"  # which part of a superword run these settings describe (STAGES)

    def __post_init__(self) -> None:
        if isinstance(self.special_tokens, str):  # tuple() would make it its characters
            check_setting("special_tokens", self.special_tokens)
        object.__setattr__(self, "special_tokens", tuple(self.special_tokens))
        names = (
            "vocab_size",
            "pattern",
            "special_tokens",
            "min_frequency",
            "tie_break",
            "max_token_length",
            "base_merges",
            "base_missing_bytes",
            "text_column",
            "text_format",
            "limit",
            "sample",
            "seed",
            "superwords",
            "transition",
            "superword_pattern",
            "max_words",
            "colon_space",
        )
        for name in names:
            check_setting(name, getattr(self, name))
        if self.stage not in STAGES:
            raise SettingsError(f"stage: expected one of {', '.join(STAGES)}, got {self.stage!r}", parameter="stage")
        self._check_transition()
        self.n_merges()
        self._check_special_tokens_can_be_written()

    def _check_transition(self) -> None:
        """A superword run needs its transition, between the base's tokens and the final vocabulary."""
        if not self.superwords:
            if self.transition is not None:
                raise SettingsError(
                    "transition: only a superword run has one (superwords=True, --superwords)", parameter="transition"
                )
            return
        if self.transition is None:
            raise SettingsError(
                "transition: a superword run needs the vocabulary size where superwords start (--transition)",
                parameter="transition",
            )
        least, most = self.byte_tokens + self.base_merges, self.vocab_size - len(self.special_tokens)
        if self.stage != "superwords" and not least <= self.transition <= most:
            raise SettingsError(
                f"transition: expected a vocabulary size from {least:,} (the bytes and the base's merges) to "
                f"{most:,} (vocab_size less the special tokens), got {self.transition:,}",
                parameter="transition",
            )

    def _check_special_tokens_can_be_written(self) -> None:
        """vocab.json keys tokens by their GPT-2 spelling: a special token spelled like a byte token
        ("a", "Ġ") could never be written, so say so now rather than after training."""
        from bpe.formats.spelling import bytes_to_unicode

        byte_spellings = set(bytes_to_unicode().values())
        for token in self.special_tokens:
            if token in byte_spellings:
                raise SettingsError(
                    f"special_tokens: {token!r} is spelled like a byte token in vocab.json; choose a longer one, "
                    "such as <|...|>",
                    parameter="special_tokens",
                )

    def n_merges(self) -> int:
        """Merges to learn: the vocabulary minus the 256 bytes, the base's merges and the special
        tokens; for the subword stage of a superword run, up to the transition."""
        if self.stage == "subwords":
            return self.transition - self.byte_tokens - self.base_merges
        n = self.vocab_size - self.byte_tokens - self.base_merges - len(self.special_tokens)
        if n < 0:
            merges = f", the base tokenizer's {self.base_merges:,} merges" if self.base_merges else ""
            raise SettingsError(
                f"vocab_size {self.vocab_size} is too small: the {self.byte_tokens} byte tokens{merges} and "
                f"{len(self.special_tokens)} special token(s) need at least {self.vocab_size - n}",
                parameter="vocab_size",
            )
        return n

    @property
    def byte_tokens(self) -> int:
        """The single-byte tokens with an id: 256, fewer for a base that lacks some."""
        return 256 - self.base_missing_bytes

    @property
    def split_pattern(self) -> str:
        """The pattern text is split with: the superword stage's, or the ordinary one."""
        if self.stage == "superwords":
            return superword_regex(self.superword_pattern)
        return self.pattern

    @property
    def tokenizer_pattern(self) -> str:
        """The pattern the trained tokenizer splits text with: a superword run's second stage's."""
        return superword_regex(self.superword_pattern) if self.superwords else self.pattern

    @property
    def pretokenizer(self) -> Pretokenizer:
        return Pretokenizer(self.split_pattern, self.special_tokens)

    @property
    def superword_rules(self) -> SuperwordRules | None:
        """The rules the superword stage's merges keep (None for any other)."""
        if self.stage != "superwords":
            return None
        return SuperwordRules(max_words=self.max_words, colon_space=self.colon_space)

    def subword_stage(self) -> Settings:
        """A superword run's first stage: ordinary BPE up to the transition."""
        return replace(self, stage="subwords")

    def superword_stage(self, merges_before: int) -> Settings:
        """A superword run's second stage, after `merges_before` merges (the base's and the first
        stage's), which it replays on the words its own pattern cuts."""
        return replace(self, stage="superwords", base_merges=merges_before)

    def record(self) -> dict:
        """The settings as the manifest records them (with the pattern's name and regex); the
        superword settings only for a superword run."""
        pretokenizer = Pretokenizer(self.pattern, self.special_tokens)
        recorded = {
            **asdict(self),
            "pattern": pretokenizer.name,
            "regex": pretokenizer.regex,
            "special_tokens": list(self.special_tokens),
        }
        del recorded["stage"]
        del recorded["base_missing_bytes"]  # the base's own: its section records the base
        if self.superwords:
            recorded["superword_regex"] = superword_regex(self.superword_pattern)
        else:
            for key in ("superwords", *SUPERWORD_KEYS):
                del recorded[key]
        return recorded

"""Training settings: everything that decides the merges, validated in one place.

The names users choose from (engines, tie-breaks, patterns) are defined here once; the command's
flags, the configuration files and the kernels take them from here. Errors name the parameter
(`tie_break: expected one of bytes, ids, got 'max'`); the `bpe` command shows it as its flag.

>>> Settings(vocab_size=300, pattern="gpt2").n_merges()
44
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from bpe.errors import SettingsError
from bpe.pretokenize import PATTERNS, Pretokenizer, resolve_pattern

ENGINES = ("local", "dask")
TIE_BREAKS = ("bytes", "ids")

__all__ = ["ENGINES", "PATTERNS", "TIE_BREAKS", "Settings", "check_setting"]


def check_setting(name: str, value) -> None:
    """Raise SettingsError (naming `name`) if `value` cannot work for that setting."""

    def fail(expected: str) -> None:
        raise SettingsError(f"{name}: expected {expected}, got {value!r}", parameter=name)

    if name == "vocab_size":
        if not isinstance(value, int) or isinstance(value, bool) or value < 256:
            fail("an integer >= 256")
    elif name == "min_frequency":
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            fail("an integer >= 1")
    elif name == "threads":  # None: the cores available
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            fail("an integer >= 1")
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
    elif name == "special_tokens":
        if isinstance(value, str) or not all(isinstance(t, str) for t in value):
            fail("a list of strings")
        Pretokenizer("gpt2", value)  # empty or repeated tokens


@dataclass(frozen=True)
class Settings:
    """Everything that decides the merges (plus where the text comes from), validated when made."""

    vocab_size: int
    pattern: str = "cl100k"
    special_tokens: Sequence[str] = field(default=())
    min_frequency: int = 1
    tie_break: str = "bytes"
    text_column: str = "text"

    def __post_init__(self) -> None:
        object.__setattr__(self, "special_tokens", tuple(self.special_tokens))
        for name in ("vocab_size", "pattern", "special_tokens", "min_frequency", "tie_break", "text_column"):
            check_setting(name, getattr(self, name))
        self.n_merges()
        self._check_special_tokens_can_be_written()

    def _check_special_tokens_can_be_written(self) -> None:
        """vocab.json keys tokens by their GPT-2 spelling: a special token spelled like a byte token
        ("a", "Ġ") could never be written, so say so now rather than after training."""
        from bpe.export import bytes_to_unicode

        byte_spellings = set(bytes_to_unicode().values())
        for token in self.special_tokens:
            if token in byte_spellings:
                raise SettingsError(
                    f"special_tokens: {token!r} is spelled like a byte token in vocab.json; choose a longer one, "
                    "such as <|...|>",
                    parameter="special_tokens",
                )

    def n_merges(self) -> int:
        """Merges to learn: the vocabulary minus the 256 bytes and the special tokens."""
        n = self.vocab_size - 256 - len(self.special_tokens)
        if n < 0:
            raise SettingsError(
                f"vocab_size {self.vocab_size} is too small: the 256 byte tokens and "
                f"{len(self.special_tokens)} special token(s) need at least {256 + len(self.special_tokens)}",
                parameter="vocab_size",
            )
        return n

    @property
    def pretokenizer(self) -> Pretokenizer:
        return Pretokenizer(self.pattern, self.special_tokens)

    def record(self) -> dict:
        """The settings as the manifest records them (with the pattern's name and regex)."""
        pretokenizer = self.pretokenizer
        return {**asdict(self), "pattern": pretokenizer.name, "regex": pretokenizer.regex,
                "special_tokens": list(self.special_tokens)}  # fmt: skip

"""Training settings: a run's settings as they decide the merges, resolved and validated.

`Settings` holds the settings the schema (`bpe.schema`) marks as deciding the merges, plus what a
base tokenizer and a superword run's stage add; its fields and their checks come from the schema.
Errors name the setting (`tie_break: expected one of bytes, ids, got 'max'`), spelt as the surface
that shows them spells it (the `bpe` command: `--tie-break`).

>>> Settings(vocab_size=300, pattern="gpt2").n_merges()
44
"""

from __future__ import annotations

from dataclasses import asdict, field, fields, make_dataclass, replace

from bpe.engine import TIE_BREAKS
from bpe.engine.rules import MergeRules, SuperwordRules
from bpe.errors import SettingsError
from bpe.manifest import SettingsRecord
from bpe.pretokenize import DEFAULT_PATTERN, PATTERNS, Pretokenizer, superword_regex
from bpe.schema import ENGINES, RESOLVED, STAGES, SUPERWORD_KEYS, TEXT_FORMATS, On, check, on, parse_limit

__all__ = [
    "ENGINES",
    "PATTERNS",
    "STAGES",
    "SUPERWORD_KEYS",
    "TEXT_FORMATS",
    "TIE_BREAKS",
    "Settings",
    "parse_limit",
]


class _Settings:
    """Everything that decides the merges (plus where the text comes from), validated when made:
    the schema's settings marked `On.SETTINGS`, then what a run resolves (`bpe.schema.RESOLVED`)."""

    def __post_init__(self) -> None:
        if self.pattern is None:  # unset: a base's is resolved before (bpe.training.extend.base_settings)
            object.__setattr__(self, "pattern", DEFAULT_PATTERN)
        if isinstance(self.special_tokens, str):  # tuple() would make it its characters
            check("special_tokens", self.special_tokens)
        object.__setattr__(self, "special_tokens", tuple(self.special_tokens))
        for setting in FIELDS:
            check(setting.name, getattr(self, setting.name), setting)
        self._check_transition()
        self.n_merges()
        self._check_special_tokens_can_be_written()

    def _check_transition(self) -> None:
        """A superword run needs its transition, between the base's tokens and the final vocabulary."""
        if not self.superwords:
            if self.transition is not None:
                raise SettingsError(
                    lambda s: f"{s.transition}: only a superword run has one ({s.on('superwords')})",
                    parameter="transition",
                )
            return
        if self.transition is None:
            raise SettingsError(
                lambda s: f"{s.transition}: a superword run needs the vocabulary size where superwords start",
                parameter="transition",
            )
        least, most = self.byte_tokens + self.base_merges, self.vocab_size - len(self.special_tokens)
        if self.stage != "superwords" and not least <= self.transition <= most:
            raise SettingsError(
                lambda s: (
                    f"{s.transition}: expected a vocabulary size from {least:,} (the bytes and the base's "
                    f"merges) to {most:,} ({s.vocab_size} less the special tokens), got {self.transition:,}"
                ),
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
                    lambda s, token=token: (
                        f"{s.special_tokens}: {token!r} is spelled like a byte token in vocab.json; choose a "
                        "longer one, such as <|...|>"
                    ),
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
                lambda s: (
                    f"{s.vocab_size} {self.vocab_size} is too small: the {self.byte_tokens} byte tokens{merges} "
                    f"and {len(self.special_tokens)} special token(s) need at least {self.vocab_size - n}"
                ),
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

    @property
    def merge_rules(self) -> MergeRules:
        """The rules every engine merges by, built once from these settings."""
        return MergeRules(self.tie_break, self.min_frequency, self.max_token_length, self.superword_rules)

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
        values = asdict(self)
        recorded = {s.name: values[s.name] for s in FIELDS if On.RECORD in s.on}
        recorded.update(pattern=pretokenizer.name, regex=pretokenizer.regex, special_tokens=list(self.special_tokens))
        if self.superwords:
            recorded["superword_regex"] = superword_regex(self.superword_pattern)
        else:
            for key in ("superwords", *SUPERWORD_KEYS):
                del recorded[key]
        return {f.name: recorded[f.name] for f in fields(SettingsRecord) if f.name in recorded}  # the record's order


# Settings' fields: the schema's settings that decide the merges, and what a run resolves beyond them.
FIELDS = (*on(On.SETTINGS), *RESOLVED)


def _field(setting):
    default = tuple(setting.default) if isinstance(setting.default, (list, tuple)) else setting.default
    return setting.name, setting.type | None if setting.optional else setting.type, field(default=default)


Settings = make_dataclass(
    "Settings",
    [_field(setting) for setting in FIELDS],
    bases=(_Settings,),
    namespace={"__module__": __name__},  # pickled by reference (to Dask workers), as a class written here
    frozen=True,
)
Settings.__doc__ = _Settings.__doc__

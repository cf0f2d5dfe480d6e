"""Training text by language: which languages a run trains on, how their counts are weighted
(a mixture) and whether merges are chosen for parity between them.

Languages are named by codes (`eng`, `hin`) and always held in the sorted order of their codes,
whatever order they were given in, so that a configuration's key order never changes the merges.
Per-language inputs travel beside this plan in the same order (a list of shards, or of texts,
per language).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from bpe.engine.count import WordCounts
from bpe.engine.parity import ParityRule


@dataclass
class LanguageStats:
    """What was counted of one language: documents, bytes of text, pre-tokens (words) and unique
    words, and the integer its word counts were multiplied by (1 without a mixture)."""

    code: str
    documents: int = 0
    bytes: int = 0
    words: int = 0
    unique_words: int = 0
    multiplier: int = 1


@dataclass
class LanguagePlan:
    """A multilingual run as the engines see it. `codes` sorted; `mix` (a `bpe.mixture.Mix`, or None)
    turns each language's bytes into integer count multipliers after counting; `parity` (or None)
    chooses merges for parity; `dev` holds the parity dev set's counted pieces, one `WordCounts` per
    language in `codes` order (None: ratio targets, or training lengths)."""

    codes: tuple[str, ...]
    mix: object | None = None  # bpe.mixture.Mix
    parity: ParityRule | None = None
    dev: Sequence[WordCounts] | None = None
    stats: list[LanguageStats] = field(default_factory=list)  # filled by the engine that counted

    def __post_init__(self) -> None:
        if list(self.codes) != sorted(self.codes):
            raise ValueError(f"language codes must be sorted, got {list(self.codes)}")

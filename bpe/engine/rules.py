"""The merge rules: what decides which pair is merged beyond its count, one object built once
from a run's settings (`Settings.merge_rules`) and handed to every engine, and the superword
stage's rules on the words a token spans (SuperBPE).

Plain descriptions, which the pair queue's kernels apply (`pair_queue._may_make`); they live apart
from them so that the settings can name them without loading numba. Their values were checked
where they were given (`bpe.schema`), and their defaults are the schema's.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SuperwordRules:
    """Which superwords a merge may make (SuperBPE's second stage): tokens of at most `max_words`
    words, a word being a run of bytes other than the space (None: any number), and, unless
    `colon_space`, none that holds b": ". With the defaults, b" by the way" may be made, b" by the
    way it was" (5 words) and b"note: x" may not. Made from `Settings`, whose schema checks
    `max_words` (`bpe.schema`).
    """

    max_words: int | None
    colon_space: bool


@dataclass(frozen=True)
class MergeRules:
    """The rules every engine merges by: `tie_break` between pairs of equal count (`bytes`: the
    greatest pair of token byte strings; `ids`: of token ids), `min_frequency` (no pair counted
    fewer times is merged), `max_token_length` (bytes; None: no limit: no merge makes a longer
    token) and `superwords` (the superword stage's rules; None: ordinary BPE).

    >>> MergeRules("bytes", 1, None, None).limits_tokens
    False
    """

    tie_break: str
    min_frequency: int
    max_token_length: int | None
    superwords: SuperwordRules | None

    @property
    def limits_tokens(self) -> bool:
        """Whether a pair may be refused for the token it makes (its length, the superword rules)."""
        return self.max_token_length is not None or self.superwords is not None

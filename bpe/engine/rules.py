"""Which tokens the superword stage may make: SuperBPE's rules on the words a token spans.

A plain description, which the pair queue's kernels check (`pair_queue._may_make`); it lives apart
from them so that the settings can name it without loading numba.
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

    max_words: int | None = 4
    colon_space: bool = False

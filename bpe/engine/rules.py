"""Which tokens the superword stage may make: SuperBPE's rules on the words a token spans.

A plain description, checked in Python here and in the pair queue's kernels (`pair_queue._may_make`),
so that the settings can name it without loading numba.
"""

from __future__ import annotations

from dataclasses import dataclass

from bpe.engine.errors import SettingsError


@dataclass(frozen=True)
class SuperwordRules:
    """Which superwords a merge may make (SuperBPE's second stage): tokens of at most `max_words`
    words, a word being a run of bytes other than the space (None: any number), and, unless
    `colon_space`, none that holds b": ".

    >>> rules = SuperwordRules(max_words=2)
    >>> rules.allows(b" by the"), rules.allows(b" by the way"), rules.allows(b"note: x")
    (True, False, False)
    """

    max_words: int | None = 4
    colon_space: bool = False

    def __post_init__(self) -> None:
        if self.max_words is not None and (type(self.max_words) is not int or self.max_words < 1):
            raise SettingsError(
                f"max_words: expected an integer >= 1 or None (no limit), got {self.max_words!r}",
                parameter="max_words",
            )

    def allows(self, token: bytes) -> bool:
        """Whether a merge may make `token` (the plain Python form of the queue's check)."""
        if not self.colon_space and b": " in token:
            return False
        return self.max_words is None or len([word for word in token.split(b" ") if word]) <= self.max_words

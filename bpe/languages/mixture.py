"""Mixture weights: how much each language's text counts, applied exactly by multiplying its word
counts by an integer before the languages are summed.

Two forms (`--mix`, `train(mix=...)`, `mix:` in a configuration):

- `temperature=A` (0 <= A <= 1, the exponent of mT5 and XLM-R, which use 0.3): language l is
  sampled with probability proportional to `n_l ** A`, `n_l` its bytes of text. Sampling every
  document of l with that probability is the same, in expectation, as counting each of its words
  `w_l = n_l ** (A - 1)` times (`n_l * w_l = n_l ** A`): A = 1 leaves the text as it is, A = 0
  gives every language the same weight of text.
- `eng=1,hin=4`: explicit weights; hin's words count four times as much as they would next to
  eng's. Decimals are allowed (`eng=1,hin=2.5`); a language left out weighs 1.

The multipliers are the smallest integers in the weights' proportions, so that the counts stay
int64 integers and the merges are deterministic, the same on every engine, and those the reference
trainer gives on the multiplied counts. Explicit weights are kept exactly as written (at most three
decimals each): they are scaled by the least common multiple of their denominators and divided by
the greatest common divisor of the results (`eng=1,hin=2.5` gives 2 and 5). Temperature weights,
which are irrational, are first taken relative to the smallest (which becomes 1) and rounded to
thousandths (`round(1000 * w / w_min) / 1000`), then made integers the same way.
`min_frequency` applies to the multiplied counts.

>>> Mix.parse("eng=1,hin=2.5").multipliers([1000, 10], ["eng", "hin"])
(2, 5)
>>> Mix.parse("temperature=0.5").multipliers([400, 100], ["eng", "hin"])  # (400/100) ** 0.5 = 2
(1, 2)
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from bpe.engine.count import COUNT_LIMIT, WordCounts
from bpe.engine.errors import SettingsError
from bpe.languages.codes import language_error, parse_by_language

DENOMINATOR = 1000  # explicit weights are thousandths; temperature weights, relative to the smallest, rounded to them
_NUMBER = re.compile(r"\s*[0-9]+(?:\.[0-9]*)?\s*|\s*\.[0-9]+\s*")


@dataclass(frozen=True)
class Mix:
    """A mixture: `temperature` (the exponent A of `n_l ** A`) or explicit `weights` (code ->
    weight, as exact fractions of what was written). `given` is the text as the user wrote it."""

    temperature: float | None = None
    weights: Mapping[str, Fraction] = field(default_factory=dict)
    given: str = ""

    @classmethod
    def parse(cls, text: str) -> Mix:
        """`temperature=0.3` or `eng=1,hin=4` (errors name the setting: `--mix`, `mix`)."""
        if not isinstance(text, str) or not text.strip():
            raise _error(f"expected temperature=A (0 <= A <= 1) or weights such as eng=1,hin=4, got {text!r}")
        head, _, value = text.partition("=")
        if head.strip() == "temperature":
            return cls(temperature=_temperature(value), given=text.strip())
        pairs = parse_by_language(text, "mix", _weight)
        return cls(weights=dict(pairs), given=text.strip())

    @classmethod
    def of(cls, value: object) -> Mix:
        """A mixture as `train()` and a configuration may give it: the text, a mapping
        (`{"temperature": 0.3}` or `{"eng": 1, "hin": 4}`), or a Mix."""
        if isinstance(value, Mix):
            return value
        if isinstance(value, Mapping):
            text = ",".join(f"{key}={number}" for key, number in value.items())
            if any(not isinstance(v, (int, float, str)) or isinstance(v, bool) for v in value.values()):
                raise _error(f"expected a number for each key, got {dict(value)!r}")
            return cls.parse(text)
        if not isinstance(value, str):
            raise _error(f"expected temperature=A or weights such as eng=1,hin=4, got {value!r}")
        return cls.parse(value)

    def check_codes(self, codes: Sequence[str]) -> None:
        """Refuse explicit weights for a language the run does not train on."""
        unknown = [code for code in self.weights if code not in codes]
        if unknown:
            raise _error(f"{unknown[0]} is not one of the run's languages ({', '.join(codes)})")

    def weights_for(self, bytes_by_language: Sequence[int], codes: Sequence[str]) -> list[float | Fraction]:
        """Each language's weight before rounding, in `codes` order."""
        if self.temperature is None:
            self.check_codes(codes)
            return [self.weights.get(code, Fraction(1)) for code in codes]
        empty = [code for code, n in zip(codes, bytes_by_language, strict=True) if n <= 0]
        if empty:
            raise _error(f"temperature needs text in every language; {empty[0]} has none")
        largest = max(bytes_by_language)
        # n_l ** (A - 1), relative to the largest language's (1): (largest / n_l) ** (1 - A) >= 1
        return [(largest / n) ** (1 - self.temperature) for n in bytes_by_language]

    def multipliers(self, bytes_by_language: Sequence[int], codes: Sequence[str]) -> tuple[int, ...]:
        """The integer each language's word counts are multiplied by, in `codes` order (the run's
        languages, sorted): the smallest integers in the weights' proportions, explicit weights as
        written, temperature weights to a thousandth of the smallest (see the module's doc)."""
        if len(bytes_by_language) != len(codes):
            raise ValueError(f"{len(bytes_by_language)} byte counts for {len(codes)} languages")
        weights = self.weights_for(bytes_by_language, codes)
        if self.temperature is None:
            relative = [Fraction(w) for w in weights]  # exactly as written
        else:
            smallest = Fraction(min(weights))
            relative = [Fraction(round(Fraction(w) / smallest * DENOMINATOR), DENOMINATOR) for w in weights]
        scale = math.lcm(*(r.denominator for r in relative))
        whole = [int(r * scale) for r in relative]
        divisor = math.gcd(*whole)
        return tuple(w // divisor for w in whole)

    def record(self) -> dict:
        """The mixture as the manifest records it: as given, and its form's values."""
        if self.temperature is not None:
            return {"given": self.given, "temperature": self.temperature}
        return {"given": self.given, "weights": {code: _plain(w) for code, w in sorted(self.weights.items())}}


def weighted_sum(counts: Sequence[WordCounts], multipliers: Sequence[int]) -> WordCounts:
    """The languages' word counts as one, each multiplied by its multiplier first (a word in
    several languages sums its weighted counts). Refused in one line naming the mixture when the
    weighted counts would pass what the merge loop counts exactly in int64 (`COUNT_LIMIT`)."""
    return WordCounts.combine(weighted(counts, multipliers))


def weighted(counts: Sequence[WordCounts], multipliers: Sequence[int]) -> list[WordCounts]:
    """Each language's word counts multiplied by its multiplier (the same object for 1), after
    checking that the weighted bytes of all word occurrences stay below `COUNT_LIMIT`."""
    check_weighted_limit(counts, multipliers)
    return [
        c if m == 1 else WordCounts(c.data, c.offsets, c.counts * np.int64(m))
        for c, m in zip(counts, multipliers, strict=True)
    ]


def check_weighted_limit(counts: Sequence[WordCounts], multipliers: Sequence[int]) -> None:
    """Refuse (SettingsError naming the mixture) multipliers that would take the bytes of all word
    occurrences, each counted `multiplier` times, to `COUNT_LIMIT` (2**62) or past it."""
    if all(m == 1 for m in multipliers):
        return
    estimate = 0.0
    for c, m in zip(counts, multipliers, strict=True):
        estimate += c.occurrence_bytes_estimate() * m
    if estimate < COUNT_LIMIT / 2:
        return  # far from the limit, whatever the rounding
    exact = 0
    for c, m in zip(counts, multipliers, strict=True):
        lengths = np.diff(c.offsets).tolist()
        exact += m * sum(count * length for count, length in zip(c.counts.tolist(), lengths))
    _refuse_past_limit(exact, multipliers)


def check_weighted_bytes(bytes_by_language: Sequence[int], multipliers: Sequence[int]) -> None:
    """`check_weighted_limit` from each language's bytes of text (which its words' bytes never
    exceed), before its counts are read: for an engine that weighs counts where they are."""
    _refuse_past_limit(sum(n * m for n, m in zip(bytes_by_language, multipliers, strict=True)), multipliers)


def _refuse_past_limit(weighted_bytes: int, multipliers: Sequence[int]) -> None:
    if weighted_bytes >= COUNT_LIMIT:
        raise _error(
            f"the multipliers {', '.join(map(str, multipliers))} make the bytes of all word occurrences come to "
            f"{weighted_bytes:,}, past the {COUNT_LIMIT:,} (2**62, half of what int64 holds) that the merge loop's "
            "pair counts can take; use weights closer to each other, or less text"
        )


def _temperature(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if math.isnan(number):
        raise _error(f"expected temperature=A, A a number from 0 to 1 (mT5 uses 0.3), got temperature={value}")
    if not 0 <= number <= 1:
        raise _error(
            f"expected temperature=A with A from 0 to 1 (the exponent of n ** A; for a temperature T, A = 1/T), "
            f"got {number:g}"
        )
    return number


def _weight(code: str, value: str) -> Fraction:
    """An explicit weight: a positive decimal number of at most three decimals, exactly as written."""
    if not _NUMBER.fullmatch(value) or Fraction(value.strip()) <= 0:
        raise _error(f"expected a positive number as {code}'s weight, got {code}={value.strip()}")
    weight = Fraction(value.strip())
    if DENOMINATOR % weight.denominator:
        raise _error(f"a weight has at most three decimals, got {code}={value.strip()}")
    return weight


def _plain(weight: Fraction) -> int | float:
    return int(weight) if weight.denominator == 1 else float(weight)


def _error(message: str) -> SettingsError:
    return language_error("mix", message)

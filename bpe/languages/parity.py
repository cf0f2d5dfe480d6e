"""Parity between languages: the target ratios of `parity_ratio` (`eng=1,hin=2.5`), which stand
in for a dev set's lengths when parity-aware merges choose which language each merge serves."""

from __future__ import annotations

import math
from collections.abc import Mapping

from bpe.languages.codes import language_error, parse_by_language


def parity_ratios(value: str | Mapping) -> dict[str, float]:
    """`eng=1,hin=2.5` (or the mapping) as {code: ratio}: each a positive finite number."""

    def ratio(code: str, text: str) -> float:
        try:
            number = float(text)
        except ValueError:
            number = math.nan
        if not (math.isfinite(number) and number > 0):
            raise language_error("parity_ratio", f"expected a positive number as {code}'s ratio, got {code}={text}")
        return number

    if isinstance(value, Mapping):
        for v in value.values():
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise language_error("parity_ratio", f"expected a number per language, got {dict(value)!r}")
        value = ",".join(f"{code}={number!r}" for code, number in value.items())
    if not isinstance(value, str) or not value.strip():
        raise language_error("parity_ratio", f"expected a ratio per language such as eng=1,hin=2.5, got {value!r}")
    return dict(parse_by_language(value, "parity_ratio", ratio))

"""Training text by language: which languages a run trains on, how their counts are weighted
(a mixture) and whether merges are chosen for parity between them.

Languages are named by codes (`eng`, `hin`) and always held in the sorted order of their codes,
whatever order they were given in, so that a configuration's key order never changes the merges.
Per-language inputs travel beside this plan in the same order (a list of shards, or of texts,
per language).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from bpe.engine.errors import SettingsError, Spelling

if TYPE_CHECKING:  # the compiled engine is loaded only by a run that uses it
    from bpe.engine.count import WordCounts
    from bpe.engine.parity import ParityRule


@dataclass
class LanguageStats:
    """What was counted of one language: documents, bytes of text, pre-tokens (words) and unique
    words, the integer its word counts were multiplied by (1 without a mixture), and the documents
    held out for evaluation (the pipeline's `holdout_fraction`), which are not counted."""

    code: str
    documents: int = 0
    bytes: int = 0
    words: int = 0
    unique_words: int | None = 0  # None: not known apart (the pipeline sums the languages' words on the workers)
    multiplier: int = 1
    held_out: int = 0


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
    dev_record: dict | None = None  # the dev set's directory and files (path, size, sha256), for the manifest

    def __post_init__(self) -> None:
        if list(self.codes) != sorted(self.codes):
            raise ValueError(f"language codes must be sorted, got {list(self.codes)}")


# A language code: ISO 639-3 (`eng`, `hin`) or any other lower-case name of letters, digits, _ and -.
CODE = re.compile(r"[a-z][a-z0-9_-]*")


def check_code(code: object, name: str) -> str:
    """`code` if it is a language code; SettingsError naming the setting (`name`, spelt by the
    surface that shows it) otherwise."""
    if not isinstance(code, str) or CODE.fullmatch(code) is None:
        raise language_error(
            name,
            f"{code!r} is not a language code (lower-case letters, digits, _ or -, starting with a letter: eng, hin)",
        )
    return code


def parse_by_language(text: str, name: str, value: Callable[[str, str], Any]) -> list[tuple[str, Any]]:
    """`eng=1,hin=2.5` as [(code, value(code, "1")), ...] in the order given, each code checked and
    given once; errors name the setting `name`."""
    found: list[tuple[str, Any]] = []
    for part in text.split(","):
        code, equals, given = part.partition("=")
        if not equals:
            raise language_error(name, f"expected code=value pairs separated by commas (eng=1,hin=2), got {part!r}")
        code = check_code(code.strip(), name)
        if code in dict(found):
            raise language_error(name, f"{code} is given twice")
        found.append((code, value(code, given)))
    return found


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


def language_of(name: str) -> str | None:
    """The language code a directory entry is named by: `eng.txt`, `eng.jsonl.gz` and `eng` (a
    folder) are eng's; a name that does not start with a code (`README.md`, `.eng.txt`) is no
    language's (None).

    >>> [language_of(n) for n in ("eng.txt", "hin", "zho.jsonl.gz", "README.md", ".eng.txt")]
    ['eng', 'hin', 'zho', None, None]
    """
    code = name.split(".", 1)[0]
    return code if CODE.fullmatch(code) else None


def language_error(name: str, message: str) -> SettingsError:
    """`<setting>: <message>`, the setting spelt as the surface that shows it spells it."""
    return SettingsError(partial(_named, name, message), parameter=name)


def _named(name: str, message: str, spelling: Spelling) -> str:
    return f"{spelling(name)}: {message}"  # a module's function: it pickles (to a Dask client)

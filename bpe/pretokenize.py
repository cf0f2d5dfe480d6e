"""Pre-tokenization: split text into pieces ("words") that merges never cross.

Named patterns are exactly the released tokenizers' regexes; `whitespace` is the textbook
`str.split()`. Special tokens are cut out first and never reach the pattern:

>>> Pretokenizer("gpt2", ["<|endoftext|>"]).split("Hi there<|endoftext|>!")
['Hi', ' there', '<|endoftext|>', '!']
"""

from __future__ import annotations

import string
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import regex

from bpe.errors import SettingsError

# As tiktoken spells them today (tiktoken_ext/openai_public.py).
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
CL100K_PATTERN = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
# SuperBPE's second stage (Liu et al. 2025; the regex of scripts/extend_tokenizer.sh in
# PythonNut/superbpe), a Split that keeps the text between its matches: digits in groups of 1-3, runs
# of two or more other symbols, and runs of spaces before a space or the end are pieces; what lies
# between them (letters, single spaces, single symbols) is one piece, so merges cross words.
SUPERBPE_SPLIT = r"""\p{N}{1,3}| ?[^\s\p{L}\p{N}]{2,}[\r\n/]*| +(?!\S)"""


def isolated(split: str) -> str:
    r"""The regex whose matches are `split`'s matches and the text between them, as Hugging Face's
    `Split(pattern, behavior="isolated")` cuts: a pattern every regex engine reads as tiktoken does
    (every match a piece). A pattern already in this form is returned as it is.

    >>> regex.findall(isolated(r"\d+"), "ab12cd")
    ['ab', '12', 'cd']
    >>> isolated(isolated(r"\d+")) == isolated(r"\d+")
    True
    """
    if _isolated_inner(split) is not None:
        return split
    return _ISOLATED_HEAD + split + _ISOLATED_MIDDLE + split + _ISOLATED_TAIL


_ISOLATED_HEAD, _ISOLATED_MIDDLE, _ISOLATED_TAIL = "(?:", ")|(?:(?!(?:", "))[\\s\\S])+"


def _isolated_inner(pattern: str) -> str | None:
    """The split `pattern` is `isolated(split)` of, or None if it is not of that form."""
    if not (pattern.startswith(_ISOLATED_HEAD) and pattern.endswith(_ISOLATED_TAIL)):
        return None
    both = pattern[len(_ISOLATED_HEAD) : len(pattern) - len(_ISOLATED_TAIL)]
    half, odd = divmod(len(both) - len(_ISOLATED_MIDDLE), 2)
    split = both[:half]
    return split if not odd and both == split + _ISOLATED_MIDDLE + split else None


# `str.split()` splits on exactly these characters: regex's \s plus the four ASCII separators.
WHITESPACE_PATTERN = r"""[^\s\x1c-\x1f]+"""

NAMED_PATTERNS = {
    "gpt2": GPT2_PATTERN,
    "cl100k": CL100K_PATTERN,
    "o200k": O200K_PATTERN,
    "whitespace": WHITESPACE_PATTERN,
    "superbpe": isolated(SUPERBPE_SPLIT),
}
PATTERNS = tuple(NAMED_PATTERNS)
# The superword stage's split when none is named: the paper's.
SUPERWORD_PATTERN = "superbpe"
# The pattern when none is named: `train`, `bpe train`, `Tokenizer(merges)` and the pipeline alike.
DEFAULT_PATTERN = "cl100k"

# The `whitespace` pattern spelled for other regex engines, as tokenizer.json and tiktoken carry it:
# the characters str.split() splits on, as one class (regex's \s and \x1c-\x1f). Code points above
# ASCII are written \uHHHH: Oniguruma (Hugging Face) reads \xHH as a byte, so \xa0 would never match
# U+00A0, whose UTF-8 is two bytes.
WHITESPACE_CHARS = (
    "\\t\\n\\x0b\\x0c\\r\\x1c\\x1d\\x1e\\x1f \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
)
WHITESPACE_RUN = f"[{WHITESPACE_CHARS}]+"
WHITESPACE_WORD = f"[^{WHITESPACE_CHARS}]+"


def superword_regex(pattern: str) -> str:
    """The split of a superword stage: a pattern's name as it stands (`superbpe`, the paper's), or a
    regex read as Hugging Face's `Split(behavior="isolated")` reads it: its matches and the text
    between them are the pieces (see `isolated`)."""
    if pattern in NAMED_PATTERNS:
        return NAMED_PATTERNS[pattern]
    try:
        resolve_pattern(pattern)  # a bad regex, or one that can match the empty string
    except SettingsError as exc:
        raise SettingsError(f"superword_{exc}", parameter="superword_pattern") from None
    return isolated(pattern)


def resolve_pattern(pattern: str) -> tuple[str, str]:
    """(name, regex) for a pattern name or a user regex; a bad regex, or one that can match the
    empty string, raises SettingsError (a ValueError)."""
    if pattern in NAMED_PATTERNS:
        return pattern, NAMED_PATTERNS[pattern]
    try:
        compiled = regex.compile(pattern)
    except regex.error as exc:
        raise SettingsError(
            f"pattern: not a known name ({', '.join(NAMED_PATTERNS)}) nor a valid regex: {exc}", parameter="pattern"
        ) from None
    where = empty_match_probe(compiled)
    if where is not None:
        raise SettingsError(
            f"pattern: {pattern!r} can match the empty string ({where}); every piece it cuts must hold at least "
            "one character",
            parameter="pattern",
        )
    for name, known in NAMED_PATTERNS.items():
        if pattern == known:
            return name, known
    return "custom", pattern


# Whether a regex can match the empty string anywhere, in any text, cannot be decided by trying it,
# so we try it on probes: the empty text, one character of each common kind, and a text holding
# all of them. `fullmatch("")` alone only asks about the empty text and misses `(?=x)` or `\b`,
# which match empty only next to certain characters; `search` alone stops at the first match and
# misses `a|(?<=a)` on "a". So every match `finditer` finds in every probe must be non-empty.
# An empty piece would make tiktoken panic when encoding, and give the counters nothing to count.
EMPTY_PROBES = ("", "a", " ", "1", "\n", "é", "!", string.printable + "é ÀßДж中🙂\u00a0\u3000\u0301¹")


def empty_match_probe(compiled: regex.Pattern) -> str | None:
    """Where `compiled` first finds an empty match in the probes ("before 'x'"), or None if nowhere."""
    for probe in EMPTY_PROBES:
        for m in compiled.finditer(probe):
            if m.start() == m.end():
                if not probe:
                    return "in the empty text"
                return f"before {probe[m.start()]!r}" if m.start() < len(probe) else f"after {probe[-1]!r}"
    return None


@dataclass(frozen=True)
class Pretokenizer:
    """A split pattern plus the special tokens that are cut out before it applies."""

    pattern: str = DEFAULT_PATTERN
    special_tokens: Sequence[str] = ()
    name: str = field(init=False)
    regex: str = field(init=False)

    def __post_init__(self) -> None:
        name, pattern_regex = resolve_pattern(self.pattern)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "regex", pattern_regex)
        object.__setattr__(self, "special_tokens", tuple(self.special_tokens))
        for token in self.special_tokens:
            if not token:
                raise SettingsError("special_tokens: a special token cannot be empty", parameter="special_tokens")
        if len(set(self.special_tokens)) != len(self.special_tokens):
            raise SettingsError("special_tokens: the same special token is given twice", parameter="special_tokens")

    @property
    def compiled(self) -> regex.Pattern:
        return _compile(self.regex)

    @property
    def special_regex(self) -> regex.Pattern | None:
        """Matches any special token, longest first, so `<|a|>` never hides `<|a|>b`."""
        if not self.special_tokens:
            return None
        ordered = sorted(self.special_tokens, key=len, reverse=True)
        return _compile("(" + "|".join(regex.escape(t) for t in ordered) + ")")

    def segments(self, text: str) -> Iterator[tuple[str, bool]]:
        """(segment, is_special) in order; ordinary segments are pre-tokenized independently."""
        special = self.special_regex
        if special is None:
            if text:
                yield text, False
            return
        for i, part in enumerate(special.split(text)):
            if part:
                yield part, i % 2 == 1

    def split_ordinary(self, text: str) -> list[str]:
        """Pieces of text that holds no special token."""
        if self.name == "whitespace":
            return text.split()
        return self.compiled.findall(text)

    def split(self, text: str) -> list[str]:
        """All pieces of text, special tokens included as pieces of their own."""
        pieces: list[str] = []
        for segment, is_special in self.segments(text):
            if is_special:
                pieces.append(segment)
            else:
                pieces.extend(self.split_ordinary(segment))
        return pieces


_COMPILED: dict[str, regex.Pattern] = {}


def _compile(pattern: str) -> regex.Pattern:
    if pattern not in _COMPILED:
        _COMPILED[pattern] = regex.compile(pattern)
    return _COMPILED[pattern]


@lru_cache(maxsize=1)
def scanner_tables():
    """(classes, folds): per code point, the character classes the compiled scanners test (bits of
    `bpe.engine.scanner`: letter, number, space, ...) and which contraction letter it matches
    under (?i), both read off the `regex` module, so that scanner and regex agree on every code
    point. numpy arrays of 0x110000 uint8 each; built once per process (about a second)."""
    import numpy as np

    from bpe.engine import scanner

    codepoints = np.arange(0x110000, dtype=np.uint32)
    codepoints[0xD800:0xE000] = 0  # surrogates never occur in decoded UTF-8
    every_char = codepoints.tobytes().decode("utf-32-le")
    classes = np.zeros(0x110000, dtype=np.uint8)
    for bit, char_class in (
        (scanner.LETTER, r"\p{L}"),
        (scanner.NUMBER, r"\p{N}"),
        (scanner.SPACE, r"\s"),
        (scanner.UPPERISH, r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]"),
        (scanner.LOWERISH, r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"),
        (scanner.SPLIT_SPACE, r"[\s\x1c-\x1f]"),
    ):
        for run in regex.finditer(char_class + "+", every_char):
            classes[run.start() : run.end()] |= bit
    folds = np.zeros(0x110000, dtype=np.uint8)
    for i, letter in enumerate(scanner.FOLD_LETTERS):
        for match in regex.finditer(f"(?i:{letter})", every_char):
            folds[match.start()] |= 1 << i
    classes[0xD800:0xE000] = 0
    return classes, folds

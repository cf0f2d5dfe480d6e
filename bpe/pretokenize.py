"""Pre-tokenization: split text into pieces ("words") that merges never cross.

Named patterns are exactly the released tokenizers' regexes; `whitespace` is the textbook
`str.split()`, the one pattern that drops text (the whitespace). Any other regex is read as Hugging
Face reads it in a tokenizer.json (`split_isolated`): its matches and the text between them are the
pieces. Special tokens are cut out first and never reach the pattern:

>>> Pretokenizer("gpt2", ["<|endoftext|>"]).split("Hi there<|endoftext|>!")
['Hi', ' there', '<|endoftext|>', '!']
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache, partial
from pathlib import Path

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


def superword_regex(pattern: str, setting: str = "superword_pattern", given: bool = False) -> str:
    """The split of a superword stage: a pattern's name as it stands (`superbpe`, the paper's), or a
    regex, as `isolated(regex)`: Hugging Face's `Split` (and so `split_isolated`) cuts it as it cuts
    the regex itself, and earlier runs recorded it in this form. A bad regex raises SettingsError
    naming `setting` (`given`: as `resolve_pattern`)."""
    if pattern in NAMED_PATTERNS:
        return NAMED_PATTERNS[pattern]
    resolve_pattern(pattern, setting, given)  # a bad regex
    return isolated(pattern)


def resolve_pattern(pattern: str, setting: str = "pattern", given: bool = False) -> tuple[str, str]:
    """(name, regex) for a pattern name or a user regex; a regex that does not compile raises
    SettingsError (a ValueError) naming `setting`. A regex a user `given` is a tokenizer.json's, so
    an inline flag Oniguruma refuses (`(?s)`) is refused too; one read from a tiktoken encoding is
    in the `regex` module's spelling, which `to_tiktoken` writes with `(?s)`."""
    if pattern in NAMED_PATTERNS:
        return pattern, NAMED_PATTERNS[pattern]
    try:
        if given:
            oniguruma_regex(pattern, ruby_flags=True)
        compile_split(pattern)
    except regex.error as exc:
        why = str(exc)  # `exc` is unbound after the except clause, where a message may be composed again
        raise SettingsError(
            lambda s: f"{s(setting)}: not a known name ({', '.join(NAMED_PATTERNS)}) nor a valid regex: {why}",
            parameter=setting,
        ) from None
    except ReadOtherwise as exc:
        held, instead = str(exc), exc.instead
        raise SettingsError(
            lambda s: (
                f"{s(setting)}: {pattern!r} holds {held}, which Hugging Face's regex engine (Oniguruma) does not "
                f"read as the `regex` module does; {instead}"
            ),
            parameter=setting,
        ) from None
    for name, known in NAMED_PATTERNS.items():
        if pattern == known:
            return name, known
    return "custom", pattern


# -- a user's regex, read as Hugging Face reads it --------------------------------------------
#
# A regex that is not one of the named patterns means what it means in a tokenizer.json: Hugging
# Face's `Split(regex, behavior="isolated")`, run by Oniguruma. Its matches are pieces, the text
# between them is pieces too, and an empty match only marks a place where one piece ends and the
# next begins. So no text is ever dropped, and our pieces are Hugging Face's: `split_isolated`
# iterates as Oniguruma does, on the `regex` module's spelling of the pattern (`oniguruma_regex`).

# Oniguruma's \w outside a character class: Unicode's word characters (not the joiners U+200C and
# U+200D, which the `regex` module counts) and, from its Latin-1 table, the superscripts ¹²³ and the
# fractions ¼½¾. Inside a class it leaves those six out. \b and \B follow the class outside.
_WORD_ITEMS = r"\p{Alphabetic}\p{M}\p{Nd}\p{Pc}"
_WORD = rf"[{_WORD_ITEMS}\xb2\xb3\xb9\xbc-\xbe]"
_NOT_WORD = rf"[^{_WORD_ITEMS}\xb2\xb3\xb9\xbc-\xbe]"
_OUTSIDE_CLASS = {
    "w": _WORD,
    "W": _NOT_WORD,
    "b": f"(?:(?<={_WORD})(?!{_WORD})|(?<!{_WORD})(?={_WORD}))",
    "B": f"(?:(?<={_WORD})(?={_WORD})|(?<!{_WORD})(?!{_WORD}))",
    "Z": r"(?=\n?\z)",  # Oniguruma's \Z, like Perl's: the end, or before a final newline
}
# Oniguruma's (Ruby's) `^` and `$` match at the start and end of every line, not only of the text:
# `^` at the start, or after a newline that does not end the text (`[\W]^` takes nothing of "{\n"),
# `$` before a newline or at the end.
_ANCHORS = {"^": r"(?:\A|(?<=\n)(?!\z))", "$": r"(?=\n|\z)"}
_INSIDE_CLASS = {"w": _WORD_ITEMS, "W": r"\W\u200c\u200d", "h": "0-9a-fA-F"}
_OUTSIDE_CLASS.update(h="[0-9a-fA-F]", H="[^0-9a-fA-F]")  # Oniguruma's \h is a hexadecimal digit
# POSIX classes that Oniguruma reads as Unicode classes other than the `regex` module's ([:digit:]
# is every decimal digit, not 0-9), and those (with \H in a class) that no class item here spells.
_POSIX = {
    "[:digit:]": r"\p{Nd}",
    "[:^digit:]": r"\P{Nd}",
    "[:alnum:]": r"\p{Alphabetic}\p{Nd}",
    "[:word:]": _WORD_ITEMS,
}
_UNSPELLED = ("[:punct:]", "[:^punct:]", "[:^alnum:]", "[:^word:]")
# tiktoken's regex engine (Rust's) reads every POSIX class as ASCII only, where Oniguruma and the
# `regex` module read these as Unicode classes (the same code points, checked over all of Unicode);
# any other POSIX class is not spelled for it.
_TIKTOKEN_POSIX = {
    **_POSIX,
    "[:alpha:]": r"\p{Alphabetic}",
    "[:^alpha:]": r"\P{Alphabetic}",
    "[:space:]": r"\p{White_Space}",
    "[:^space:]": r"\P{White_Space}",
    "[:upper:]": r"\p{Uppercase}",
    "[:^upper:]": r"\P{Uppercase}",
    "[:lower:]": r"\p{Lowercase}",
    "[:^lower:]": r"\P{Lowercase}",
}


class ReadOtherwise(ValueError):
    """A part of a regex that Oniguruma reads otherwise and that `oniguruma_regex` cannot rewrite;
    `instead` says what to write."""

    def __init__(self, held: str, instead: str = "name the characters instead") -> None:
        super().__init__(held)
        self.instead = instead


# An inline flag group, `(?i)`, `(?i-x:`: Oniguruma's (Ruby's) `m` is the `regex` module's `s`.
_FLAGS = regex.compile(r"\(\?[a-zA-Z]*(?:-[a-zA-Z]*)?[:)]")
# The inline flags Oniguruma's Ruby syntax reads; any other (`s`, `a`, `L`, `V1`, ...) it refuses.
_RUBY_FLAGS = set("imx")


def oniguruma_regex(pattern: str, ruby_flags: bool = False, tiktoken: bool = False) -> str:
    r"""`pattern` spelled for the `regex` module (and tiktoken's engine) so that it matches as
    Oniguruma, Hugging Face's regex engine, matches it: \w, \W, \b, \B, \h, \Z and POSIX classes as
    Oniguruma defines them, `^` and `$` at every line's start and end, inline flag `m` as
    Oniguruma's (`s` here). A rewritten pattern, rewritten again, matches the same. ReadOtherwise
    for what cannot be rewritten (see `_UNSPELLED`), and with `ruby_flags` for an inline flag
    Oniguruma refuses (`(?s)`: its dot-matches-newline is `(?m)`). With `tiktoken`, spelled for
    tiktoken's engine, which reads POSIX classes as ASCII only: as Unicode classes, or ReadOtherwise.

    >>> oniguruma_regex(r"[\w-]+|(?m:.)$")
    '[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}-]+|(?s:.)(?=\\n|\\z)'
    """
    out: list[str] = []
    i, n = 0, len(pattern)
    class_from = None  # inside a class: where its first item starts (a ']' there is a literal)
    while i < n:
        char = pattern[i]
        if char == "\\" and i + 1 < n:
            escape = pattern[i + 1]
            table = _OUTSIDE_CLASS if class_from is None else _INSIDE_CLASS
            if class_from is not None and escape == "H":
                raise ReadOtherwise("\\H in a class")
            out.append(table.get(escape, pattern[i : i + 2]))
            i += 2
        elif class_from is not None:
            end = pattern.find(":]", i + 2) if pattern.startswith("[:", i) else -1
            if end != -1:  # a POSIX class, [:alpha:]
                name = pattern[i : end + 2]
                if name in _UNSPELLED or (tiktoken and name not in _TIKTOKEN_POSIX):
                    raise ReadOtherwise(name)
                out.append((_TIKTOKEN_POSIX if tiktoken else _POSIX).get(name, name))
                i = end + 2
                continue
            if char == "]" and i > class_from:
                class_from = None
            out.append(char)
            i += 1
        elif char == "[":
            start = i + 2 if pattern.startswith("^", i + 1) else i + 1
            out.append(pattern[i:start])
            class_from, i = start, start
        elif (flags := _FLAGS.match(pattern, i)) is not None:
            if ruby_flags and (unread := sorted(set(flags.group()[2:-1]) - _RUBY_FLAGS - {"-"})):
                advice = "use (?m) for a dot that matches newlines" if "s" in unread else "use only i, m and x"
                raise ReadOtherwise(f"the inline flag {''.join(unread)} in {flags.group()}", advice)
            out.append(flags.group().replace("m", "s"))
            i = flags.end()
        elif char in _ANCHORS:
            out.append(_ANCHORS[char])
            i += 1
        else:
            out.append(char)
            i += 1
    return "".join(out)


@lru_cache(maxsize=256)
def compile_split(pattern: str) -> regex.Pattern:
    """A user's regex compiled to match as Oniguruma does (see `oniguruma_regex`); regex.error if
    it does not compile."""
    return regex.compile(oniguruma_regex(pattern))


@lru_cache(maxsize=256)
def splitter(pattern: str) -> Callable[[str], list[str]]:
    """The function that cuts text into a user's regex's pieces: `split_isolated`, or, where the
    regex has no capture group and cannot match the empty string, the `regex` module's own split
    by the regex made one group (the same pieces, cut in C: about twice as fast)."""
    compiled = compile_split(pattern)
    if compiled.groups or can_match_empty(pattern):
        return partial(split_isolated, compiled)
    split = regex.compile(f"({oniguruma_regex(pattern)})").split

    def pieces(text: str) -> list[str]:
        return list(filter(None, split(text)))  # the text before each match, the match, ...

    return pieces


def split_isolated(compiled: regex.Pattern, text: str) -> list[str]:
    r"""The pieces of Hugging Face's `Split(pattern, behavior="isolated")`: every match, and the
    text between matches, in order; empty matches cut the text between them but are no pieces.
    The search goes on as Oniguruma's does (Hugging Face's `find_iter`): after an empty match it
    resumes one character further on, even where a longer match starts at the same place. With
    capture groups, a match is the whole match.

    >>> split_isolated(compile_split(r"\d+"), "ab12cd"), split_isolated(compile_split(r"(?=ab)|abc|(b)"), "abc")
    (['ab', '12', 'cd'], ['a', 'b', 'c'])
    """
    pieces: list[str] = []
    cut = start = 0  # where the last piece ended; where the search goes on
    searching = True
    while searching:
        searching = False
        for match in compiled.finditer(text, start):
            begin, end = match.span()
            if begin > cut:
                pieces.append(text[cut:begin])
            cut = end
            if begin == end:  # Oniguruma searches again one character on: so does a new iterator
                start, searching = end + 1, end < len(text)
                break
            pieces.append(text[begin:end])
    if cut < len(text):
        pieces.append(text[cut:])
    return pieces


def can_match_empty(pattern: str) -> bool:
    r"""Whether a regex might match the empty string somewhere (in some text, at some place): False
    only when each of its alternatives must consume a character. Decided from its syntax tree, not
    by trying texts, which cannot find `\w+|(?<=zq)`'s empty match unless a text holds "zq"; a
    pattern that the standard library's parser cannot read is taken to match it."""
    import re._parser as sre_parse  # the standard library's own regex parser

    readable = regex.sub(
        r"\\\\|\\[pP](?:\{[^}]*\}|[A-Za-z])", lambda m: "x" if m.group() != "\\\\" else m.group(), pattern
    )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # its FutureWarning on `[[`, which the `regex` module reads well
            parsed = sre_parse.parse(readable)
    except Exception:  # syntax only the `regex` module reads
        return True
    return _nullable(parsed)


def _nullable(items) -> bool:
    """Whether a parsed sequence can match empty; lookarounds, anchors and back references can."""
    for op, arg in items:
        name = str(op)
        if name in ("LITERAL", "NOT_LITERAL", "ANY", "IN", "RANGE", "CATEGORY"):
            return False
        if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            if arg[0] > 0 and not _nullable(arg[2]):
                return False
        elif name == "SUBPATTERN":
            if not _nullable(arg[-1]):
                return False
        elif name == "ATOMIC_GROUP":
            if not _nullable(arg):
                return False
        elif name == "BRANCH":
            if not any(_nullable(branch) for branch in arg[1]):
                return False
    return True


# The most special tokens a tokenizer may have. Released tokenizers have a few hundred (Llama 3
# reserves 256) to a few thousand; the encoders match every one with a regex (tiktoken's takes
# about 5 KB a token: some 300 MB at this bound, where 1.6 million took 7.4 GB).
MAX_SPECIAL_TOKENS = 1 << 16


def too_many_special_tokens(count: int) -> str | None:
    """Why `count` special tokens are more than a tokenizer may have, in words; None if they are not."""
    if count <= MAX_SPECIAL_TOKENS:
        return None
    return (
        f"{count:,} special tokens, more than {MAX_SPECIAL_TOKENS:,}, the most a tokenizer may have (released ones "
        "have a few thousand at most, and each costs the encoder about 5 KB)"
    )


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
        if (problem := too_many_special_tokens(len(self.special_tokens))) is not None:
            raise SettingsError(lambda s: f"{s.special_tokens}: {problem}", parameter="special_tokens")
        for token in self.special_tokens:
            if not token:
                raise SettingsError(
                    lambda s: f"{s.special_tokens}: a special token cannot be empty", parameter="special_tokens"
                )
        if len(set(self.special_tokens)) != len(self.special_tokens):
            raise SettingsError(
                lambda s: f"{s.special_tokens}: the same special token is given twice", parameter="special_tokens"
            )

    @property
    def pattern_setting(self) -> str:
        """The pattern as a setting names it: a named pattern's name (a regex equal to one included),
        else the user's regex. What `Tokenizer.pattern` gives and the saved files record."""
        return self.name if self.name != "custom" else self.regex

    @property
    def compiled(self) -> regex.Pattern:
        """The pattern compiled: a named one as it is, a user's regex as Oniguruma reads it."""
        return _compile(self.regex) if self.name != "custom" else compile_split(self.regex)

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
        """Pieces of text that holds no special token: the named patterns' matches (which cover
        the text), `str.split()`, or a user's regex as Hugging Face's Split cuts it."""
        if self.name == "whitespace":
            return text.split()
        if self.name == "custom":
            return splitter(self.regex)(text)
        return self.compiled.findall(text)

    def words(self, text: str) -> list[str]:
        """The pre-tokens training counts in `text`: its pieces but the special tokens. What another
        engine's counting function calls to count as `bpe count` does (docs/training/counts.md).

        >>> Pretokenizer("gpt2", ["<|endoftext|>"]).words("Hi there<|endoftext|>again")
        ['Hi', ' there', 'again']
        """
        return [piece for part, special in self.segments(text) if not special for piece in self.split_ordinary(part)]

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
    point. numpy arrays of 0x110000 uint8 each. Reading them off takes 0.1 s, so they are kept in
    the kernel cache, keyed by what they are read from (`_tables_file`), and read from there."""
    import numpy as np

    path = _tables_file()
    try:
        kept = np.load(path, allow_pickle=False)
        if kept.shape == (2, 0x110000) and kept.dtype == np.uint8:
            return kept[0], kept[1]
    except (OSError, ValueError, EOFError):  # not kept yet, or cut short
        pass
    classes, folds = _read_scanner_tables()
    try:
        os.makedirs(path.parent, exist_ok=True)
        staged = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        with open(staged, "wb") as f:
            np.save(f, np.stack([classes, folds]))
        os.replace(staged, path)  # whole or not at all, for a run that reads it meanwhile
    except OSError:  # a read-only cache (an image's): read off again by each process
        pass
    return classes, folds


def _scanner_classes() -> list[tuple[int, str]]:
    """The classes the scanners test: the bit of each in `classes`, and its regex."""
    from bpe.engine import scanner

    return [
        (scanner.LETTER, r"\p{L}"),
        (scanner.NUMBER, r"\p{N}"),
        (scanner.SPACE, r"\s"),
        (scanner.UPPERISH, r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]"),
        (scanner.LOWERISH, r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"),
        (scanner.SPLIT_SPACE, r"[\s\x1c-\x1f]"),
    ]


def _tables_file() -> Path:
    """Where `scanner_tables` are kept: this version's kernel cache (keyed by the engine's source,
    which holds the scanners' bits), named for the `regex` module's version and the classes read."""
    import hashlib

    import numba

    from bpe.engine import kernel_cache, scanner  # noqa: F401  (kernel_cache sets CACHE_DIR)

    read_off = repr((regex.__version__, _scanner_classes(), scanner.FOLD_LETTERS))
    return Path(numba.config.CACHE_DIR) / f"scanner-tables-{hashlib.sha256(read_off.encode()).hexdigest()[:16]}.npy"


def _read_scanner_tables():
    """`scanner_tables` read off the `regex` module: each class matched over every code point."""
    import numpy as np

    from bpe.engine import scanner

    codepoints = np.arange(0x110000, dtype=np.uint32)
    codepoints[0xD800:0xE000] = 0  # surrogates never occur in decoded UTF-8
    every_char = codepoints.tobytes().decode("utf-32-le")
    classes = np.zeros(0x110000, dtype=np.uint8)
    for bit, char_class in _scanner_classes():
        for run in regex.finditer(char_class + "+", every_char):
            classes[run.start() : run.end()] |= bit
    folds = np.zeros(0x110000, dtype=np.uint8)
    for i, letter in enumerate(scanner.FOLD_LETTERS):
        for match in regex.finditer(f"(?i:{letter})", every_char):
            folds[match.start()] |= 1 << i
    classes[0xD800:0xE000] = 0
    return classes, folds

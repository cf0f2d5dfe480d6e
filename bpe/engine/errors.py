"""The errors a user can act on, from the lowest tier up: each message is one line naming the
file, row or setting at fault. `bpe.errors` adds the rest and is where the package's users import
them from; they are defined here because the kernels' own checks (counts past what int64 holds, an
unknown tie-break) raise them too.

A message that names settings is composed for the surface that shows it: a function of a
`Spelling` rather than a string. Python spells a setting by its parameter (`max_token_length`),
the command by its flag (`--max-token-length`), a configuration file by its key path
(`superwords.max_words`):

>>> error = SettingsError(lambda s: f"{s.transition}: only a superword run has one ({s.on('superwords')})")
>>> str(error)
'transition: only a superword run has one (superwords=True)'
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable, Mapping
from itertools import islice

SHOWN_CHARS = 160  # the most of a value an error shows: the line stays one line


class _Cut(reprlib.Repr):
    """`repr` that walks a value no further than it shows: a few items a level, three levels deep
    (a value read from YAML can share its parts into billions of items), dicts in their own order."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxstring, self.maxother = 3, 60, 60
        self.maxlist = self.maxtuple = self.maxset = self.maxfrozenset = self.maxdeque = self.maxdict = 8

    def repr_dict(self, x, level):
        if not x or level <= 0:
            return "{}" if not x else "{...}"
        items = islice(x.items(), self.maxdict)
        pieces = [f"{self.repr1(key, level - 1)}: {self.repr1(value, level - 1)}" for key, value in items]
        return "{" + ", ".join(pieces + (["..."] if len(x) > self.maxdict else [])) + "}"


_CUT = _Cut()


def shown(value: object) -> str:
    """`repr(value)` as an error shows it: cut to `SHOWN_CHARS` characters, and computed without
    walking more of the value than that.

    >>> shown(list(range(100))), shown({"eng": [[[1]]]})
    ('[0, 1, 2, 3, 4, 5, 6, 7, ...]', "{'eng': [[[...]]]}")
    """
    text = _CUT.repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


class Spelling:
    """How a surface spells the settings a message names: `s.vocab_size` or `s("vocab_size")`.
    This one is Python's (a parameter by its name); the command's and the configuration's
    (`bpe.cli.flags`, `bpe.pipeline.config`) spell them from the schema (`bpe.schema`)."""

    none = "None"  # how the surface writes "no value"

    def __init__(self, names: Mapping[str, str] | None = None) -> None:
        self.names = dict(names or {})

    def __call__(self, name: str) -> str:
        return self.names.get(name, name)

    def __getattr__(self, name: str) -> str:
        if name.startswith("_"):
            raise AttributeError(name)
        return self(name)

    def on(self, name: str) -> str:
        """How to turn a yes/no setting on: `superwords=True`."""
        return self.given(name, True)

    def given(self, name: str, value: object) -> str:
        """A setting given a value: `engine='dask'`."""
        return f"{self(name)}={shown(value)}"

    def by_language(self) -> str:
        """How the surface gives text by language (a mixture and parity need it)."""
        return "files={code: ...} or texts={code: ...}"

    def expected(self, name: str, what: str, value: object, unset: str | None = None) -> str:
        """`name: expected <what>, got <value>`; `unset` says what leaving the setting unset means,
        when that is allowed (`or None (no limit)`)."""
        none = f" or {self.none} ({unset})" if unset else ""
        return f"{self(name)}: expected {what}{none}, got {shown(value)}"


PYTHON = Spelling()


class BpeError(Exception):
    """Base of the errors the user can act on. `parameter` names the setting at fault, in the
    library's words (`tie_break`). `message` is the text, or a function of a `Spelling` that
    composes it: `str(error)` is Python's, `error.spelt(spelling)` another surface's."""

    def __init__(self, message: str | Callable[[Spelling], str], parameter: str | None = None) -> None:
        self._compose = message if callable(message) else None
        super().__init__(message(PYTHON) if callable(message) else message)
        self.parameter = parameter

    def spelt(self, spelling: Spelling) -> str:
        """The message with its settings spelt as `spelling` spells them."""
        return self._compose(spelling) if self._compose is not None else str(self)

    def __reduce__(self):
        """Pickled to another process (a Dask worker's error, to its client) with the function
        that composes the message when that pickles too (a module's function, or a partial of
        one); with Python's spelling only otherwise (a lambda)."""
        import pickle

        state = dict(self.__dict__)
        try:
            pickle.dumps(self._compose)
        except Exception:
            state["_compose"] = None
        return type(self), self.args, state


class InputError(BpeError):
    """Bad input: a missing, unreadable or malformed file, named in the message."""


class SettingsError(BpeError, ValueError):
    """A setting (vocabulary size, pattern, special tokens, ...) that cannot work."""


class NotUtf8Error(InputError):
    """Text whose bytes are not UTF-8: `row` is its index among the documents counted together,
    for the caller to name where it came from."""

    def __init__(self, row: int, where: str = "the documents") -> None:
        super().__init__(f"{where}: row {row} is not valid UTF-8")
        self.row, self.where = row, where

    def __reduce__(self):
        return type(self), (self.row, self.where)

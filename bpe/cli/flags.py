"""How the command spells what the library names by parameter: `--vocab-size` for `vocab_size`.

The flags are the schema's (`bpe.schema`); the command's errors are composed with them, as the
library's are with parameter names, rather than rewritten after.
"""

from __future__ import annotations

from bpe.engine.errors import BpeError, Spelling, shown
from bpe.schema import SETTING, SETTINGS, On

# The library names settings by parameter; the command by flag: the schema's, then the options of
# `bpe train` and `bpe cluster up` that are not settings.
FLAGS = {
    **{dest: flag for setting in SETTINGS if On.CLI in setting.on for dest, flag in setting.flags.items()},
    "also_save": "--also-save",
    "prefect_port": "--prefect-port",  # bpe cluster up's
    "dask_port": "--dask-port",
    "dashboard_port": "--dashboard-port",
}


class FlagSpelling(Spelling):
    """The command's spelling: a setting by its flag; unset by leaving the flag out (or by the value
    that means unset, as `--max-words 0`)."""

    def on(self, name: str) -> str:
        return self(name)

    def given(self, name: str, value: object) -> str:
        return f"{self(name)} {value}"

    def by_language(self) -> str:
        return f"{self('languages')} CODE=INPUT"

    def expected(self, name: str, what: str, value: object, unset: str | None = None) -> str:
        setting = SETTING.get(name)
        how = f"{setting.cli_none} for" if setting is not None and setting.cli_none else "leave it out for"
        return f"{self(name)}: expected {what}, got {shown(value)}" + (f"; {how} {unset}" if unset else "")


IN_FLAGS = FlagSpelling(FLAGS)


def in_flags(exc: Exception) -> str:
    """The error's message as the command says it: the settings it names spelt as flags.

    >>> from bpe.schema import check
    >>> try:
    ...     check("max_token_length", 1)
    ... except Exception as exc:
    ...     print(in_flags(exc))
    --max-token-length: expected an integer >= 2 (bytes), got 1; leave it out for no limit
    """
    return exc.spelt(IN_FLAGS) if isinstance(exc, BpeError) else str(exc)

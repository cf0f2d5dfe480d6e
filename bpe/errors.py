"""Errors a user can act on. Each message is one line naming the file, row or setting at fault;
the `bpe` command prints it as `bpe: error: ...` and exits non-zero. Anything else is a bug and
keeps its traceback."""


class BpeError(Exception):
    """Base of the errors the user can act on."""


class InputError(BpeError):
    """Bad input: a missing, unreadable or malformed file, named in the message."""


class SettingsError(BpeError, ValueError):
    """A setting (vocabulary size, pattern, special tokens, ...) that cannot work."""


class ExportError(BpeError):
    """A tokenizer that a file format cannot represent, or tokenizer files that cannot be read."""


class SpecialTokenError(BpeError, ValueError):
    """The text holds a special token the caller did not allow."""


class SchedulerLost(BpeError, RuntimeError):
    """The Dask scheduler is unreachable or went away: training stops and nothing is written."""

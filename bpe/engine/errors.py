"""The errors a user can act on, from the lowest tier up: each message is one line naming the
file, row or setting at fault. `bpe.errors` adds the rest and is where the package's users import
them from; they are defined here because the kernels' own checks (counts past what int64 holds, an
unknown tie-break) raise them too.
"""


class BpeError(Exception):
    """Base of the errors the user can act on. `parameter` names the setting at fault, in the
    library's words (`tie_break`); the `bpe` command shows it as its flag (`--tie-break`)."""

    def __init__(self, message: str, parameter: str | None = None) -> None:
        super().__init__(message)
        self.parameter = parameter


class InputError(BpeError):
    """Bad input: a missing, unreadable or malformed file, named in the message."""


class SettingsError(BpeError, ValueError):
    """A setting (vocabulary size, pattern, special tokens, ...) that cannot work."""

"""Errors a user can act on. Each message is one line naming the file, row or setting at fault;
the `bpe` command prints it as `bpe: error: ...` and exits non-zero. Anything else is a bug and
keeps its traceback. The base classes (`BpeError`, `InputError`, `SettingsError`) are defined in
`bpe.engine.errors`, the lowest tier, whose checks raise them too."""

import re

from bpe.engine.errors import BpeError, InputError, NotUtf8Error, SettingsError  # noqa: F401  (the base classes)


class InvalidTextError(InputError, ValueError):
    """Text that is not Unicode: a lone surrogate (half of a UTF-16 pair) has no UTF-8 bytes."""


LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate(text: str, where: str) -> InvalidTextError | None:
    """The error for `text` (named `where`) if it holds a lone surrogate, half of a UTF-16 pair with
    no UTF-8 bytes (Python's strings can hold one); None for Unicode text."""
    found = LONE_SURROGATE.search(text)
    if found is None:
        return None
    return InvalidTextError(
        f"{where}: lone surrogate U+{ord(found.group()):04X} at character {found.start()} is "
        "not Unicode text and has no UTF-8 bytes"
    )


class ExportError(BpeError):
    """A tokenizer that a file format cannot represent, or tokenizer files that cannot be read."""


class SpecialTokenError(BpeError, ValueError):
    """The text holds a special token the caller did not allow. `row` is the text's index in a
    batch (None for one text), `token` the special token found."""

    row: int | None = None
    token: str | None = None


class WorkersLost(BpeError, RuntimeError):
    """The Dask workers kept dying (or none is left) while training: it stops and nothing is written."""


class WorkersOutOfMemory(BpeError, RuntimeError):
    """Every Dask worker stayed paused for memory (no task can run), or workers were restarted for
    memory and the run could not go on: it stops, saying what memory to give the workers."""


class SchedulerLost(BpeError, RuntimeError):
    """The Dask scheduler is unreachable or went away: training stops and nothing is written."""


class MissingExtra(BpeError, ImportError):
    """A feature whose install extra is missing, e.g. the Dask engine without `[dask]`."""


class OutputError(BpeError, OSError):
    """An output that could not be written (a full disk, a quota), named as the user named it;
    `errno` is the operating system's (ENOSPC, EDQUOT). Nothing half-written is left in its place."""


def is_full(exc: BaseException) -> bool:
    """Whether `exc` is the disk, or the user's quota, running out of room."""
    import errno

    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def full_disk(exc: OSError, path: object, doing: str = "") -> OutputError:
    """`path: no space left on device <doing>`: the OS error of a full disk (or quota) in one line
    naming the user's `path` rather than a temporary file's, with the same errno."""
    reason = exc.strerror or "No space left on device"
    message = f"{path}: {reason[:1].lower()}{reason[1:]}"
    error = OutputError(f"{message} {doing}" if doing else message)
    error.errno = exc.errno
    return error


EXTRAS = {
    "dask": ("dask", "distributed"),
    "pipeline": ("prefect", "yaml", "matplotlib", "dask", "distributed"),
    "s3": ("s3fs",),
    "plot": ("matplotlib",),
}


def require_extra(extra: str, feature: str) -> None:
    """Raise MissingExtra, in one line, if a package of `extra` is not installed: naming the
    command that installs it into this environment."""
    import importlib.util
    import sys

    from bpe.install import install_extra

    for module in EXTRAS[extra]:
        try:
            missing = sys.modules.get(module, True) is None or importlib.util.find_spec(module) is None
        except ValueError:
            missing = True
        if missing:
            raise MissingExtra(
                f"{feature} needs the [{extra}] extra ({module} is not installed): {install_extra(extra)}"
            )


class NotApplied(UserWarning):
    """A setting of a tokenizer file that a `Tokenizer` does not apply (a tokenizer.json's truncation
    or padding), said as the file is loaded."""


class StoppedEarly(UserWarning):
    """Training stopped below `vocab_size` though no setting asked it to (`min_frequency` does)."""


class SkippedInputs(UserWarning):
    """Finding the inputs passed over files of a directory walk or a glob (hidden, binary, ...)."""

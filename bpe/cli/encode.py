"""`bpe encode` and `bpe decode`: the command's arguments and flags around `bpe.tokenizer.stream`."""

from __future__ import annotations

import argparse
import os
import re
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bpe.tokenizer.stream import Inputs

# How `bpe encode` spells the parameters of `encode_inputs` that its errors name.
ENCODE_FLAGS = {
    "out": "--out",
    "format": "--format",
    "force": "--force",
    "eot": "--eot",
    "offsets": "--offsets",
    "allow_special": "--allow-special",
    "special_as_text": "--special-as-text",
    "num_threads": "--threads",
}

# An argument that is not a file but looks like one (`ten.txt`, `data/x`, `~/a`) is an error rather
# than text to encode: a mistyped file name would otherwise be encoded as its own letters.
_PATH_LIKE = re.compile(r"[^\s]*[/\\][^\s]*|~[^\s]*|[^\s.]+(\.[^\s.]+)*\.[A-Za-z][A-Za-z0-9]{0,7}")


def run_encode(args: argparse.Namespace) -> int:
    """Encode files or stdin, streamed in batches (bpe.tokenizer.stream), or the arguments as text. The
    input's bytes must be UTF-8: invalid bytes are an error naming the file and offset, never
    silently U+FFFD. A summary line goes to stderr when inputs were named."""
    from bpe.cli.flags import FlagSpelling
    from bpe.tokenizer.stream import encode_inputs

    if args.threads is not None and args.threads < 1:
        from bpe.errors import SettingsError

        raise SettingsError(f"--threads: expected an integer >= 1, got {args.threads}")
    tokenizer = load_tokenizer(args.tokenizer, args.pattern)
    inputs = classify_arguments(args.inputs, as_text=args.text)
    named = inputs.text is None and not inputs.implicit_stdin
    map_large_blocks()  # bounded memory: freed batches go back to the system
    try:
        summary = encode_inputs(
            tokenizer,
            inputs,
            out=args.out,
            format=args.format,
            force=args.force,
            eot=args.eot,
            offsets=args.offsets,
            text_column=args.text_column,
            text_format=args.text_format,
            num_threads=args.threads,
            allow_special=args.allow_special,
            special_as_text=args.special_as_text,
            progress=named and not args.quiet,
            names=FlagSpelling(ENCODE_FLAGS),
        )
    except BrokenPipeError:  # `bpe encode tok big.txt | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    if named and not args.quiet:
        if summary.skipped:
            print(f"bpe: {summary.skipped}", file=sys.stderr)
        print(summary.line(), file=sys.stderr)
    return 0


def classify_arguments(arguments: list[str], as_text: bool = False) -> Inputs:
    """Files or text? `as_text` (`--text`): the arguments, joined by spaces, are the text. Otherwise
    `-`, a URL and every argument naming an existing file, directory or glob match is an input; if
    none is, the arguments are text, as before files were read, unless one looks like a path
    (`ten.txt`, `data/x`): a file that does not exist is an error, never encoded as its name. No
    argument at all: stdin, quietly (the old form)."""
    from bpe.errors import InputError
    from bpe.tokenizer.stream import Inputs

    if as_text:
        # Python hands over invalid bytes in arguments as lone surrogates; this gives them back.
        return Inputs(text=" ".join(arguments).encode("utf-8", "surrogateescape"))
    if not arguments:
        return Inputs(specs=("-",), implicit_stdin=True)
    found = [a for a in arguments if _is_input(a)]
    if len(found) == len(arguments):
        return Inputs(specs=tuple(arguments))
    missing = [a for a in arguments if a not in found]
    if found or any(_PATH_LIKE.fullmatch(a) for a in missing):
        name = next((a for a in missing if _PATH_LIKE.fullmatch(a)), missing[0])
        raise InputError(f"{name}: no such file or directory (to encode the arguments as text, pass --text)")
    return Inputs(text=" ".join(arguments).encode("utf-8", "surrogateescape"))


def _is_input(argument: str) -> bool:
    import glob

    if argument == "-":
        return True
    if "://" in argument:
        return not argument.lower().startswith(("http://", "https://"))  # a web address in text is text
    local = argument[len("file://") :] if argument.startswith("file://") else argument
    return os.path.lexists(local) or (glob.has_magic(local) and bool(glob.glob(local)))


def map_large_blocks() -> None:
    """Have glibc map each block of 256 KiB or more on its own, and unmap it when freed. By default
    it raises that threshold as such blocks are freed (to 32 MB), after which batches come from a
    heap that keeps the freed space: in `bpe encode`, tens of MB more at the peak. Process-wide,
    so the command calls it, not the library; a no-op where the C library is not glibc."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        mallopt = getattr(libc, "mallopt", None)
    except OSError:
        return
    if mallopt is not None and hasattr(libc, "gnu_get_libc_version"):
        mallopt(-3, 256 << 10)  # M_MMAP_THRESHOLD


def run_decode(args: argparse.Namespace) -> int:
    tokenizer = load_tokenizer(args.tokenizer)
    ids = args.ids
    if not ids:
        try:
            ids = [int(x) for x in sys.stdin.read().split()]
        except ValueError as exc:
            from bpe.errors import InputError

            raise InputError(f"stdin: expected token ids ({exc})") from None
    sys.stdout.write(tokenizer.decode(ids) + "\n")
    return 0


@contextmanager
def not_applied_said() -> Iterator[None]:
    """NotApplied warnings raised in here (settings of a tokenizer file that are not applied) said as
    `bpe: warning: ...` lines on stderr; any other warning as Python says it."""
    from bpe.errors import NotApplied

    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", NotApplied)
            yield
    finally:
        for warning in caught:
            if issubclass(warning.category, NotApplied):
                print(f"bpe: warning: {warning.message}", file=sys.stderr)
            else:
                warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)


def load_tokenizer(source: str, pattern: str | None = None):
    """The tokenizer at `source`; an object store that cannot be read (no credentials, no bucket,
    no endpoint: each library has its own errors) is one line naming the URL."""
    from bpe import storage
    from bpe.tokenizer import Tokenizer

    with storage.naming_url(source), not_applied_said():
        return Tokenizer.load(source, pattern=pattern)

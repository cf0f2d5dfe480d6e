"""`bpe encode` and `bpe decode`."""

from __future__ import annotations

import argparse
import os
import sys


def run_encode(args: argparse.Namespace) -> int:
    """Encode files or stdin, streamed in batches (bpe.encode_stream), or the arguments as text. The
    input's bytes must be UTF-8: invalid bytes are an error naming the file and offset, never
    silently U+FFFD. A summary line goes to stderr when inputs were named."""
    from bpe.encode_stream import classify_arguments, encode_inputs, map_large_blocks

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
        )
    except BrokenPipeError:  # `bpe encode tok big.txt | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    if named and not args.quiet:
        if summary.skipped:
            print(f"bpe: {summary.skipped}", file=sys.stderr)
        print(summary.line(), file=sys.stderr)
    return 0


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


def load_tokenizer(source: str, pattern: str | None = None):
    """The tokenizer at `source`; an object store that cannot be read (no credentials, no bucket,
    no endpoint: each library has its own errors) is one line naming the URL."""
    from bpe import storage
    from bpe.errors import BpeError, InputError
    from bpe.tokenizer import Tokenizer

    try:
        return Tokenizer.load(source, pattern=pattern)
    except (BpeError, FileNotFoundError):
        raise
    except Exception as exc:
        if not storage.is_remote(source):
            raise
        reason = (str(exc).splitlines() or [""])[0]
        raise InputError(f"{source}: cannot read it ({type(exc).__name__}: {reason})") from None

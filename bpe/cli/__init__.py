"""The `bpe` command: train, encode, decode and warm here; the pipeline's commands (demo, deploy,
versions, promote, rollback, history, prune, prune-cache, cluster) are registered by the pipeline
tier (`bpe.pipeline.commands`) and the flows (`bpe.flows.commands`) through the `bpe.commands` entry
point group.

Errors are one line on stderr (`bpe: error: ...`) and a non-zero exit.
"""

from __future__ import annotations

import argparse
import errno
import logging
import signal
import sys
import threading

from bpe.cli.encode import run_decode, run_encode
from bpe.cli.flags import in_flags
from bpe.cli.train import add_training_options, run_train
from bpe.cli.warm import run_warm
from bpe.schema import TEXT_FORMATS

EXIT_ERROR = 1


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # `bpe encode tok --out ids.npy a.txt`: argparse (before 3.12.7) leaves inputs after an option over
        if args.command != "encode" or any(x.startswith("-") and x != "-" for x in extra):
            parser.parse_args(argv)  # reports what is not understood, as argparse does, and exits
        args.inputs += extra
    if args.command != "encode":  # encoding imports no numba (80 MB): it sets Arrow's allocator itself
        from bpe.counting import use_system_allocator

        use_system_allocator()
    previous = signal.getsignal(signal.SIGINT)
    ours = previous is signal.default_int_handler and threading.current_thread() is threading.main_thread()
    if ours:
        signal.signal(signal.SIGINT, _on_ctrl_c)
    try:
        return args.run(args) or 0
    except KeyboardInterrupt:
        return _interrupted()
    except Exception as exc:
        if _interrupted_in_kernel(exc):
            return _interrupted()
        if not _expected(exc):
            raise
        print(f"bpe: error: {in_flags(exc)}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        if ours:
            signal.signal(signal.SIGINT, previous)


def _on_ctrl_c(signum: int, frame) -> None:
    """Ctrl-C: silence logging first, then interrupt as Python does. Dask's event loop may log its
    own teardown of the interrupted call (a traceback from another thread); the user asked to
    stop, and gets one line."""
    logging.disable(logging.CRITICAL)
    raise KeyboardInterrupt


def _interrupted() -> int:
    print("bpe: interrupted; nothing was written", file=sys.stderr)
    return 130


def _interrupted_in_kernel(exc: BaseException) -> bool:
    """Ctrl-C while a compiled kernel runs surfaces as a SystemError ("returned a result with an
    exception set") whose cause is the KeyboardInterrupt."""
    while exc is not None:
        if isinstance(exc, KeyboardInterrupt):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _expected(exc: Exception) -> bool:
    """An error the user can act on (one line), rather than a bug (a traceback): our own errors,
    and the operating system refusing a file (full disk, read-only, no permission, ...)."""
    from bpe.errors import BpeError

    if isinstance(exc, OSError) and exc.errno in USER_ERRNOS:
        if exc.filename and str(exc.filename) not in str(exc):
            exc.args = (f"{exc.filename}: {exc.strerror}",)
        return True
    return isinstance(exc, (BpeError, FileExistsError, FileNotFoundError))


USER_ERRNOS = {
    errno.ENOSPC,
    errno.EDQUOT,
    errno.EROFS,
    errno.EACCES,
    errno.EPERM,
    errno.ENOTDIR,
    errno.EISDIR,
    errno.ENAMETOOLONG,
    errno.EMFILE,
}


def build_parser() -> argparse.ArgumentParser:
    from bpe import __version__  # the package itself: loads neither numpy nor numba

    parser = argparse.ArgumentParser(prog="bpe", description="Train and use byte-level BPE tokenizers.")
    parser.add_argument("--version", action="version", version=f"bpe {__version__}", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True)

    t = sub.add_parser(
        "train",
        help="train a tokenizer on text, .parquet, .jsonl, .json or .csv files (compressed "
        "too), directories, globs, URLs or - (stdin)",
    )
    groups = add_training_options(t)  # the settings, from the schema, grouped as it groups them
    groups["required"].add_argument(
        "--out", required=True, help="output directory or object store URL (must not hold a tokenizer)"
    )
    output = t.add_argument_group("output", "what is written and shown")
    output.add_argument("--force", action="store_true", help="replace a tokenizer already in --out")
    output.add_argument(
        "--also-save",
        metavar="SIZES",
        help="also write the tokenizers of these smaller vocabulary sizes (comma-separated: "
        "8192,16384), cut from the same run (exactly what training with that --vocab-size gives), as "
        "<out>-<size> beside --out (in its directory or bucket)",
    )
    output.add_argument(
        "--json",
        action="store_true",
        help="print the summary as one JSON object on stdout, for scripts (no progress bars)",
    )
    output.add_argument("--quiet", action="store_true", help="no progress bars and no summary (errors still show)")
    t.set_defaults(run=run_train)

    e = sub.add_parser("encode", help="write the token ids of files (any training format), stdin or text arguments")
    e.add_argument("tokenizer", help="a tokenizer directory or URL")
    e.add_argument(
        "inputs",
        nargs="*",
        metavar="FILE|TEXT",
        help="files, directories, globs, URLs or - (stdin), streamed; or, if none of them is a file, "
        "text to encode (see --text); stdin when absent (one final newline dropped)",
    )
    e.add_argument("--text", action="store_true", help="the arguments are text to encode, even if they name files")
    e.add_argument("--out", help="write the ids here (a temporary file renamed into place at the end); default stdout")
    e.add_argument(
        "--format",
        choices=("txt", "jsonl", "npy", "bin"),
        help='txt: a line of ids per document; jsonl: {"ids": [...]} per document; npy: one flat '
        "array; bin: raw uint16/uint32 (default: from --out's suffix, else txt)",
    )
    e.add_argument("--force", action="store_true", help="replace an existing --out or --offsets file")
    e.add_argument("--eot", action="store_true", help="append the end-of-text token after each document")
    e.add_argument(
        "--offsets",
        metavar="PATH",
        help="also write where each document starts in the flat ids, and where the last ends "
        "(an int64 .npy of documents + 1 entries)",
    )
    e.add_argument("--text-column", default="text", help="Parquet/CSV column or JSON field holding the text")
    e.add_argument(
        "--text-format",
        choices=TEXT_FORMATS,
        default="doc",
        help="a text file is one document (doc, the default) or one document per line (lines)",
    )
    e.add_argument("--threads", type=int, default=None, help="encoding threads (default: the cores available)")
    e.add_argument("--quiet", action="store_true", help="no progress line and no summary on stderr")
    special = e.add_mutually_exclusive_group()
    special.add_argument(
        "--allow-special",
        action="store_true",
        help="encode special tokens' text in the input as the special tokens (by default it is "
        "an error, naming the file and row)",
    )
    special.add_argument(
        "--special-as-text", action="store_true", help="encode special tokens' text in the input as ordinary text"
    )
    e.add_argument("--pattern", help="split pattern for a directory holding only vocab.json + merges.txt")
    e.set_defaults(run=run_encode)

    d = sub.add_parser("decode", help="print the text of token ids (arguments, or stdin)")
    d.add_argument("tokenizer", help="a tokenizer directory or URL")
    d.add_argument("ids", nargs="*", type=int, help="token ids; read from stdin when absent")
    d.set_defaults(run=run_decode)

    w = sub.add_parser("warm", help="compile every kernel both engines use into the kernel cache, ahead of time")
    w.set_defaults(run=run_warm)

    for register in registered_commands():
        register(sub)
    return parser


def registered_commands() -> list:
    """The `register(subparsers)` functions of the `bpe.commands` entry points: the pipeline tier
    adds its subcommands so (`bpe.pipeline.commands.register`), the core never imports it."""
    from importlib.metadata import entry_points

    return [entry.load() for entry in sorted(entry_points(group="bpe.commands"), key=lambda e: e.name)]

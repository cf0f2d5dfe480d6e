"""The `bpe` command: train, encode, decode, eval and warm here; the pipeline's commands (demo, deploy,
versions, promote, rollback, history, prune, prune-cache, cluster) are registered by the pipeline
tier (`bpe.pipeline.commands`) and the flows (`bpe.flows.commands`) through the `bpe.commands` entry
point group.

Errors are one line on stderr (`bpe: error: ...`) and a non-zero exit.
"""

from __future__ import annotations

import argparse
import atexit
import errno
import logging
import os
import signal
import sys
import threading

from bpe.cli.bytecode import bytecode_missing, write_bytecode
from bpe.cli.count import COUNT, add_count_options
from bpe.cli.declare import THREADS, Argument, Command, OneOf, add_command
from bpe.cli.encode import run_decode, run_encode
from bpe.cli.eval import EVAL
from bpe.cli.flags import in_flags
from bpe.cli.train import add_training_options, run_train
from bpe.cli.warm import run_warm
from bpe.schema import TEXT_FORMATS

EXIT_ERROR = 1

# The commands that start no service: they may end without the interpreter's teardown (`run`).
LOCAL_COMMANDS = frozenset({"train", "encode", "decode", "eval", "warm"})


# glibc's M_MMAP_THRESHOLD (mallopt's parameter -3): blocks this large or larger get their own
# mapping, handed back to the system when freed.
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 16 << 20


def hand_back_large_arrays() -> None:
    """Give every allocation of `MMAP_THRESHOLD` bytes or more its own mapping, in this process and
    the command's children (`MALLOC_MMAP_THRESHOLD_`), unless the caller has set one; glibc only.
    By default glibc raises that threshold, up to 32 MB, each time a large block is freed, and then
    keeps the arrays below it in its heap once freed: a superword run at 125 MB held 120-190 MB that
    way at its peak, a different amount in every run. A fixed threshold hands them back. A user's
    own process (`import bpe`) keeps its allocator as it is."""
    if not sys.platform.startswith("linux") or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return
    os.environ["MALLOC_MMAP_THRESHOLD_"] = str(MMAP_THRESHOLD)
    try:
        import ctypes

        ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    except (OSError, AttributeError):  # another C library: its own allocator, left as it is
        pass


def run() -> None:
    """The console command: `main`, then the exit. After a local command the process ends without
    tearing the interpreter down, once the exit handlers have run and the output is flushed: the
    teardown frees the compiled kernels and every module one by one, 0.25 s after a train of the
    English corpus (a third of what the run spends outside counting and merging)."""
    # numpy's BLAS starts a thread per core that spins for about a tenth of a second before it
    # sleeps, on the cores the run's own threads need; nothing here uses BLAS. Read as numpy loads,
    # which the commands do after this (`import bpe.cli` loads no numpy).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    hand_back_large_arrays()
    code = main()
    command = command_of(sys.argv[1:])
    others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if command not in LOCAL_COMMANDS or others:
        sys.exit(code)
    atexit._run_exitfuncs()  # what the normal exit runs first: logging's flush, temporary directories, ...
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`bpe encode ... | head`) or stream
            pass
    os._exit(code)


def command_of(argv: list[str]) -> str | None:
    """The command `argv` runs: its first word that is not an option (`bpe` takes none with a value)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser(plugins=command_of(sys.argv[1:] if argv is None else argv) not in CORE_COMMANDS)
    args, extra = parser.parse_known_args(argv)
    if extra:  # `bpe encode tok --out ids.npy a.txt`: argparse (before 3.12.7) leaves inputs after an option over
        if args.command != "encode" or any(x.startswith("-") and x != "-" for x in extra):
            parser.parse_args(argv)  # reports what is not understood, as argparse does, and exits
        args.inputs += extra
    if args.command != "encode":  # encoding imports no numba (80 MB): it sets Arrow's allocator itself
        from bpe.training.counting import use_system_allocator

        use_system_allocator()
    previous = signal.getsignal(signal.SIGINT)
    ours = previous is signal.default_int_handler and threading.current_thread() is threading.main_thread()
    if ours:
        signal.signal(signal.SIGINT, _on_ctrl_c)
    try:
        code = args.run(args) or 0
        if bytecode_missing():  # Python writes none here: write it once, for the processes after this one
            write_bytecode()
        return code
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

TOKENIZER = Argument("tokenizer", help="a tokenizer directory or URL")

TRAIN = Command(  # its options (from the schema) are added by `build_parser`
    "train",
    "train a tokenizer on text, Parquet, JSON lines, JSON or CSV files (compressed too), directories, globs, URLs "
    "or - (stdin)",
    run_train,
    usage="%(prog)s (INPUT... | --lang CODE=INPUT... | --counts DIR...) --vocab-size N --out DIR [options]",
    description="""
        Train a byte-level BPE tokenizer and write it to --out: tokenizer.json (Hugging Face),
        vocab.json + merges.txt (GPT-2), tokenizer.tiktoken, transformers' configuration and a
        manifest. The merges are exactly the textbook algorithm's, on any engine and thread count.

        INPUT is a file (.parquet, .jsonl, .json, .csv/.tsv, or text: any other suffix; compressed
        .gz/.zst/.bz2/.xz too), a directory, a glob, an fsspec URL, or - for stdin. --vocab-size
        counts every token: the 256 bytes, the merges and the special tokens.

        --lang CODE=INPUT (once per language) gives text by language instead: each language is
        counted apart, --mix weighs them, and --parity-dev (or --parity, --parity-ratio) makes
        each merge serve the language whose text is the longest in tokens.

        --counts DIR trains on word counts instead of text: what `bpe count` wrote, or Parquet
        of `word` and `count` another engine wrote; the merges are those of the text counted.""",
    examples=[
        "bpe train data/ --vocab-size 32768 --out tok/",
        "bpe train corpus.txt.gz --vocab-size 8192 --special-token '<|endoftext|>' --out tok/",
        "bpe train data/*.parquet --vocab-size 32768 --limit 10MB --out quick/",
        "bpe train corpus/ --from gpt2/ --vocab-size 50357 --out gpt2-plus/",
        "bpe train --counts counts/ --vocab-size 32768 --out tok/",
        "bpe train --lang eng=data/en/ --lang hin='data/hi/*.parquet' --mix temperature=0.3 --vocab-size 32768 "
        "--out mixed/",
        "bpe train --lang eng=ud/eng.parquet --lang tel=ud/tel.parquet --parity-dev ntrex/ --vocab-size 8192 "
        "--out parity/",
    ],
)
ENCODE = Command(
    "encode",
    "write the token ids of files (any training format), stdin or text arguments",
    run_encode,
    description="""
        Write the token ids of files, stdin or text. Files of every training format are streamed
        in batches encoded on all cores; if no argument names a file, the arguments are text.
        By default a line of ids per document on stdout; --out ids.npy (or .bin, .jsonl) writes a
        file for a model's training, --eot ends each document with the end-of-text token.""",
    examples=[
        "echo 'Hello world' | bpe encode tok/",
        "bpe encode tok/ 'Hello world'",
        "bpe encode tok/ data/ --out ids.npy --eot --offsets docs.npy",
    ],
    arguments=[
        TOKENIZER,
        Argument(
            "inputs",
            nargs="*",
            metavar="FILE|TEXT",
            help="files, directories, globs, URLs or - (stdin), streamed; or, if none of them is a file, "
            "text to encode (see --text); stdin when absent (one final newline dropped)",
        ),
        Argument("--text", action="store_true", help="the arguments are text to encode, even if they name files"),
        Argument("--out", help="write the ids here (a temporary file renamed into place at the end); default stdout"),
        Argument(
            "--format",
            choices=("txt", "jsonl", "npy", "bin"),
            help='txt: a line of ids per document; jsonl: {"ids": [...]} per document; npy: one flat '
            "array; bin: raw uint16/uint32 (default: from --out's suffix, else txt)",
        ),
        Argument("--force", action="store_true", help="replace an existing --out or --offsets file"),
        Argument("--eot", action="store_true", help="append the end-of-text token after each document"),
        Argument(
            "--offsets",
            metavar="PATH",
            help="also write where each document starts in the flat ids, and where the last ends "
            "(an int64 .npy of documents + 1 entries)",
        ),
        Argument("--text-column", default="text", help="Parquet/CSV column or JSON field holding the text"),
        Argument(
            "--text-format",
            choices=TEXT_FORMATS,
            default="doc",
            help="a text file is one document (doc, the default) or one document per line (lines)",
        ),
        THREADS,
        Argument("--quiet", action="store_true", help="no progress line and no summary on stderr"),
        OneOf(
            Argument(
                "--allow-special",
                action="store_true",
                help="encode special tokens' text in the input as the special tokens (by default it is "
                "an error, naming the file and row)",
            ),
            Argument(
                "--special-as-text",
                action="store_true",
                help="encode special tokens' text in the input as ordinary text",
            ),
        ),
        Argument("--pattern", help="split pattern for a directory holding only vocab.json + merges.txt"),
    ],
)
DECODE = Command(
    "decode",
    "print the text of token ids (arguments, or stdin)",
    run_decode,
    description="Print the text of token ids, given as arguments or on stdin (separated by spaces or lines).",
    examples=["bpe decode tok/ 9906 1917", "bpe encode tok/ 'Hello world' | bpe decode tok/"],
    arguments=[TOKENIZER, Argument("ids", nargs="*", type=int, help="token ids; read from stdin when absent")],
)
WARM = Command(
    "warm",
    "compile every kernel both engines use into the kernel cache, ahead of time",
    run_warm,
    description="""
        Compile the kernels both engines use into the kernel cache (~/.cache/bpe/kernels, or
        $BPE_KERNEL_CACHE), a group per process on every core, and print what each group took.
        Installing compiles nothing, and a run compiles the groups it needs first; warm is for an
        image's or a worker's cache, so that no run there compiles. GROUP names some of them. It
        also writes the package's bytecode where it is missing or older than its source.""",
    examples=["bpe warm", "bpe warm 'count cl100k' 'merge loop'", "BPE_KERNEL_CACHE=/cache/bpe bpe warm"],
    arguments=[
        Argument("groups", nargs="*", metavar="GROUP", help="kernel groups to compile (default: all; see --list)"),
        Argument("--list", action="store_true", help="list the kernel groups and whether the cache holds each"),
    ],
)


# The commands defined here: a run of one of them needs no other command's parser.
CORE_COMMANDS = frozenset({"train", "count", "encode", "decode", "eval", "warm"})


def build_parser(plugins: bool = True) -> argparse.ArgumentParser:
    """The `bpe` parser; with `plugins`, the commands other tiers register too (`registered_commands`,
    which reads every installed package's entry points: 25 ms, so a core command goes without)."""
    from bpe import __version__  # the package itself: loads neither numpy nor numba
    from bpe.cli.help import Commands, HelpText, command_list, examples_epilog

    parser = argparse.ArgumentParser(
        prog="bpe",
        usage="%(prog)s [-h] [--version] COMMAND ...",
        epilog=examples_epilog(),
        formatter_class=HelpText,
    )
    parser.add_argument("--version", action="version", version=f"bpe {__version__}", help="print the version and exit")
    parser.register("action", "parsers", Commands)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help=argparse.SUPPRESS, prog="bpe")

    train = add_command(sub, TRAIN, "tokenizers")
    groups = add_training_options(train)  # the settings, from the schema, grouped as it groups them
    groups["required"].add_argument(
        "--out", required=True, metavar="DIR", help="output directory or object store URL (must not hold a tokenizer)"
    )
    output = train.add_argument_group("output", "what is written and shown")
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

    add_count_options(add_command(sub, COUNT, "tokenizers"))
    for command in (ENCODE, DECODE, EVAL):
        add_command(sub, command, "tokenizers")
    add_command(sub, WARM, "other")

    for register in registered_commands() if plugins else ():
        register(sub)
    parser.description = "Train and use byte-level BPE tokenizers.\n" + command_list(sub)
    return parser


def commands(parser: argparse.ArgumentParser, prog: str = "bpe"):
    """(`bpe train`, its parser), ...: `parser` and every subcommand under it, depth first, in the
    order they were added (the command reference of the docs, the tests of every command's help)."""
    yield prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, f"{prog} {name}")


def registered_commands() -> list:
    """The `register(subparsers)` functions of the `bpe.commands` entry points: the pipeline tier
    adds its subcommands so (`bpe.pipeline.commands.register`), the core never imports it."""
    from importlib.metadata import entry_points

    return [entry.load() for entry in sorted(entry_points(group="bpe.commands"), key=lambda e: e.name)]

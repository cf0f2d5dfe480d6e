"""The `bpe` command: train, encode, decode, demo (and, for the pipeline, versions and cluster).

Errors are one line on stderr (`bpe: error: ...`) and a non-zero exit.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import shlex
import signal
import sys
import threading
import time
from pathlib import Path

from bpe.errors import require_extra
from bpe.settings import DEFAULT_PATTERN, ENGINES, PATTERNS, TEXT_FORMATS, TIE_BREAKS

EXIT_ERROR = 1
STATE_DIR = Path(".bpe-cluster")  # bpe cluster's default --state-dir


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


# The library names settings by parameter; the command by flag.
FLAGS = {
    "vocab_size": "--vocab-size",
    "base": "--from",
    "pattern": "--pattern",
    "special_tokens": "--special-token",
    "bos_token": "--bos-token",
    "eos_token": "--eos-token",
    "pad_token": "--pad-token",
    "unk_token": "--unk-token",
    "min_frequency": "--min-frequency",
    "tie_break": "--tie-break",
    "max_token_length": "--max-token-length",
    "model_max_length": "--model-max-length",
    "also_save": "--also-save",
    "text_column": "--text-column",
    "text_format": "--text-format",
    "limit": "--limit",
    "sample": "--sample",
    "seed": "--seed",
    "engine": "--engine",
    "threads": "--threads",
    "texts": "inputs",
    "prefect_port": "--prefect-port",
    "dask_port": "--dask-port",
    "dashboard_port": "--dashboard-port",
}


def in_flags(exc: Exception) -> str:
    """The error's message, with the parameter it names spelled as the command's flag.

    >>> from bpe.errors import SettingsError
    >>> in_flags(SettingsError("tie_break: expected one of bytes, ids, got 'max'", parameter="tie_break"))
    "--tie-break: expected one of bytes, ids, got 'max'"
    """
    import re

    message = str(exc)
    parameter = getattr(exc, "parameter", None)
    if parameter in FLAGS:
        message = re.sub(rf"(?<![\w-]){parameter}(?![\w-])", FLAGS[parameter], message)
    return message


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
    t.add_argument("inputs", nargs="+", help="files, directories, globs, fsspec URLs, or - for stdin (read once)")
    add_training_options(t)
    t.add_argument("--out", required=True, help="output directory or object store URL (must not hold a tokenizer)")
    t.add_argument("--force", action="store_true", help="replace a tokenizer already in --out")
    t.add_argument(
        "--json",
        action="store_true",
        help="print the summary as one JSON object on stdout, for scripts (no progress bars)",
    )
    for role in ("bos", "eos", "pad", "unk"):  # roles transformers reads from tokenizer_config.json
        t.add_argument(
            f"--{role}-token",
            metavar="TOKEN",
            help=f"the {role} token for transformers (added as a special token if no --special-token names it)",
        )
    t.add_argument(
        "--model-max-length",
        type=int,
        metavar="TOKENS",
        help="the model's longest input, written to tokenizer_config.json: what transformers' "
        "truncation=True cuts to (unset: transformers truncates nothing)",
    )
    t.add_argument(
        "--also-save",
        metavar="SIZES",
        help="also write the tokenizers of these smaller vocabulary sizes (comma-separated: "
        "8192,16384), cut from the same run (exactly what training with that --vocab-size gives), as "
        "<out>-<size>",
    )
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

    demo = sub.add_parser(
        "demo", help="run the train-bpe flow on the demo corpus (no server needed: Prefect's ephemeral mode)"
    )
    demo.add_argument("--data", type=Path, default=Path("demo-data"), help="where to write the demo corpus")
    demo.add_argument("--config", type=Path, default=None, help="configuration (default: the packaged conf/demo.yaml)")
    demo.add_argument("--artifacts", type=Path, default=None, help="artifact root (default: the config's)")
    demo.add_argument("--vocab-size", type=int, default=None, help="override the config's vocabulary size")
    demo.set_defaults(run=run_demo)

    v = sub.add_parser("versions", help="list the versions in an artifact store: bpe versions <root>/<name>")
    v.add_argument("store", help="<artifact root>/<tokenizer name>, a path or an fsspec URL")
    v.set_defaults(run=run_versions)

    pr = sub.add_parser("promote", help="move a store's `latest` to a version: bpe promote <root>/<name> v0003")
    pr.add_argument("store", help="<artifact root>/<tokenizer name>, a path or an fsspec URL")
    pr.add_argument("version", help="the version to make latest (v0003, or 3)")
    pr.set_defaults(run=run_promote)

    rb = sub.add_parser("rollback", help="move a store's `latest` back to the version promoted before it")
    rb.add_argument("store", help="<artifact root>/<tokenizer name>, a path or an fsspec URL")
    rb.set_defaults(run=run_rollback)

    hi = sub.add_parser("history", help="list every publish, promote, rollback and prune of a store")
    hi.add_argument("store", help="<artifact root>/<tokenizer name>, a path or an fsspec URL")
    hi.set_defaults(run=run_history)

    pv = sub.add_parser("prune", help="remove all but the newest versions of a store (dry run without --yes)")
    pv.add_argument("store", help="<artifact root>/<tokenizer name>, a path or an fsspec URL")
    pv.add_argument(
        "--keep",
        type=int,
        required=True,
        metavar="N",
        help="newest versions to keep (latest, the rollback target and the newest main-line version are always kept)",
    )
    pv.add_argument("--yes", action="store_true", help="remove them (without it: only list what would go)")
    pv.set_defaults(run=run_prune)

    pc = sub.add_parser("prune-cache", help="remove count cache entries unused for DAYS days (dry run without --yes)")
    pc.add_argument("cache", help="the count cache: a configuration's cache_dir (default <artifact root>/.cache)")
    pc.add_argument("--older-than", type=float, required=True, metavar="DAYS", help="days since a run last used it")
    pc.add_argument("--yes", action="store_true", help="remove them (without it: only list what would go)")
    pc.set_defaults(run=run_prune_cache)

    cl = sub.add_parser("cluster", help="run the docker-compose topology as local processes on 127.0.0.1")
    cl_sub = cl.add_subparsers(dest="action", required=True)
    cl_up = cl_sub.add_parser("up", help="start Prefect server + worker and a Dask scheduler + workers")
    cl_up.add_argument("--workers", type=int, default=2, help="Dask workers (default 2)")
    cl_up.add_argument("--prefect-port", type=int, default=4200, help="Prefect server and UI port (default 4200)")
    cl_up.add_argument("--dask-port", type=int, default=8786, help="Dask scheduler port (default 8786)")
    cl_up.add_argument("--dashboard-port", type=int, default=8787, help="Dask dashboard port (default 8787)")
    cl_up.add_argument("--database-url", help="PostgreSQL URL for the Prefect server (default: SQLite)")
    cl_up.add_argument("--conf", type=Path, default=None, help="configurations to deploy (default: conf/)")
    for p in (
        cl_up,
        cl_sub.add_parser("status", help="show the processes"),
        cl_sub.add_parser("down", help="stop them"),
    ):
        p.add_argument("--state-dir", type=Path, default=STATE_DIR, help="where PIDs and logs are kept")
    cl.set_defaults(run=run_cluster)

    dep = sub.add_parser("deploy", help="register the train-bpe deployments (one per conf/*.yaml) on a Prefect server")
    dep.add_argument("--conf", type=Path, default=None, help="directory of configurations (default: conf/)")
    dep.add_argument("--pool", default="bpe", help="process work pool (created if missing)")
    dep.set_defaults(run=run_deploy)
    return parser


def add_training_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--vocab-size",
        type=int,
        required=True,
        help="tokens in all: 256 bytes + merges + special tokens (with --from, the base's included)",
    )
    p.add_argument(
        "--from",
        dest="base",
        metavar="TOKENIZER",
        help="start from this tokenizer (our directory, GPT-2's vocab.json + merges.txt, a byte-level "
        "BPE tokenizer.json, a path or URL): its merges are replayed, its ids kept, new tokens take "
        "the ids after its largest",
    )
    p.add_argument(
        "--pattern",
        default=None,
        help=f"{', '.join(PATTERNS)}, or a regex (default: {DEFAULT_PATTERN}, or the --from tokenizer's)",
    )
    p.add_argument(
        "--special-token",
        action="append",
        default=[],
        dest="special_tokens",
        metavar="TOKEN",
        help="a special token, kept whole and never merged (repeat the flag for several; their ids follow the merges)",
    )
    p.add_argument("--text-column", default="text", help="Parquet/CSV column or JSON field holding the text")
    p.add_argument(
        "--text-format",
        choices=TEXT_FORMATS,
        default="doc",
        help="a text file (any suffix but .parquet/.jsonl/.json/.csv/.tsv) is one document (doc, the "
        "default) or one document per line (lines: line endings and empty lines are not text)",
    )
    p.add_argument(
        "--limit",
        metavar="BYTES|ROWS",
        help="train on the start of the input only: a size of text (10MB, 512KiB, 1.5GB) or of rows "
        "(5000rows), in input order, after --sample",
    )
    p.add_argument(
        "--sample",
        type=float,
        metavar="FRACTION",
        help="train on this fraction of the rows (documents), chosen by a hash of each row and --seed",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of --sample (default 0)")
    p.add_argument("--min-frequency", type=int, default=1, help="stop when the best pair occurs fewer times")
    p.add_argument("--tie-break", choices=TIE_BREAKS, default="bytes", help="order of pairs with equal counts")
    p.add_argument(
        "--max-token-length",
        type=int,
        default=None,
        metavar="BYTES",
        help="no merge makes a token longer than this (at least 2); such pairs are skipped (default: no limit)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="threads for counting and the merge loop (default: the cores available)",
    )
    p.add_argument("--engine", choices=ENGINES, default="local", help="dask needs the [dask] extra")
    p.add_argument("--scheduler", help="Dask scheduler address (engine dask); a local cluster is started without it")
    p.add_argument("--workers", type=int, default=None, help="workers of the local Dask cluster (engine dask)")
    p.add_argument(
        "--scratch",
        help="where the Dask engine keeps word shards and checkpoints: a path every worker "
        "shares or an object store URL (default: a temporary directory on this machine)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars and no summary (errors still show)")


def run_train(args: argparse.Namespace) -> int:
    from bpe.engine.compilation import CompileWatch
    from bpe.inputs.discover import Skipped, discover
    from bpe.inputs.formats import check_parquet
    from bpe.progress import Bars
    from bpe.train import train

    _check_out(args.out, args.force)
    roles = {
        role: token for role in ("bos", "eos", "pad", "unk") if (token := getattr(args, f"{role}_token")) is not None
    }
    base = None
    if args.base is not None:
        from bpe.extend import load_base

        base = load_base(args.base).tokenizer  # a bad base fails here, before any input is read
    also_save = also_save_sizes(
        args.also_save, args.vocab_size, args.special_tokens, roles, base.vocab_size if base is not None else 0
    )
    for size in also_save:
        _check_out(also_save_path(args.out, size), args.force)
    skipped = Skipped()
    shards = discover(args.inputs, skipped)
    if skipped:
        print(f"bpe: {skipped.summary()}", file=sys.stderr)
    for shard in shards:
        if shard.kind == "parquet":
            check_parquet(shard, args.text_column)
    progress = None if args.quiet or args.json else Bars()  # bars on a terminal only
    engine_options = {}
    if args.engine == "dask":
        require_extra("dask", "--engine dask")
        engine_options = {"scheduler": args.scheduler, "workers": args.workers, "scratch": args.scratch}
        if progress is not None:
            engine_options["log"] = lambda line: print(line, file=sys.stderr)
    elif args.scheduler or args.workers or args.scratch:
        from bpe.errors import SettingsError

        raise SettingsError("--scheduler, --workers and --scratch need --engine dask", parameter="engine")
    started = time.perf_counter()
    notice = CompileWatch(on_start=lambda: _say_compiling(progress))
    try:
        with notice:
            tokenizer = train(
                files=shards,  # as found: stdin is read once
                vocab_size=args.vocab_size,
                pattern=args.pattern,
                base=base,
                special_tokens=args.special_tokens,
                special_token_roles=roles,
                model_max_length=args.model_max_length,
                min_frequency=args.min_frequency,
                tie_break=args.tie_break,
                max_token_length=args.max_token_length,
                text_column=args.text_column,
                text_format=args.text_format,
                limit=args.limit,
                sample=args.sample,
                seed=args.seed,
                threads=args.threads,
                engine=args.engine,
                progress=progress,
                **engine_options,
            )
    finally:
        if progress is not None:
            progress.finish()  # ends the bar's line, so that a message after it starts a line of its own
    tokenizer.save(args.out, force=args.force)
    saved, not_reached = save_truncations(tokenizer, args.out, also_save, args.force)
    tokenizer.manifest["seconds"]["total"] = round(time.perf_counter() - started, 3)
    record = summary_record(tokenizer.manifest, args.out)
    record["also_saved"] = [{"out": out, "vocab_size": size} for out, size in saved]
    record["warnings"] += [
        f"--also-save {size}: the run stopped at {tokenizer.vocab_size:,} tokens; not written" for size in not_reached
    ]
    if args.json:
        import json

        print(json.dumps(record))
    elif args.quiet:  # no summary; what the user must know still shows
        for warning in record["warnings"]:
            print(f"bpe: warning: {warning}", file=sys.stderr)
    else:
        print(summary(tokenizer.manifest, args.out, record))
    return 0


def also_save_sizes(
    text: str | None, vocab_size: int, special_tokens: list[str], roles: dict[str, str], base_size: int = 0
) -> list[int]:
    """`--also-save 8192,16384` as sizes, largest first, each checked before training: below
    --vocab-size, and at least the 256 bytes plus the special tokens (the role tokens included),
    or the --from tokenizer's size (`base_size`).

    >>> also_save_sizes("300, 280,300", 400, ["<|endoftext|>"], {})
    [300, 280]
    """
    from bpe.errors import SettingsError
    from bpe.roles import with_role_tokens

    if text is None:
        return []
    smallest = max(256 + len(with_role_tokens(special_tokens, roles)), base_size)
    least = "the --from tokenizer's size" if base_size >= smallest else "256 bytes + special tokens"
    sizes = []
    for part in text.split(","):
        size = int(part) if part.strip().isdigit() else None
        if size is None or not smallest <= size < vocab_size:
            raise SettingsError(
                f"also_save: expected vocabulary sizes from {smallest} ({least}) "
                f"to below --vocab-size {vocab_size}, separated by commas, got {part.strip()!r}",
                parameter="also_save",
            )
        sizes.append(size)
    return sorted(set(sizes), reverse=True)


def also_save_path(out: str, size: int) -> str:
    """Where `--also-save` writes the tokenizer of `size` tokens: beside --out, as `<out>-<size>`
    (`tok/` -> `tok-8192`, `s3://bucket/tok/` -> `s3://bucket/tok-8192`)."""
    return f"{str(out).rstrip('/')}-{size}"


def save_truncations(tokenizer, out: str, sizes: list[int], force: bool) -> tuple[list[tuple[str, int]], list[int]]:
    """Save `tokenizer.truncated(size)` for each size the run reached, its manifest naming the run's
    --out; returns what was written ((path, size)) and the sizes above what the run reached."""
    saved, not_reached = [], []
    for size in sizes:
        if size > tokenizer.vocab_size:  # pairs ran out before the vocabulary was full
            not_reached.append(size)
            continue
        small = tokenizer.truncated(size)
        small.manifest["truncation"]["of"] = str(out)
        path = also_save_path(out, size)
        small.save(path, force=force)
        saved.append((path, size))
    return saved, not_reached


def _say_compiling(progress) -> None:
    """Say, before the long silence, why the first run of a new version is slow."""
    if progress is not None:
        progress.finish()
    print(
        "bpe: compiling the kernels for this version of bpe (first run only: later runs load them from the "
        "cache; the summary says how long it took)...",
        file=sys.stderr,
        flush=True,
    )


def _check_out(out: str, force: bool) -> None:
    """Refuse an --out that training could not publish to, before any input is read."""
    from bpe import storage
    from bpe.formats.manifest import TOKENIZER_FILES

    storage.check_target(
        out, TOKENIZER_FILES, force=force, shown=f"--out {out}", replace_hint="use --force to replace it"
    )


def summary(manifest: dict, out: str | Path, record: dict | None = None) -> str:
    """The short report printed after training (`summary_record`, or `record`, as text)."""
    d = summary_record(manifest, out) if record is None else record
    s = d["seconds"]
    mb, loop_s = d["bytes"] / 1e6, s.get("merge_loop", s.get("merge", 0))
    stopped = STOP_REASONS.get(d["stop_reason"], d["stop_reason"])
    lines = [
        f"trained {str(out).rstrip('/')}/ in {s.get('total', 0):.1f} s",
        f"  data      {d['files']} file(s), {d['documents']:,} documents ({d['null_rows']:,} null rows skipped), "
        f"{mb:,.1f} MB, {d['pretokens']:,} pre-tokens, {d['unique_words']:,} unique words",
        f"  merges    {d['merges']:,} (vocabulary {d['vocab_size']:,} with {d['special_tokens']} special token(s)); "
        f"stopped: {stopped}",
        f"  compress  {d['bytes_per_token'] or 0:.3f} bytes per token on the training text",
        f"  time      count {s.get('count', 0):.2f} s ({(d['bytes_per_second'] or 0) / 1e6:,.0f} MB/s), merge "
        f"{s.get('merge', 0):.2f} s (loop {loop_s:.2f} s, {d['merges_per_second'] or 0:,.0f} merges/s), "
        f"export {s.get('export', 0):.2f} s"
        + (f", compile {s['compile']:.1f} s (first run of this version only)" if s.get("compile", 0) >= 0.5 else ""),
    ]
    if d["inputs"] is not None:
        lines.insert(2, f"  inputs    {d['inputs']}")
    for saved in d.get("also_saved", []):
        where, size = saved["out"].rstrip("/"), saved["vocab_size"]
        lines.append(f"  also      {where}/ (vocabulary {size:,}: the same run's first merges)")
    lines += [f"warning: {w}" for w in d["warnings"]]
    return "\n".join(lines)


def summary_record(manifest: dict, out: str | Path) -> dict:
    """What the summary shows, as data (`bpe train --json`): rates in the progress bars' units
    (text bytes per second of counting, merges per second of the merge loop alone)."""
    c, r, s = manifest["counts"], manifest["result"], manifest["seconds"]
    shards = manifest["data"]["shards"]
    count_s, loop_s = s.get("count", 0.0), s.get("merge_loop", s.get("merge", 0.0))
    inputs = None
    if isinstance(shards, list):  # which kinds of file, how text files were read, --sample and --limit
        from bpe.inputs.discover import describe_inputs

        inputs = describe_inputs([f["path"] for f in shards], manifest["settings"])
    warnings = []
    if r["stop_reason"] == "no_pairs":
        warnings.append(f"pairs ran out after {r['merges']:,} merges; the vocabulary is smaller than asked")
    elif r["stop_reason"] == "max_token_length":
        warnings.append(
            f"only pairs too long for --max-token-length were left after {r['merges']:,} merges; "
            "the vocabulary is smaller than asked"
        )
    return {
        "out": str(out),
        "vocab_size": r["vocab_size"],
        "merges": r["merges"],
        "special_tokens": len(manifest["settings"]["special_tokens"]),
        "stop_reason": r["stop_reason"],
        "bytes_per_token": r["bytes_per_token"],
        "files": len(shards) if isinstance(shards, list) else 0,
        "inputs": inputs,
        **{key: c[key] for key in ("documents", "null_rows", "bytes", "pretokens", "unique_words")},
        "seconds": dict(s),
        "bytes_per_second": c["bytes"] / count_s if count_s else None,
        "merges_per_second": r["merges"] / loop_s if loop_s else None,
        "engine": manifest["engine"],
        "warnings": warnings,
    }


STOP_REASONS = {
    "vocab_size": "vocabulary size reached",
    "min_frequency": "best pair below --min-frequency",
    "no_pairs": "no pairs left",
    "max_token_length": "every pair left would make a token longer than --max-token-length",
}


def run_encode(args: argparse.Namespace) -> int:
    """Encode files or stdin, streamed in batches (bpe.encode_stream), or the arguments as text. The
    input's bytes must be UTF-8: invalid bytes are an error naming the file and offset, never
    silently U+FFFD. A summary line goes to stderr when inputs were named."""
    from bpe.encode_stream import classify_arguments, encode_inputs, map_large_blocks
    from bpe.tokenizer import Tokenizer

    if args.threads is not None and args.threads < 1:
        from bpe.errors import SettingsError

        raise SettingsError(f"--threads: expected an integer >= 1, got {args.threads}")
    tokenizer = Tokenizer.load(args.tokenizer, pattern=args.pattern)
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
    from bpe.tokenizer import Tokenizer

    tokenizer = Tokenizer.load(args.tokenizer)
    ids = args.ids
    if not ids:
        try:
            ids = [int(x) for x in sys.stdin.read().split()]
        except ValueError as exc:
            from bpe.errors import InputError

            raise InputError(f"stdin: expected token ids ({exc})") from None
    sys.stdout.write(tokenizer.decode(ids) + "\n")
    return 0


def run_warm(args: argparse.Namespace) -> int:
    """Compile (or load) every kernel, so that no later run, worker or container pays for it."""
    import numba

    from bpe.warm import warm_kernels

    def say_compiling() -> None:
        print(
            f"bpe: compiling the kernels the cache lacks into {numba.config.CACHE_DIR}...", file=sys.stderr, flush=True
        )

    warmed = warm_kernels(on_compile=say_compiling)
    if warmed.kernels_compiled:
        print(
            f"compiled {warmed.kernels_compiled} kernel(s) in {warmed.compile_seconds:.1f} s; "
            f"cache: {numba.config.CACHE_DIR}"
        )
    else:
        print(f"kernels already compiled; loaded from the cache in {warmed.seconds:.1f} s ({numba.config.CACHE_DIR})")
    return 0


def run_demo(args: argparse.Namespace) -> int:
    """Write the demo corpus, then run the train-bpe flow on it in this process."""
    require_extra("pipeline", "bpe demo")
    from bpe.pipeline.config import packaged_config
    from bpe.pipeline.demo import write_demo_corpus

    paths = write_demo_corpus(args.data)
    print(f"demo corpus: {len(paths)} Parquet shards in {args.data}/", file=sys.stderr)
    # Prefect's ephemeral server would otherwise try to send telemetry, and log an error offline.
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # Prefect waits 20 s for its ephemeral server to answer; a busy 2-core machine can take longer.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    from bpe.flows.train_bpe import train_bpe  # imports Prefect: only the pipeline's commands pay for it
    from bpe.pipeline.services import tie_ephemeral_server_to_this_process

    tie_ephemeral_server_to_this_process()

    config = args.config or packaged_config("demo")
    result = train_bpe(
        config=str(config),
        data=[str(args.data)],
        artifact_root=str(args.artifacts) if args.artifacts else None,
        vocab_size=args.vocab_size,
        promote=True,  # the demo's --vocab-size is what the user asked for: it becomes latest
    )
    if result["trained"]:
        print(
            f"{result['name']} {result['version']} written to {result['location']}: "
            f"{result['bytes_per_token']:.3f} bytes per token on held-out text"
        )
    else:
        print(f"no new data since {result['version']}: the latest version is {result['location']}")
    print(f"try: echo 'Hello world' | bpe encode {result['location']}")
    return 0


def open_store(text: str, command: str):
    """The VersionStore a command names as <artifact root>/<tokenizer name>; a mistyped store is
    an error, not an empty store."""
    require_extra("pipeline", f"bpe {command}")
    from bpe.errors import InputError
    from bpe.pipeline.store import VersionStore

    root, sep, name = text.rstrip("/").rpartition("/")
    store = VersionStore(root or (sep or "."), name)  # "/demo" lives in "/", "demo" in "."
    if not store.fs.isdir(store.base):
        what = "is not a directory" if store.fs.exists(store.base) else "no such artifact store"
        raise InputError(f"{text}: {what} (expected <artifact root>/<tokenizer name>)")
    return store


def run_versions(args: argparse.Namespace) -> int:
    from bpe.pipeline.store import describe_versions

    store = open_store(args.store, "versions")
    rows = describe_versions(store)
    if not rows:
        print(f"{args.store}: no versions")
        return 0
    print(
        f"{'version':<9} {'created':<26} {'channel':<10} {'vocabulary':>10} {'shards':>6} {'data':>10} "
        f"{'bytes/token':>11}  {'change vs promoted':<18}"
    )
    for r in rows:
        data = f"{r['data_bytes'] / 1e6:,.1f} MB" if r["data_bytes"] else ""
        bpt = f"{r['bytes_per_token']:.3f}" if r["bytes_per_token"] else ""
        change = f"{r['change']:+.4f} vs {r['previous_promoted']}" if r["change"] is not None else ""
        marks = [
            m
            for m, on in (
                ("latest", r["latest"]),
                ("promoted", r["promoted"] and not r["latest"]),
                ("rollback target", r["rollback_target"]),
            )
            if on
        ]
        line = (
            f"{r['version']:<9} {r['created']:<26} {r['channel']:<10} {r['vocab_size'] or 0:>10,} {r['shards']:>6} "
            f"{data:>10} {bpt:>11}  {change:<18}" + (f"  ({', '.join(marks)})" if marks else "")
        )
        print(line.rstrip())
    return 0


def _version_name(text: str) -> str:
    """`v0003`, `v3` or `3` -> `v0003`; anything else as given (the store refuses it in one line)."""
    import re

    match = re.fullmatch(r"v?(\d+)", text.strip())
    return f"v{int(match.group(1)):04d}" if match else text


def run_promote(args: argparse.Namespace) -> int:
    """Move `latest` to a version, backwards too; recorded in the store's history."""
    store = open_store(args.store, "promote")
    version = _version_name(args.version)
    before, after = store.promote(version)
    if before == after:
        print(f"{args.store}: {after} is already latest; nothing changed")
    else:
        print(
            f"{args.store}: latest {before or '(none)'} -> {after} (promoted; recorded in "
            f"{args.store.rstrip('/')}/history.jsonl)"
        )
    return 0


def run_rollback(args: argparse.Namespace) -> int:
    """Move `latest` back to the version promoted before the current one."""
    store = open_store(args.store, "rollback")
    before, after = store.rollback()
    print(f"{args.store}: latest {before} -> {after} (rolled back; recorded in {args.store.rstrip('/')}/history.jsonl)")
    return 0


def run_history(args: argparse.Namespace) -> int:
    """Print the store's history, oldest first: when, what, which version, and where `latest` went."""
    store = open_store(args.store, "history")
    events = store.history()
    if not events:
        print(f"{args.store}: no history yet (versions published before it have none)")
        return 0
    print(f"{'time':<21} {'action':<9} {'version':<8} {'latest':<16} {'by'}")
    for e in events:
        before, after = e.get("latest_before"), e.get("latest_after")
        moved = f"{before or '-'} -> {after}" if before != after else f"{after or '-'} (stays)"
        what = e.get("action", "?") + (f" ({e['channel']})" if e.get("action") == "publish" and "channel" in e else "")
        print(
            f"{e.get('time', ''):<21} {e.get('action', '?'):<9} {e.get('version', ''):<8} {moved:<16} "
            f"{e.get('by', '')}" + (f"  [{what}]" if what != e.get("action") else "")
        )
    return 0


def run_prune(args: argparse.Namespace) -> int:
    """List (or, with --yes, remove) the versions beyond the newest --keep, never the protected ones."""
    from bpe.pipeline.retention import prune_versions

    store = open_store(args.store, "prune")
    plan = prune_versions(store, args.keep, apply=args.yes)
    print(f"{args.store}: {len(plan.keep) + len(plan.remove)} version(s); keeping {len(plan.keep)}:")
    for version, why in plan.keep.items():
        print(f"  {version}  {why}")
    if not plan.remove:
        print("nothing to remove")
    elif not args.yes:
        print(f"would remove {len(plan.remove)} version(s): {', '.join(plan.remove)}")
        print("dry run: nothing removed; run again with --yes to remove them")
    else:
        print(f"removed {len(plan.removed)} version(s): {', '.join(plan.removed) or '-'}")
        if plan.spared:
            print(f"kept after all (promoted or rolled back to meanwhile): {', '.join(plan.spared)}")
    return 0


def run_prune_cache(args: argparse.Namespace) -> int:
    """List (or, with --yes, remove) the count cache entries no run has used for --older-than days."""
    require_extra("pipeline", "bpe prune-cache")
    from datetime import UTC, datetime

    from bpe.pipeline.retention import sweep_count_cache

    sweep = sweep_count_cache(args.cache, args.older_than, apply=args.yes)
    total = sum(e.bytes for e in sweep.entries)
    stale = sum(e.bytes for e in sweep.stale)
    print(
        f"{args.cache}: {len(sweep.entries)} count cache entries ({total / 1e6:,.1f} MB); "
        f"{len(sweep.stale)} not used for {args.older_than:g} days ({stale / 1e6:,.1f} MB)"
    )
    for e in sweep.stale:
        used = datetime.fromtimestamp(e.last_used, UTC).strftime("%Y-%m-%d %H:%M")
        print(f"  {e.key}  last used {used} UTC  {e.bytes / 1e6:,.1f} MB" + ("" if e.complete else "  (incomplete)"))
    if not sweep.stale:
        print("nothing to remove")
    elif not args.yes:
        print("dry run: nothing removed; run again with --yes to remove them")
    else:
        freed = sum(e.bytes for e in sweep.removed)
        print(
            f"removed {len(sweep.removed)} entries ({freed / 1e6:,.1f} MB)"
            + (
                f"; {len(sweep.stale) - len(sweep.removed)} used again meanwhile, kept"
                if len(sweep.removed) < len(sweep.stale)
                else ""
            )
        )
    return 0


def run_cluster(args: argparse.Namespace) -> int:
    require_extra("pipeline", "bpe cluster")
    from bpe.pipeline import cluster

    if args.action == "up":
        state = cluster.up(
            args.state_dir,
            args.workers,
            args.prefect_port,
            args.dask_port,
            args.dashboard_port,
            args.database_url,
            args.conf,
        )
        urls = state["urls"]
        print(f"Prefect UI      {urls['prefect_ui']}  (database: {state['database']})")
        print(f"Prefect API     {urls['prefect_api']}")
        print(f"Dask scheduler  {urls['dask_scheduler']}  ({args.workers} worker(s))")
        print(f"Dask dashboard  {urls['dask_dashboard']}")
        auth = state["client_env"]["PREFECT_API_AUTH_STRING"]
        stop = "bpe cluster down"
        if args.state_dir != STATE_DIR:
            stop += f" --state-dir {shlex.quote(str(args.state_dir))}"
        print(f"logs in {args.state_dir}/logs; stop: {stop}")
        print("Dask runs over TLS and the Prefect API wants its auth string (see the README's trust model); run:")
        print(
            f"  PREFECT_API_URL={urls['prefect_api']} PREFECT_API_AUTH_STRING={auth} "
            "prefect deployment run 'train-bpe/demo'"
        )
        return 0
    if args.action == "status":
        state = cluster.status(args.state_dir)
        for p in state["processes"]:
            print(f"{p['name']:<24} pid {p['pid']:<8} {'running' if p['alive'] else 'stopped'}")
        for name, url in state.get("urls", {}).items():
            print(f"{name:<24} {url}")
        return 0 if all(p["alive"] for p in state["processes"]) else 1
    stopped = cluster.down(args.state_dir)
    left = [p for p in stopped if p["alive"]]
    print(f"stopped {len(stopped) - len(left)} process(es)" + (f"; still running: {left}" if left else ""))
    return 1 if left else 0


def run_deploy(args: argparse.Namespace) -> int:
    require_extra("pipeline", "bpe deploy")
    from bpe.flows.deploy import deploy_all, require_server

    require_server()
    for name in deploy_all(args.conf, args.pool):
        print(f"deployed {name} on work pool {args.pool}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`bpe train`: the training options, the run, `--also-save`, and the summary printed after it."""

from __future__ import annotations

import argparse
import re
import sys
import time
import warnings
from pathlib import Path

from bpe.errors import require_extra
from bpe.manifest import Manifest
from bpe.pretokenize import SUPERWORD_PATTERN
from bpe.settings import DEFAULT_PATTERN, ENGINES, PATTERNS, TEXT_FORMATS, TIE_BREAKS

STOP_REASONS = {
    "vocab_size": "vocabulary size reached",
    "min_frequency": "best pair below --min-frequency",
    "no_pairs": "no pairs left",
    "max_token_length": "every pair left would make a token longer than --max-token-length",
    "superword_rules": "every pair left would make a superword --max-words or the colon rule refuses",
}


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
    superwords = p.add_argument_group("superword tokenizers (SuperBPE: merges across words after --transition)")
    superwords.add_argument(
        "--superwords",
        action="store_true",
        help="train ordinary BPE up to --transition, then merges across words up to --vocab-size",
    )
    superwords.add_argument(
        "--transition",
        type=int,
        metavar="SIZE",
        help="the vocabulary size (special tokens aside) where the superword stage starts",
    )
    superwords.add_argument(
        "--superword-pattern",
        default=SUPERWORD_PATTERN,
        metavar="PATTERN",
        help=f"how the superword stage splits text: {SUPERWORD_PATTERN} (the paper's, the default) or a regex "
        "whose matches and the text between them are the pieces",
    )
    superwords.add_argument(
        "--max-words",
        type=int,
        default=4,
        metavar="N",
        help="a superword holds at most N words (runs of non-space bytes; default 4; 0: no limit)",
    )
    superwords.add_argument(
        "--colon-space", action="store_true", help='let superwords hold ": " (refused by default, as in the paper)'
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
        help="where the Dask engine keeps word buckets and checkpoints: a path every worker "
        "shares or an object store URL (default: a temporary directory on this machine)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars and no summary (errors still show)")


def run_train(args: argparse.Namespace) -> int:
    from bpe.engine.compilation import CompileWatch
    from bpe.inputs.discover import Skipped, discover
    from bpe.inputs.readers import check_parquet
    from bpe.long_tokens import LongTokensWarning, long_tokens
    from bpe.progress import Bars
    from bpe.train import StoppedEarly, train

    if args.also_save is not None:
        also_save_path(args.out, 0)  # an --out with no place beside it: refused before anything is read
    _check_out(args.out, args.force)
    roles = {
        role: token for role in ("bos", "eos", "pad", "unk") if (token := getattr(args, f"{role}_token")) is not None
    }
    base = None
    if args.base is not None:
        from bpe.extend import load_base

        base = load_base(args.base, args.pattern)  # a bad base fails here, before any input is read
    also_save = also_save_sizes(
        args.also_save, args.vocab_size, args.special_tokens, roles, base.tokenizer.vocab_size if base else 0
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
        with notice, warnings.catch_warnings():
            warnings.simplefilter("ignore", StoppedEarly)  # the summary says it, spelled with flags
            warnings.simplefilter("ignore", LongTokensWarning)  # said below, spelt as a flag
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
                superwords=args.superwords,
                transition=args.transition,
                superword_pattern=args.superword_pattern,
                max_words=args.max_words or None,
                colon_space=args.colon_space,
                threads=args.threads,
                engine=args.engine,
                progress=progress,
                **engine_options,
            )
    finally:
        if progress is not None:
            progress.finish()  # ends the bar's line, so that a message after it starts a line of its own
    made = long_tokens(tokenizer.vocab[256 + tokenizer.manifest.settings.base_merges :])
    if made is not None:  # before saving, which such tokens make long
        print(f"bpe: warning: {made.message('--max-token-length')}", file=sys.stderr, flush=True)
    tokenizer.save(args.out, force=args.force)
    saved, not_reached = save_truncations(tokenizer, args.out, also_save, args.force)
    record = summary_record(tokenizer.manifest, args.out, total_seconds=time.perf_counter() - started)
    record["also_saved"] = [{"out": out, "vocab_size": size} for out, size in saved]
    record["warnings"] += [
        f"--also-save {size}: the run stopped at {tokenizer.vocab_size:,} tokens; not written" for size in not_reached
    ]
    if args.json and made is not None:
        record["warnings"].append(made.message("--max-token-length"))
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
        # ASCII digits only: "²" and "٣" are digits to str.isdigit, and int() refuses the first
        size = int(part) if re.fullmatch(r"\s*[0-9]+\s*", part) else None
        if size is None or not smallest <= size < vocab_size:
            raise SettingsError(
                f"also_save: expected vocabulary sizes from {smallest} ({least}) "
                f"to below --vocab-size {vocab_size}, separated by commas, got {part.strip()!r}",
                parameter="also_save",
            )
        sizes.append(size)
    return sorted(set(sizes), reverse=True)


def also_save_path(out: str, size: int) -> str:
    """Where `--also-save` writes the tokenizer of `size` tokens: beside --out, in its directory or
    bucket, as `<out>-<size>` (`tok/` -> `tok-8192`, `s3://bucket/tok/` -> `s3://bucket/tok-8192`).
    An --out with nothing beside it (a bucket, `.`, `/`) is refused: never another bucket."""
    from bpe import storage
    from bpe.errors import SettingsError

    path = storage.beside(out, f"-{size}")
    if path is None:
        if storage.is_remote(out):
            why, instead = "is a bucket (beside it are other buckets)", "a prefix inside it"
        else:
            why, instead = "has no name to add -<size> to", "a directory with a name"
        raise SettingsError(
            f"--also-save: each size is written beside --out, as <out>-<size>, and --out {out} {why}; "
            f"give --out {instead}, such as {storage.join(out, 'tok')}",
            parameter="also_save",
        )
    return path


def save_truncations(tokenizer, out: str, sizes: list[int], force: bool) -> tuple[list[tuple[str, int]], list[int]]:
    """Save `tokenizer.truncated(size)` for each size the run reached, its manifest naming the run's
    --out; returns what was written ((path, size)) and the sizes above what the run reached."""
    saved, not_reached = [], []
    for size in sizes:
        if size > tokenizer.vocab_size:  # pairs ran out before the vocabulary was full
            not_reached.append(size)
            continue
        small = tokenizer.truncated(size)
        small.manifest.truncation.of = str(out)
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
    from bpe.formats.manifest_json import TOKENIZER_FILES

    storage.check_target(
        out, TOKENIZER_FILES, force=force, shown=f"--out {out}", replace_hint="use --force to replace it"
    )


def summary(manifest: Manifest, out: str | Path, record: dict | None = None) -> str:
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
    if d.get("superwords"):
        first, second = d["superwords"]["stages"]
        lines.insert(
            -2,
            f"  stages    subwords {first['merges']:,} merges to {d['superwords']['transition']:,} tokens "
            f"({first['unique_words']:,} unique words), then superwords {second['merges']:,} merges "
            f"({second['unique_words']:,} unique pieces)",
        )
    for saved in d.get("also_saved", []):
        where, size = saved["out"].rstrip("/"), saved["vocab_size"]
        lines.append(f"  also      {where}/ (vocabulary {size:,}: the same run's first merges)")
    lines += [f"warning: {w}" for w in d["warnings"]]
    return "\n".join(lines)


def summary_record(manifest: Manifest, out: str | Path, total_seconds: float | None = None) -> dict:
    """What the summary shows, as data (`bpe train --json`): rates in the progress bars' units
    (text bytes per second of counting, merges per second of the merge loop alone). The time in
    all is `total_seconds` (the command's, saving included) when given, else the manifest's."""
    c, r, phases = manifest.counts, manifest.result, manifest.seconds.phases
    shards = manifest.data.shards
    count_s, loop_s = phases.get("count", 0.0), phases.get("merge_loop", phases.get("merge", 0.0))
    inputs = None
    if isinstance(shards, list):  # which kinds of file, how text files were read, --sample and --limit
        from bpe.inputs.discover import describe_inputs

        inputs = describe_inputs([f["path"] for f in shards], manifest.settings)
    from bpe.cli.flags import FLAGS
    from bpe.train import stopped_early

    stopped = stopped_early(manifest, FLAGS.get)
    warned = [stopped] if stopped is not None else []
    seconds = manifest.seconds.to_json()
    if total_seconds is not None:
        seconds["total"] = round(total_seconds, 3)
    return {
        "out": str(out),
        "vocab_size": r.vocab_size,
        "merges": r.merges,
        "special_tokens": len(manifest.settings.special_tokens),
        "stop_reason": r.stop_reason,
        "bytes_per_token": r.bytes_per_token,
        "files": len(shards) if isinstance(shards, list) else 0,
        "inputs": inputs,
        "documents": c.documents,
        "null_rows": c.null_rows,
        "bytes": c.bytes,
        "pretokens": c.pretokens,
        "unique_words": c.unique_words,
        "seconds": seconds,
        "bytes_per_second": c.bytes / count_s if count_s else None,
        "merges_per_second": r.merges / loop_s if loop_s else None,
        "engine": manifest.engine.to_json(),
        "superwords": manifest.superwords.to_json() if manifest.superwords is not None else None,
        "warnings": warned,
    }

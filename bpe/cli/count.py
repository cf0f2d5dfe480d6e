"""`bpe count`: the pre-token counts of text, written as Parquet for `bpe train --counts`."""

from __future__ import annotations

import argparse
import sys
import time

from bpe.cli.declare import Command
from bpe.cli.train import add_setting_option
from bpe.schema import SETTINGS

# The settings that say how text is read and split: `bpe train`'s own flags for them.
COUNT_SETTINGS = ("pattern", "special_tokens", "text_column", "text_format", "limit", "sample", "seed", "threads")


def run_count(args: argparse.Namespace) -> int:
    from bpe import storage
    from bpe.progress import Bars
    from bpe.training.counts_files import COUNTS_FILE, RECORD
    from bpe.training.trainer import count

    files = _inputs(args)
    owned = [COUNTS_FILE, RECORD]
    storage.check_target(args.out, owned, force=args.force, shown=f"--out {args.out}",
                         replace_hint="use --force to replace it", kind="counts directory")  # fmt: skip
    progress = None if args.quiet else Bars()
    started = time.perf_counter()
    on_dask = {"engine": "dask", "out": args.out, "force": args.force} if args.engine == "dask" else {}
    try:
        counted = count(
            files=files,
            lang_dir=args.lang_dir,
            **{name: getattr(args, name) for name in COUNT_SETTINGS},
            **({"scheduler": args.scheduler, "workers": args.workers} if args.engine == "dask" else {}),
            **on_dask,
            progress=progress,
        )
    finally:
        if progress is not None:
            progress.finish()
    if not on_dask:
        counted.save(args.out, force=args.force)
    if not args.quiet:
        stats = counted.stats if not on_dask else counted.stats([])
        languages = getattr(counted, "languages", None)
        if on_dask:
            words = counted.record["unique_words"]
            wrote = f"{len(counted.shards)} word bucket(s), written by the workers, in {args.out}"
        elif languages:
            words, wrote = counted.unique_words, f"a file per language ({', '.join(languages)}) in {args.out}"
        else:
            words, wrote = len(counted.counts), storage.join(args.out, COUNTS_FILE)
        print(
            f"counted {stats.pretokens:,} pre-tokens ({words:,} distinct words) in "
            f"{stats.documents:,} documents ({stats.bytes:,} bytes) in {time.perf_counter() - started:.2f} s; "
            f"wrote {wrote}",
            file=sys.stderr if args.out == "-" else sys.stdout,
        )
    return 0


def _inputs(args: argparse.Namespace) -> list[str] | dict[str, list[str]] | None:
    """INPUT..., or the text by language (--lang CODE=INPUT), or neither with --lang-dir: one of them."""
    from bpe.cli.flags import IN_FLAGS
    from bpe.errors import SettingsError
    from bpe.languages.codes import parse_languages

    given = [name for name, value in (("INPUT", args.inputs), (IN_FLAGS.languages, args.languages),
                                       (IN_FLAGS.lang_dir, args.lang_dir)) if value]  # fmt: skip
    if len(given) != 1:
        raise SettingsError(
            f"give INPUT, {IN_FLAGS.languages} CODE=INPUT or {IN_FLAGS.lang_dir} DIR, one of them"
            + (f" (got {' and '.join(given)})" if given else "")
        )
    if args.languages:
        return parse_languages(args.languages, "languages")
    return args.inputs or None


def add_count_options(p: argparse.ArgumentParser) -> None:
    """INPUT..., the reading and splitting settings (as `bpe train` spells them), --out, --force."""
    p.add_argument("inputs", nargs="*", metavar="INPUT", help="files, directories, globs, URLs or - (stdin)")
    by_name = {setting.name: setting for setting in SETTINGS}
    for name in ("languages", "lang_dir", *COUNT_SETTINGS, "engine", "scheduler", "workers"):
        add_setting_option(p, by_name[name])
    p.add_argument("--out", required=True, metavar="DIR", help="directory or object store URL to write the counts to")
    p.add_argument("--force", action="store_true", help="replace counts already in --out")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no summary (errors still show)")


COUNT = Command(  # its options are added by `add_count_options`
    "count",
    "count the pre-tokens of text and write them as Parquet, for bpe train --counts",
    run_count,
    usage="%(prog)s (INPUT... | --lang CODE=INPUT... | --lang-dir DIR) --out DIR [options]",
    description="""
        Count the pre-tokens (words) of INPUT as bpe train counts them before learning merges,
        with the same --pattern and --special-token, and write them to --out: counts.parquet
        (`word`: a pre-token's UTF-8 bytes, binary; `count`: int64) and counts.json (the pattern,
        the special tokens and what counting saw). `bpe train --counts DIR` then learns the
        merges training on INPUT gives, here or on another machine; counts another engine writes
        in the same two columns train as well. Text by language (--lang, --lang-dir) is counted
        a language at a time into a file per language, CODE.parquet. With --engine dask the
        workers count and write the word buckets they sum, part-NNNNN.parquet: no process holds
        every word (--out must be where every worker writes).""",
    examples=[
        "bpe count data/ --out counts/",
        "bpe count corpus.jsonl.zst --pattern o200k --special-token '<|endoftext|>' --out counts/",
        "bpe count --lang eng=data/en/ --lang hin=data/hi/ --out counts/",
        "bpe count s3://corpus/text/ --engine dask --scheduler tcp://scheduler:8786 --out s3://corpus/counts/",
        "bpe train --counts counts/ --vocab-size 32768 --out tok/",
    ],
)

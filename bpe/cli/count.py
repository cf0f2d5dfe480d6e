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

    owned = [COUNTS_FILE, RECORD]
    storage.check_target(args.out, owned, force=args.force, shown=f"--out {args.out}",
                         replace_hint="use --force to replace it", kind="counts directory")  # fmt: skip
    progress = None if args.quiet else Bars()
    started = time.perf_counter()
    try:
        counted = count(
            files=args.inputs,
            **{name: getattr(args, name) for name in COUNT_SETTINGS},
            progress=progress,
        )
    finally:
        if progress is not None:
            progress.finish()
    counted.save(args.out, force=args.force)
    if not args.quiet:
        stats = counted.stats
        print(
            f"counted {stats.pretokens:,} pre-tokens ({len(counted.counts):,} distinct words) in "
            f"{stats.documents:,} documents ({stats.bytes:,} bytes) in {time.perf_counter() - started:.2f} s; "
            f"wrote {storage.join(args.out, COUNTS_FILE)}",
            file=sys.stderr if args.out == "-" else sys.stdout,
        )
    return 0


def add_count_options(p: argparse.ArgumentParser) -> None:
    """INPUT..., the reading and splitting settings (as `bpe train` spells them), --out, --force."""
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="files, directories, globs, URLs or - (stdin)")
    by_name = {setting.name: setting for setting in SETTINGS}
    for name in COUNT_SETTINGS:
        add_setting_option(p, by_name[name])
    p.add_argument("--out", required=True, metavar="DIR", help="directory or object store URL to write the counts to")
    p.add_argument("--force", action="store_true", help="replace counts already in --out")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no summary (errors still show)")


COUNT = Command(  # its options are added by `add_count_options`
    "count",
    "count the pre-tokens of text and write them as Parquet, for bpe train --counts",
    run_count,
    usage="%(prog)s INPUT... --out DIR [options]",
    description="""
        Count the pre-tokens (words) of INPUT as bpe train counts them before learning merges,
        with the same --pattern and --special-token, and write them to --out: counts.parquet
        (`word`: a pre-token's UTF-8 bytes, binary; `count`: int64) and counts.json (the pattern,
        the special tokens and what counting saw). `bpe train --counts DIR` then learns the
        merges training on INPUT gives, here or on another machine; counts another engine writes
        in the same two columns train as well.""",
    examples=[
        "bpe count data/ --out counts/",
        "bpe count corpus.jsonl.zst --pattern o200k --special-token '<|endoftext|>' --out counts/",
        "bpe train --counts counts/ --vocab-size 32768 --out tok/",
    ],
)

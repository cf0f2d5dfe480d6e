"""`bpe eval`: tokenizers side by side on a multi-parallel dev set, language by language
(`bpe.evaluation.evaluate`): a table, --json for scripts, --plot for a PNG."""

from __future__ import annotations

import argparse
import json
import sys

from bpe.cli.declare import THREADS, Argument, Command
from bpe.engine.errors import Spelling

# How `bpe eval` spells the parameters of `bpe.evaluate` that its errors name.
EVAL_FLAGS = Spelling(
    {
        "dev": "--dev",
        "languages": "--lang",
        "pivot": "--pivot",
        "names": "--name",
        "pattern": "--pattern",
        "text_column": "--text-column",
        "num_threads": "--threads",
        "tokenizers": "TOKENIZER",
        "plot": "--plot",
    }
)


def run_eval(args: argparse.Namespace) -> int:
    """Evaluate, then print the table (or the JSON) on stdout; with --plot, also write the PNG."""
    from bpe.errors import BpeError, SettingsError, require_extra
    from bpe.evaluation.evaluate import evaluate
    from bpe.evaluation.report import check_plot

    try:
        if args.name is not None and len(args.name) != len(args.tokenizers):
            raise SettingsError(
                f"--name: given {len(args.name)} time(s) for {len(args.tokenizers)} tokenizer(s): give one name "
                "per TOKENIZER, in their order"
            )
        repeated = next((name for name in args.name or () if args.name.count(name) > 1), None)
        if repeated is not None:
            raise SettingsError(f"--name: {repeated!r} names two tokenizers; give each its own name")
        if args.plot:
            require_extra("plot", "bpe eval --plot")
            check_plot(args.plot)  # before the evaluation, which can take minutes
        languages = None
        if args.lang is not None:
            languages = [code.strip() for given in args.lang for code in given.split(",") if code.strip()]
        tokenizers = dict(zip(args.name, args.tokenizers)) if args.name else args.tokenizers
        evaluation = evaluate(
            tokenizers,
            args.dev,
            args.pivot,
            languages=languages,
            pattern=args.pattern,
            text_column=args.text_column,
            num_threads=args.threads,
        )
        if args.plot:
            evaluation.plot(args.plot)
    except BpeError as exc:  # the library's words for its parameters, as this command spells them
        raise type(exc)(exc.spelt(EVAL_FLAGS), parameter=exc.parameter) from None
    if args.json:
        print(json.dumps(evaluation.to_json()))
    else:
        sys.stdout.write(evaluation.table())
    return 0


EVAL = Command(
    "eval",
    "measure tokenizers side by side on a parallel dev set, language by language",
    run_eval,
    usage="%(prog)s TOKENIZER... --dev DIR [options]",
    description="""
        Measure one or several tokenizers on a multi-parallel dev set (line i of every language
        the same sentence, as NTREX or FLORES): per language, bytes per token, tokens per
        sentence, fertility (tokens per whitespace-separated word, for scripts written with
        spaces) and parity (tokens over the pivot language's on the same sentences); across
        languages, the Gini coefficient of the languages' token counts (0: every language costs
        the same), Rényi efficiency (alpha 2.5) and the share of the vocabulary used.

        TOKENIZER is anything bpe reads: our directory, GPT-2's vocab.json + merges.txt, a
        tokenizer.json, a .tiktoken file (give --pattern); a path or URL. --dev is a directory of
        <code>.txt (a sentence per line) or <code>.parquet files, one per language, named by
        language code (eng.txt, hin.txt); languages are shown in the order of their codes.""",
    examples=[
        "bpe eval tok/ --dev ntrex/",
        "bpe eval tok/ gpt2/ other/tokenizer.json --dev ntrex/ --pivot eng --plot languages.png",
        "bpe eval tok/ gpt2/ --dev ntrex/ --lang eng,hin,tel --name ours --name gpt2 --json",
    ],
    arguments=[
        Argument("tokenizers", nargs="+", metavar="TOKENIZER", help="tokenizer directories, files or URLs"),
        Argument(
            "--dev",
            required=True,
            metavar="DIR",
            help="the dev set: a directory (or URL) of <code>.txt or <code>.parquet files, line i of each the same "
            "sentence in every language",
        ),
        Argument(
            "--lang",
            action="append",
            metavar="CODES",
            help="only these languages (comma-separated codes; repeatable); default: every file of --dev",
        ),
        Argument(
            "--pivot",
            metavar="CODE",
            help="the language parity is measured against (default: eng when --dev has it, else no parity column)",
        ),
        Argument(
            "--name",
            action="append",
            metavar="NAME",
            help="the tokenizers' names in the table, one per TOKENIZER in their order (default: their paths' last "
            "parts)",
        ),
        Argument("--json", action="store_true", help="print the figures as one JSON object instead of the table"),
        Argument(
            "--plot",
            metavar="FILE.png",
            help="also draw tokens per sentence and bytes per token per language, a colour per tokenizer, to this "
            "file (its suffix names the format: .png, .svg, .pdf; the [plot] extra)",
        ),
        Argument("--pattern", help="split pattern of a tokenizer file that records none (a .tiktoken file)"),
        Argument("--text-column", default="text", help="the Parquet column holding the sentences"),
        THREADS,
    ],
)

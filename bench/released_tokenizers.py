"""A released tokenizer loaded by `Tokenizer.load`, compared with Hugging Face's ids on real rows.

    python -m bench.released_tokenizers TOKENIZER ../shared/corpora/en --rows 2000

TOKENIZER is a tokenizer.json, or a directory holding one. A directory holding only vocab.json and
merges.txt (as PythonNut/superbpe releases its tokenizers) first gets a tokenizer.json assembled as
its authors' code makes one: `train_or_extend_tokenizer`'s model and pre-tokenizers (a BPE without
an unknown token; Split by `--split-regex`, isolated, then ByteLevel without its own regex), then
`construct_hf_tokenizer`'s ByteLevel decoder, saved by transformers' `GPT2TokenizerFast` (which
adds `<|endoftext|>`). It is written into `--assemble-into` (a directory outside the repository).
Prints one JSON line: tokenizer, vocab_size (ours, Hugging Face's), rows, rows_equal, the first
row that differs (or null), and seconds to load.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import time
from pathlib import Path

from bench.peers import parquet_texts
from bpe.pretokenize import SUPERBPE_SPLIT
from bpe.tokenizer import Tokenizer


def assemble(directory: Path, into: Path, split_regex: str) -> Path:
    """tokenizer.json for vocab.json + merges.txt in `directory`, made in `into` as PythonNut/superbpe's
    `train_or_extend_tokenizer` and `construct_hf_tokenizer` make it; its path."""
    from tokenizers import Regex, pre_tokenizers
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers.decoders import ByteLevel as ByteLevelDecoder
    from tokenizers.models import BPE
    from transformers import GPT2TokenizerFast

    into.mkdir(parents=True, exist_ok=True)
    for name in ("vocab.json", "merges.txt"):
        shutil.copyfile(directory / name, into / name)
    base = HFTokenizer(BPE.from_file(str(into / "vocab.json"), str(into / "merges.txt")))
    base.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(pattern=Regex(split_regex), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
        ]
    )
    base.save(str(into / "tokenizer.json"))
    base = HFTokenizer.from_file(str(into / "tokenizer.json"))
    base.decoder = ByteLevelDecoder(add_prefix_space=True, trim_offsets=True, use_regex=True)
    eos_id, pad_id = base.get_vocab_size(), base.get_vocab_size() + 1
    GPT2TokenizerFast(
        tokenizer_object=base,
        eos_token=base.decode([eos_id], skip_special_tokens=False),
        pad_token=base.decode([pad_id], skip_special_tokens=False),
    ).save_pretrained(str(into))
    return into / "tokenizer.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "tokenizer", type=Path, help="a tokenizer.json, or a directory holding one or vocab.json + merges.txt"
    )
    parser.add_argument("corpus", help="Parquet files with a `text` column (a directory or a file)")
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--split-regex", default=SUPERBPE_SPLIT, help="Split regex for an assembled tokenizer.json")
    parser.add_argument("--assemble-into", type=Path, help="where to write an assembled tokenizer.json")
    args = parser.parse_args()

    from tokenizers import Tokenizer as HFTokenizer

    path = args.tokenizer
    if path.is_dir() and not (path / "tokenizer.json").exists():
        if args.assemble_into is None:
            parser.error(f"{path} holds no tokenizer.json: give --assemble-into DIR to assemble one")
        path = assemble(path, args.assemble_into, args.split_regex)
    elif path.is_dir():
        path = path / "tokenizer.json"
    started = time.perf_counter()
    ours = Tokenizer.load(path)
    seconds = time.perf_counter() - started
    theirs = HFTokenizer.from_file(str(path))
    rows = list(itertools.islice(parquet_texts(args.corpus), args.rows))
    our_ids = ours.encode_batch(rows, allowed_special="all")
    their_ids = [e.ids for e in theirs.encode_batch(rows, add_special_tokens=False)]
    differing = [i for i, (a, b) in enumerate(zip(our_ids, their_ids)) if a != b]
    print(
        json.dumps(
            {
                "tokenizer": str(path),
                "vocab_size": [ours.vocab_size, theirs.get_vocab_size()],
                "rows": len(rows),
                "rows_equal": len(rows) - len(differing),
                "first_difference": differing[0] if differing else None,
                "tokens": sum(map(len, their_ids)),
                "load_seconds": round(seconds, 1),
            }
        )
    )


if __name__ == "__main__":
    main()

"""Peer trainers run on the same rows as `bpe train`: Hugging Face `tokenizers` and `rustbpe`.

Run as a process of its own so that its wall time and peak memory can be measured from outside:
    python -m bench.peers hf DATA_DIR --vocab-size 32768 --pattern cl100k
It prints one JSON line: {"trainer", "vocab_size", "seconds"}.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import time
from collections.abc import Iterable, Iterator

import pyarrow.parquet as pq

from bpe.formats.hf_json import hf_split_regex
from bpe.pretokenize import resolve_pattern


def parquet_texts(data: str, text_column: str = "text") -> Iterator[str]:
    """Every non-null row of every Parquet file in `data`, in path order (as `bpe train` reads them)."""
    files = sorted(glob.glob(os.path.join(data, "**", "*.parquet"), recursive=True)) if os.path.isdir(data) else [data]
    for path in files:
        for batch in pq.ParquetFile(path).iter_batches(columns=[text_column], batch_size=16384):
            for text in batch.column(0).to_pylist():
                if text is not None:
                    yield text


def hf_trained(texts: Iterable[str], vocab_size: int, pattern: str):
    """A Hugging Face `tokenizers` byte-level BPE trained by its `BpeTrainer` on `texts`, split by
    `pattern` as `bpe train` splits them."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    name, regex = resolve_pattern(pattern)
    split, behavior, _ = hf_split_regex(name, regex)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(split), behavior=behavior.lower()),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def rustbpe_trained(texts: Iterable[str], vocab_size: int, pattern: str):
    """A rustbpe tokenizer trained on `texts`, split by `pattern` as `bpe train` splits them."""
    import rustbpe

    name, regex = resolve_pattern(pattern)
    split, _, _ = hf_split_regex(name, regex)  # the spelling Rust regex engines read like Python's
    tokenizer = rustbpe.Tokenizer()
    tokenizer.train_from_iterator(texts, vocab_size, pattern=split)
    return tokenizer


def train_hf(data: str, vocab_size: int, pattern: str) -> int:
    return hf_trained(parquet_texts(data), vocab_size, pattern).get_vocab_size()


def train_rustbpe(data: str, vocab_size: int, pattern: str) -> int:
    return rustbpe_trained(parquet_texts(data), vocab_size, pattern).vocab_size


TRAINERS = {"hf": train_hf, "rustbpe": train_rustbpe}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("trainer", choices=sorted(TRAINERS))
    parser.add_argument("data")
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument("--pattern", default="cl100k")
    args = parser.parse_args()
    started = time.perf_counter()
    vocab = TRAINERS[args.trainer](args.data, args.vocab_size, args.pattern)
    seconds = time.perf_counter() - started
    print(json.dumps({"trainer": args.trainer, "vocab_size": vocab, "seconds": round(seconds, 3)}))


if __name__ == "__main__":
    main()

"""Peer trainers run on the same rows as `bpe train`: Hugging Face `tokenizers` and `rustbpe`.

Run as a process of its own so that its wall time and peak memory can be measured from outside:
    python -m bench.peers hf DATA_DIR --vocab-size 32768 --pattern cl100k
    python -m bench.peers hf-parity UD_DIR --dev NTREX_DIR --vocab-size 8192 --pattern gpt2 --out tok.json
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


def split_by(pattern: str):
    """Hugging Face's pre-tokenizer splitting text as `bpe train` splits it with `pattern`, then
    spelling its bytes in GPT-2's alphabet."""
    from tokenizers import Regex, pre_tokenizers

    name, regex = resolve_pattern(pattern)
    split, behavior, _ = hf_split_regex(name, regex)
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(split), behavior=behavior.lower()),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


def by_language(data: str) -> dict[str, str]:
    """`<code>.parquet` (or `<code>.txt`) files of a directory by language code, in code order."""
    paths = sorted(glob.glob(os.path.join(data, "*.parquet")) or glob.glob(os.path.join(data, "*.txt")))
    return {os.path.basename(p).rsplit(".", 1)[0]: p for p in paths}


def language_texts(path: str) -> Iterator[str]:
    """A language's documents: a Parquet file's rows, or a text file's lines."""
    if path.endswith(".parquet"):
        yield from parquet_texts(path)
    else:
        with open(path, encoding="utf-8") as lines:
            yield from (line.rstrip("\n") for line in lines)


def hf_parity_trained(
    data: str, dev: str | None, vocab_size: int, pattern: str, variant: str = "base", global_merges: int = 0
):
    """A Hugging Face byte-level BPE trained by its `ParityBpeTrainer` on one language per file of
    `data`, balanced on the parallel `dev` files (the same codes), split by `pattern`; the
    vocabulary is the 256 bytes and `vocab_size - 256` merges, as `bpe train`'s."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from tokenizers.trainers import ParityBpeTrainer

    languages = by_language(data)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = split_by(pattern)
    trainer = ParityBpeTrainer(
        num_merges=vocab_size - 256,
        variant=variant,
        global_merges=global_merges,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte, as ours: text never loses one
        show_progress=False,
    )
    dev_files = by_language(dev) if dev else {}
    trainer.train_from_iterator(
        tokenizer,
        train_iterators=[language_texts(p) for p in languages.values()],
        dev_iterators=[language_texts(dev_files[c]) for c in languages] if dev else None,
    )
    return tokenizer


def hf_multilingual_trained(data: str, vocab_size: int, pattern: str):
    """Hugging Face's plain `BpeTrainer` on every language of `data` together, in code order."""
    texts = (text for path in by_language(data).values() for text in language_texts(path))
    return hf_trained(texts, vocab_size, pattern)


TRAINERS = {"hf": train_hf, "rustbpe": train_rustbpe}


def main_multilingual(argv: list[str]) -> None:
    """`python -m bench.peers hf-parity|hf-plain DATA --dev DEV --vocab-size N --pattern P --out FILE`:
    train on one file per language, save the tokenizer.json to FILE, print the seconds as JSON."""
    parser = argparse.ArgumentParser()
    parser.add_argument("trainer", choices=["hf-parity", "hf-plain"])
    parser.add_argument("data")
    parser.add_argument("--dev")
    parser.add_argument("--vocab-size", type=int, default=8192)
    parser.add_argument("--pattern", default="gpt2")
    parser.add_argument("--variant", default="base")
    parser.add_argument("--global-merges", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    if args.trainer == "hf-parity":
        tokenizer = hf_parity_trained(
            args.data, args.dev, args.vocab_size, args.pattern, args.variant, args.global_merges
        )
    else:
        tokenizer = hf_multilingual_trained(args.data, args.vocab_size, args.pattern)
    seconds = time.perf_counter() - started
    tokenizer.save(args.out)
    print(json.dumps({"trainer": args.trainer, "vocab_size": tokenizer.get_vocab_size(), "seconds": round(seconds, 3)}))


def main() -> None:
    import sys

    if len(sys.argv) > 1 and sys.argv[1] in ("hf-parity", "hf-plain"):
        return main_multilingual(sys.argv[1:])
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

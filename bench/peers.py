"""Peer trainers run on the same rows as `bpe train`: Hugging Face `tokenizers`, `rustbpe` and
`sentencepiece` (its BPE trainer: another algorithm, see `sentencepiece_trained`).

Run as a process of its own so that its wall time and peak memory can be measured from outside:
    python -m bench.peers hf DATA_DIR --vocab-size 32768 --pattern cl100k
    python -m bench.peers sentencepiece DATA_DIR --vocab-size 32768    # no pattern: it has none
    python -m bench.peers rustbpe FILE.txt --vocab-size 300 --split REGEX Isolated
    python -m bench.peers hf-parity UD_DIR --dev NTREX_DIR --vocab-size 8192 --pattern gpt2 --out tok.json
It prints one JSON line: {"trainer", "vocab_size", "seconds"}. `--split` gives the split regex and
Hugging Face's behavior as `bench.train` resolved them from the pattern, so that the process imports
nothing of ours: the peer's own cost, without this project's modules (about 0.08 s and 8 MB), and
pyarrow only to read Parquet, which a run on a 1 KB file does not.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import time
from collections.abc import Iterable, Iterator

Split = tuple[str, str]  # Hugging Face's Split pre-tokenizer: (regex, behavior)


def parquet_texts(data: str, text_column: str = "text") -> Iterator[str]:
    """Every non-null row of every Parquet file in `data`, in path order (as `bpe train` reads them);
    a `.txt` file is one document, as `bpe train` reads it."""
    if data.endswith(".txt"):
        with open(data, encoding="utf-8-sig") as f:
            yield f.read()
        return
    import pyarrow.parquet as pq

    files = sorted(glob.glob(os.path.join(data, "**", "*.parquet"), recursive=True)) if os.path.isdir(data) else [data]
    for path in files:
        for batch in pq.ParquetFile(path).iter_batches(columns=[text_column], batch_size=16384):
            for text in batch.column(0).to_pylist():
                if text is not None:
                    yield text


def hf_split(pattern: str) -> Split:
    """The regex and behavior of Hugging Face's Split that cut text as `bpe train` does with
    `pattern` (also the spelling Rust regex engines read like Python's)."""
    from bpe.formats.hf_json import hf_split_regex
    from bpe.pretokenize import resolve_pattern

    split, behavior, _ = hf_split_regex(*resolve_pattern(pattern))
    return split, behavior


def hf_trained(texts: Iterable[str], vocab_size: int, pattern: str, split: Split | None = None):
    """A Hugging Face `tokenizers` byte-level BPE trained by its `BpeTrainer` on `texts`, split by
    `pattern` as `bpe train` splits them (or by `split`, its Split resolved already)."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    split, behavior = split or hf_split(pattern)
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


def rustbpe_trained(texts: Iterable[str], vocab_size: int, pattern: str, split: Split | None = None):
    """A rustbpe tokenizer trained on `texts`, split by `pattern` as `bpe train` splits them (or by
    `split`'s regex)."""
    import rustbpe

    regex, _ = split or hf_split(pattern)
    tokenizer = rustbpe.Tokenizer()
    tokenizer.train_from_iterator(texts, vocab_size, pattern=regex)
    return tokenizer


# SentencePiece's trainer options here: BPE on characters with byte fallback, as Llama 2, Mistral
# and Gemma train theirs. Every sentence is kept (input_sentence_size=0: no sample of 10 million
# lines), up to 1 MiB long; the character coverage is its default (0.9995), the rarer characters
# falling back to bytes; hard_vocab_limit=False lets a corpus too small for the vocabulary end
# early, as the other trainers do, instead of failing.
SENTENCEPIECE_OPTIONS = {
    "model_type": "bpe",
    "byte_fallback": True,
    "input_sentence_size": 0,
    "max_sentence_length": 1 << 20,
    "hard_vocab_limit": False,
    "minloglevel": 1,  # warnings and errors only: no line per 20 merges
}
# Always in a sentencepiece vocabulary with byte fallback: <unk>, <s>, </s> and the 256 bytes.
SENTENCEPIECE_META_PIECES = 3 + 256


def lines(texts: Iterable[str]) -> Iterator[str]:
    """The non-empty lines of `texts`: sentencepiece's sentences."""
    for text in texts:
        for line in text.split("\n"):
            if line:
                yield line


def sentencepiece_trained(texts: Iterable[str], vocab_size: int, threads: int | None = None) -> bytes:
    """A sentencepiece BPE model (its serialized proto) trained on the lines of `texts`.

    Another algorithm than ours: no pre-tokenization regex (it splits only at whitespace, at changes
    of Unicode script and around digits), NFKC-normalized characters with spaces as U+2581, merges
    of characters, and bytes only for the characters its coverage leaves out."""
    import io

    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=lines(texts),
        model_writer=model,
        vocab_size=vocab_size,
        num_threads=threads or len(os.sched_getaffinity(0)),
        **SENTENCEPIECE_OPTIONS,
    )
    return model.getvalue()


def sentencepiece_smallest_vocab(texts: Iterable[str], coverage: float = 0.9995) -> int:
    """The smallest `vocab_size` sentencepiece accepts for `texts` with SENTENCEPIECE_OPTIONS: the
    meta pieces and bytes, and every character its coverage keeps (the most frequent first, until
    they cover `coverage` of the normalized text), as its trainer counts them."""
    from collections import Counter

    import sentencepiece as spm

    normalizer = spm.SentencePieceNormalizer(rule_name="nmt_nfkc")
    counts = Counter()
    for line in lines(texts):
        counts.update(normalizer.normalize(line))
    total, covered, required = sum(counts.values()), 0, 0
    for _, count in sorted(counts.items(), key=lambda item: -item[1]):
        if covered / total >= coverage:
            break
        covered += count
        required += 1
    return SENTENCEPIECE_META_PIECES + required


def train_sentencepiece(data: str, vocab_size: int, pattern: str, split: Split | None = None) -> int:
    import sentencepiece as spm

    model = sentencepiece_trained(parquet_texts(data), vocab_size)
    return spm.SentencePieceProcessor(model_proto=model).get_piece_size()


def train_hf(data: str, vocab_size: int, pattern: str, split: Split | None = None) -> int:
    return hf_trained(parquet_texts(data), vocab_size, pattern, split).get_vocab_size()


def train_rustbpe(data: str, vocab_size: int, pattern: str, split: Split | None = None) -> int:
    return rustbpe_trained(parquet_texts(data), vocab_size, pattern, split).vocab_size


def split_by(pattern: str):
    """Hugging Face's pre-tokenizer splitting text as `bpe train` splits it with `pattern`, then
    spelling its bytes in GPT-2's alphabet."""
    from tokenizers import Regex, pre_tokenizers

    split, behavior = hf_split(pattern)
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


TRAINERS = {"hf": train_hf, "rustbpe": train_rustbpe, "sentencepiece": train_sentencepiece}


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
    parser.add_argument(
        "--split", nargs=2, metavar=("REGEX", "BEHAVIOR"), help="the pattern's Split, resolved (bench.peers.hf_split)"
    )
    args = parser.parse_args()
    started = time.perf_counter()
    vocab = TRAINERS[args.trainer](args.data, args.vocab_size, args.pattern, tuple(args.split) if args.split else None)
    seconds = time.perf_counter() - started
    print(json.dumps({"trainer": args.trainer, "vocab_size": vocab, "seconds": round(seconds, 3)}))


if __name__ == "__main__":
    main()

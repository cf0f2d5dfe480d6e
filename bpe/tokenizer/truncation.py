"""A smaller vocabulary cut from a trained one: its first merges. BPE's merges are learnt in order,
so a tokenizer's first k merges are exactly what training on the same data to that size gives:
one run, every size (`Tokenizer.truncated`, `bpe train --also-save`)."""

from __future__ import annotations

from dataclasses import dataclass

from bpe.errors import SettingsError
from bpe.manifest import Manifest, Truncation
from bpe.tokenizer.vocabulary import Vocabulary


@dataclass
class Cut:
    """What the tokenizer of the smaller vocabulary is made of, besides the pattern, roles and
    `model_max_length` it keeps: `Tokenizer(merges, pattern, special_tokens, ids=ids, manifest=manifest)`."""

    merges: list[tuple[int, int]]
    special_tokens: list[str] | dict[str, int]
    ids: dict[int, int] | None
    manifest: Manifest | None


def cut(vocabulary: Vocabulary, manifest: Manifest, vocab_size: int) -> Cut:
    """The first merges of `vocabulary` that make `vocab_size` tokens in all, the special tokens
    renumbered right after them (or every id kept: a tokenizer trained from a base, or another
    tool's ids that still number the tokens 0..n-1), and `manifest` with a `truncation` section."""
    n_bytes, n_special = 256 - len(vocabulary.absent), len(vocabulary.special_tokens)
    smallest = n_bytes + n_special
    if type(vocab_size) is not int or not smallest <= vocab_size <= vocabulary.size:
        raise SettingsError(
            lambda s: (
                f"{s.vocab_size}: expected an integer from {smallest} ({n_bytes} bytes + {n_special} "
                f"special token(s)) to this tokenizer's {vocabulary.size}, got {vocab_size!r}"
            ),
            parameter="vocab_size",
        )
    kept = vocab_size - smallest
    ids = None
    special_tokens: list[str] | dict[str, int] = list(vocabulary.special_tokens)
    if manifest.base is not None:  # trained from a base (bpe.training.extend): every id stays
        ids = vocabulary.given_ids(below=256 + kept)
        special_tokens = dict(vocabulary.special_tokens)
    elif vocabulary.foreign_ids:  # another tool's ids (GPT-2's vocab.json): kept if they still number 0..n-1
        ids = vocabulary.given_ids(below=256 + kept)
        if sorted(ids.values()) != list(range(len(ids))):
            raise SettingsError(
                lambda s: (
                    f"{s.vocab_size}: this tokenizer's ids (from another tool's files) do not number its "
                    f"first {len(ids)} tokens 0..{len(ids) - 1}, so it cannot be cut to {vocab_size}"
                ),
                parameter="vocab_size",
            )
        special_tokens = {text: len(ids) + i for i, text in enumerate(vocabulary.special_tokens)}
    smaller = None
    if manifest:
        smaller = manifest.copy(without=("tokenizer", "files"))  # written again by save, for this size
        if smaller.result is not None:  # the training text's token count was with every merge
            result = smaller.result
            result.merges, result.vocab_size, result.tokens, result.bytes_per_token = kept, vocab_size, None, None
        smaller.truncation = Truncation(
            vocab_size=vocab_size, merges=kept, of_vocab_size=vocabulary.size, of_merges=len(vocabulary.merges)
        )
    return Cut(vocabulary.merges[:kept], special_tokens, ids, smaller)

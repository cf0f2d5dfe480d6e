"""The obviously correct BPE trainer: recount every pair of every word each round.

It is slow on purpose and short enough to check by eye; tests use it as the oracle.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import regex


def merge_ids(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """[1, 2, 3, 1, 2] with (1, 2) -> 256 gives [256, 3, 256]."""
    out = []
    i = 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def encode_word(word: bytes, ranks: dict[tuple[int, int], int]) -> list[int]:
    """`word` under the merges in `ranks` (pair -> its merge's index): the lowest-ranked pair
    present is merged first, everywhere in the word, as replaying the merges in order does."""
    ids = list(word)
    while len(ids) > 1:
        rank, pair = min((ranks.get(pair, len(ranks)), pair) for pair in zip(ids, ids[1:]))
        if rank == len(ranks):
            break
        ids = merge_ids(ids, pair, 256 + rank)
    return ids


def isolated_split(split: str, text: str) -> list[str]:
    """Hugging Face's `Split(split, behavior="isolated")`: the matches and the text between them.
    `\\d+` on "ab12cd" gives ["ab", "12", "cd"]."""
    pieces, end = [], 0
    for match in regex.finditer(split, text):
        if match.start() > end:
            pieces.append(text[end : match.start()])
        pieces.append(match.group())
        end = match.end()
    if end < len(text):
        pieces.append(text[end:])
    return pieces


def words_in(token: bytes) -> int:
    """b" by the  way" holds 3 words: runs of bytes other than the space (tabs and newlines count as word bytes)."""
    return len([word for word in token.split(b" ") if word])


def train_reference(
    word_counts: dict[bytes, int],
    n_merges: int,
    tie_break: str | Callable[[tuple[int, int], dict[int, bytes]], object] = "bytes",
    min_frequency: int = 1,
    max_token_length: int | None = None,
    base: list[tuple[int, int]] = (),
    max_words: int | None = None,
    colon_space: bool = True,
) -> list[tuple[int, int]]:
    """Merges (pairs of token ids, new ids 256, 257, ...) of plain one-merge-per-round BPE. With
    `max_token_length`, pairs whose token would be longer than that many bytes are never chosen;
    with `max_words`, nor those whose token holds more words (runs of bytes other than b" "), and
    with `colon_space=False`, nor those whose token holds b": " (SuperBPE's second stage).
    With `base` (a tokenizer's merges), those are applied first, one after the other, to every
    word; the merges returned are the base's and then `n_merges` more, learnt from there."""
    words = [(list(word), count) for word, count in word_counts.items()]
    vocab = {i: bytes([i]) for i in range(256)}
    merges: list[tuple[int, int]] = []
    for new_id, pair in enumerate(base, start=256):
        merges.append(pair)
        vocab[new_id] = vocab[pair[0]] + vocab[pair[1]]
        words = [(merge_ids(ids, pair, new_id), count) for ids, count in words]
    for new_id in range(256 + len(base), 256 + len(base) + n_merges):
        stats: Counter[tuple[int, int]] = Counter()
        for ids, count in words:
            for pair in zip(ids, ids[1:]):
                stats[pair] += count
        if max_token_length is not None:
            stats = Counter({p: c for p, c in stats.items() if len(vocab[p[0]]) + len(vocab[p[1]]) <= max_token_length})
        if max_words is not None:
            stats = Counter({p: c for p, c in stats.items() if words_in(vocab[p[0]] + vocab[p[1]]) <= max_words})
        if not colon_space:
            stats = Counter({p: c for p, c in stats.items() if b": " not in vocab[p[0]] + vocab[p[1]]})
        if not stats:
            break
        if callable(tie_break):  # another trainer's order of equal counts: the greatest key wins
            best = max(stats, key=lambda p: (stats[p], tie_break(p, vocab)))
        elif tie_break == "bytes":
            best = max(stats, key=lambda p: (stats[p], vocab[p[0]], vocab[p[1]]))
        else:
            best = max(stats, key=lambda p: (stats[p], p))
        if stats[best] < min_frequency:
            break
        merges.append(best)
        vocab[new_id] = vocab[best[0]] + vocab[best[1]]
        words = [(merge_ids(ids, best, new_id), count) for ids, count in words]
    return merges

"""The obviously correct BPE trainer: recount every pair of every word each round.

It is slow on purpose and short enough to check by eye; tests use it as the oracle.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

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
        elif tie_break == "bytes":  # pairs of the same bytes (two tokens "aaa"): the lower ids
            best = max(stats, key=lambda p: (stats[p], vocab[p[0]], vocab[p[1]], -p[0], -p[1]))
        else:
            best = max(stats, key=lambda p: (stats[p], p))
        if stats[best] < min_frequency:
            break
        merges.append(best)
        vocab[new_id] = vocab[best[0]] + vocab[best[1]]
        words = [(merge_ids(ids, best, new_id), count) for ids, count in words]
    return merges


# ---------------------------------------------------------------------------------------------
# Parity-aware BPE (Foroutan et al. 2025), as Hugging Face's ParityBpeTrainer (0.23.3, `do_train`)
# chooses each merge's language. Everything is recounted for every merge.


@dataclass
class ParityRun:
    """What `reference_parity_run` made: the merges, the language each served (-1: a global
    merge), and whether Hugging Face's trainer would have looped for ever at some choice (the
    window variant when every language left under the threshold is exhausted; ratio targets with
    an empty language): this trainer chose as documented there, Hugging Face's never returns."""

    merges: list[tuple[int, int]]
    languages: list[int]
    stalled: bool = False


def reference_parity_merges(
    word_counts_by_language: list[dict[bytes, int]], n_merges: int, **options
) -> list[tuple[int, int]]:
    """The merges of `reference_parity_run` (same arguments)."""
    return reference_parity_run(word_counts_by_language, n_merges, **options).merges


def _pair_counts(word_lists: list[list[tuple[list[int], int]]]) -> Counter[tuple[int, int]]:
    stats: Counter[tuple[int, int]] = Counter()
    for words in word_lists:
        for ids, count in words:
            for pair in zip(ids, ids[1:]):
                stats[pair] += count
    return stats


def _tokens(words: list[tuple[list[int], int]]) -> int:
    return sum(len(ids) * count for ids, count in words)


def _window_choice(values: list, lowest, selected: list[int], window: int, threshold: float) -> tuple[int, bool]:
    """Hugging Face's `select_language_window`: the greatest value (exhausted languages hold
    `lowest`; ties to the lower index) whose share of the last `window` choices is at most the
    threshold, else the next greatest, ...; with every language over it, the last one tried.
    Returns (language, stalled): stalled where Hugging Face's loop never ends (the best left is a
    language already set aside: every language left is exhausted); this one returns it."""
    mask = [True] * len(values)
    while True:
        best, best_value = 0, lowest
        for i, value in enumerate(values):
            if mask[i] and value > best_value:
                best, best_value = i, value
        if not mask[best]:
            return best, True
        if selected.count(best) / window <= threshold:
            return best, False
        mask[best] = False
        if not any(mask):
            return best, False


def reference_parity_run(
    word_counts_by_language: list[dict[bytes, int]],
    n_merges: int,
    *,
    variant: str = "base",
    global_merges: int = 0,
    window: int = 100,
    alpha: float = 2.0,
    ratio: tuple[float, ...] | None = None,
    dev: list[dict[bytes, int]] | None = None,
    tie_break: str | Callable[[tuple[int, int], dict[int, bytes]], object] = "bytes",
    min_frequency: int = 1,
    max_token_length: int | None = None,
    base: list[tuple[int, int]] = (),
) -> ParityRun:
    """Parity-aware merges over languages 0, 1, ... (their word counts; `dev`, one dict per
    language, the dev set's). The first `global_merges` merges take the best pair of the counts
    summed over languages. Each later merge serves one language, and merges the best pair of that
    language's counts (pairs ordered as `train_reference` orders them) in every language's words
    and dev words. The language: with `ratio`, the one whose training compression (tokens before
    the first merge / tokens now) divided by its ratio is the lowest (float64, in Hugging Face's
    order of operations); otherwise the one whose dev words, or without a dev set whose training
    words, are the longest in tokens (count x length, summed); ties to the lower index. `variant`
    "window" passes over a language chosen more than alpha / languages of the last `window`
    choices (`_window_choice`; a choice counts there even when its language proves exhausted).
    A language with no pair of count >= max(min_frequency, 1) that `max_token_length` allows is
    exhausted and never chosen again; the run ends when all are, or when the global phase finds
    no such pair. `base` merges are applied first to training and dev words; the merges returned
    are the base's and then up to `n_merges` more."""
    n_languages = len(word_counts_by_language)
    words = [[(list(word), count) for word, count in counts.items()] for counts in word_counts_by_language]
    dev_words = [[(list(word), count) for word, count in counts.items()] for counts in dev or []]
    vocab = {i: bytes([i]) for i in range(256)}
    merges: list[tuple[int, int]] = []

    def merge(pair: tuple[int, int]) -> None:
        new_id = 256 + len(merges)
        merges.append(pair)
        vocab[new_id] = vocab[pair[0]] + vocab[pair[1]]
        for lists in (words, dev_words):
            for i, word_list in enumerate(lists):  # a word without the pair's first token keeps its ids
                lists[i] = [
                    (merge_ids(ids, pair, new_id) if pair[0] in ids else ids, count) for ids, count in word_list
                ]

    for pair in base:
        merge(pair)

    def best_pair(stats: Counter[tuple[int, int]]) -> tuple[int, int] | None:
        if max_token_length is not None:
            stats = Counter({p: c for p, c in stats.items() if len(vocab[p[0]]) + len(vocab[p[1]]) <= max_token_length})
        stats = Counter({p: c for p, c in stats.items() if c >= max(min_frequency, 1)})
        if not stats:
            return None
        if callable(tie_break):
            return max(stats, key=lambda p: (stats[p], tie_break(p, vocab)))
        if tie_break == "bytes":
            return max(stats, key=lambda p: (stats[p], vocab[p[0]], vocab[p[1]], -p[0], -p[1]))
        return max(stats, key=lambda p: (stats[p], p))

    initial = [float(_tokens(w)) for w in words]
    threshold = alpha / n_languages if n_languages else 0.0
    selected: list[int] = []  # the window: the last `window` choices
    # Ratio targets serve by compression, which a language without training text has none of: it
    # is exhausted from the start (Hugging Face compares its NaN, which never wins, and may loop).
    exhausted = {i for i in range(n_languages) if ratio is not None and not initial[i]}
    served: list[int] = []
    stalled = False
    made = 0
    while made < n_merges and len(exhausted) < n_languages:
        if made < global_merges:
            pair = best_pair(_pair_counts(words))
            if pair is None:
                break
            language = -1
        else:
            if ratio is not None:
                # Hugging Face: compression = initial / current; adjusted = compression / ratio.
                adjusted = [(initial[i] / float(_tokens(words[i]))) / ratio[i] if _tokens(words[i]) else math.nan
                            for i in range(n_languages)]  # fmt: skip
                if variant == "window":
                    values = [-math.inf if i in exhausted else -adjusted[i] for i in range(n_languages)]
                    language, stall = _window_choice(values, -math.inf, selected, window, threshold)
                else:
                    open_ = [i for i in range(n_languages) if i not in exhausted]
                    ordered = [i for i in open_ if not math.isnan(adjusted[i])]
                    language = min(ordered, key=lambda i: (adjusted[i], i)) if ordered else open_[0]
                    stall = not ordered and 0 in exhausted  # Hugging Face takes language 0, again and again
            else:
                lengths = [_tokens(w) for w in (dev_words if dev is not None else words)]
                if variant == "window":
                    lowest = -(1 << 63)
                    values = [lowest if i in exhausted else lengths[i] for i in range(n_languages)]
                    language, stall = _window_choice(values, lowest, selected, window, threshold)
                else:
                    open_ = [i for i in range(n_languages) if i not in exhausted]
                    language = min(open_, key=lambda i: (-lengths[i], i))
                    stall = False
            stalled = stalled or stall
            if variant == "window":
                selected = (selected + [language])[-window:]
            pair = best_pair(_pair_counts([words[language]]))
            if pair is None:
                exhausted.add(language)
                continue
        merge(pair)
        served.append(language)
        made += 1
    return ParityRun(merges, [-1] * len(base) + served, stalled)

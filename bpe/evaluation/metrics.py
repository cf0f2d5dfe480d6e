"""How a tokenizer treats each language of a parallel dev set, and how unequally it treats them.

Per language: bytes per token, tokens per sentence, fertility (tokens per whitespace-separated
word, where the script separates words with spaces), parity against a pivot language (its tokens
on the same sentences divided by the pivot's: Petrov et al. 2023's "premium"), and vocabulary use.
Across languages: the Gini coefficient of the languages' token counts on the parallel text
(Foroutan et al. 2025), and the Rényi efficiency of the unigram token distribution (Zouhar et al.
2023). No Prefect, no Dask: the core tier.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import regex

RENYI_ALPHA = 2.5  # Zouhar et al. 2023's best correlate of downstream BLEU
# Scripts written without spaces between words: a whitespace-separated "word" of Chinese,
# Japanese, Thai, Lao, Khmer, Burmese or Tibetan is a clause or a sentence, so tokens per such
# "word" measure nothing; those languages get no fertility.
UNSPACED_SCRIPTS = ("Han", "Hiragana", "Katakana", "Thai", "Lao", "Khmer", "Myanmar", "Tibetan")
_UNSPACED = regex.compile("[" + "".join(rf"\p{{{script}}}" for script in UNSPACED_SCRIPTS) + "]")
_WRITTEN = regex.compile(r"[\p{L}\p{M}]")


def gini(values: Sequence[float]) -> float | None:
    """The Gini coefficient of `values` (non-negative): the mean absolute difference between all
    pairs over twice the mean, `sum_i sum_j |x_i - x_j| / (2 n^2 mean)`; 0 when all are equal,
    (n - 1) / n when one holds everything. On the token counts of a parallel dev set's languages,
    0 is a tokenizer that spends as many tokens on a sentence in every language. None for fewer
    than two values (no spread to measure), 0.0 when they are all 0.

    >>> gini([10, 10, 10]), gini([1, 3]), gini([0, 0, 4])
    (0.0, 0.25, 0.6666666666666666)

    ([1, 3]: |1 - 3| + |3 - 1| = 4, over 2 * 2**2 * 2 = 16.)
    """
    x = np.sort(np.asarray(values, dtype=np.float64))
    n = len(x)
    if n < 2:
        return None
    total = x.sum()
    if total == 0:
        return 0.0
    ranks = np.arange(1, n + 1)
    # sum_i sum_j |x_i - x_j| = 2 sum_i (2i - n - 1) x_(i) over the sorted values
    return float(np.sum((2 * ranks - n - 1) * x) / (n * total))


def renyi_entropy(counts: np.ndarray, alpha: float = RENYI_ALPHA) -> float:
    """The Rényi entropy of order `alpha`, in bits, of the distribution the `counts` (how often each
    token occurs) give: `log2(sum_i p_i**alpha) / (1 - alpha)`; Shannon's entropy for alpha 1.

    >>> renyi_entropy(np.array([1, 1, 1, 1]))   # uniform over 4: 2 bits, whatever alpha
    2.0
    """
    counts = np.asarray(counts, dtype=np.float64)
    p = counts[counts > 0] / counts.sum()
    if alpha == 1:
        return float(-np.sum(p * np.log2(p)))
    return float(np.log2(np.sum(p**alpha)) / (1 - alpha))


def renyi_efficiency(counts: np.ndarray, alpha: float = RENYI_ALPHA) -> float | None:
    """Rényi efficiency (Zouhar et al. 2023): the Rényi entropy of the unigram token distribution
    over its largest possible value, `log2 |V|`, where |V| is the number of distinct tokens that
    occur (as `tokenization-scorer`, the paper's scorer, counts it). 1 is every token equally
    frequent; frequent short tokens beside rare ones lower it. None for fewer than two distinct
    tokens (no distribution to measure).

    >>> round(renyi_efficiency(np.array([3, 1, 1])), 4)   # p = (.6, .2, .2)
    0.7017
    """
    counts = np.asarray(counts)
    used = int(np.count_nonzero(counts))
    if used < 2:
        return None
    return renyi_entropy(counts, alpha) / math.log2(used)


def spaced(texts: Sequence[str]) -> bool:
    """Whether a language's text separates words with spaces, judged by its script: False when most
    of its letters and marks are in a script written without spaces between words
    (`UNSPACED_SCRIPTS`: Chinese, Japanese, Thai, Lao, Khmer, Burmese, Tibetan), True otherwise.

    >>> spaced(["Hello world"]), spaced(["你好，世界"]), spaced(["สวัสดีครับ"])
    (True, False, False)
    """
    return spaced_letters(*script_letters(texts))


def script_letters(texts: Iterable[str]) -> tuple[int, int]:
    """(letters and marks of scripts written without spaces, all letters and marks) in `texts`:
    summed over batches of a language's text, what `spaced_letters` judges it by."""
    unspaced = written = 0
    for text in texts:
        unspaced += len(_UNSPACED.findall(text))
        written += len(_WRITTEN.findall(text))
    return unspaced, written


def spaced_letters(unspaced: int, written: int) -> bool:
    """Whether text with these letter counts (`script_letters`) separates words with spaces."""
    return written == 0 or 2 * unspaced <= written


def whitespace_words(texts: Sequence[str]) -> int:
    """Words separated by whitespace (`str.split()`), in all of `texts`.

    >>> whitespace_words(["Hello world", "  one  "])
    3
    """
    return sum(len(text.split()) for text in texts)


@dataclass
class LanguageFigures:
    """One tokenizer on one language of a dev set. `fertility` is None for a language written
    without spaces (`spaced`), `parity` None without a pivot language."""

    sentences: int
    bytes: int
    tokens: int
    words: int | None  # whitespace-separated words; None where the script uses no spaces
    bytes_per_token: float | None
    tokens_per_sentence: float | None
    fertility: float | None
    parity: float | None
    vocabulary_use: float
    renyi_efficiency: float | None

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Encoded:
    """A language's sentences encoded: their bytes and token counts, and how often each id occurs."""

    bytes: int
    tokens: int
    counts: np.ndarray  # occurrences of each id, length n_vocab

    def add(self, other: Encoded) -> None:
        """Add the encoding of more of the language's sentences (another batch) into this one."""
        self.bytes += other.bytes
        self.tokens += other.tokens
        self.counts += other.counts


def encode_language(tokenizer, texts: Sequence[str], num_threads: int) -> Encoded:
    """Encode `texts` (special tokens' text as ordinary text: a dev set holds none) with the
    tokenizer's batch encoder."""
    ids, _ = tokenizer.encode_batch_to_numpy(list(texts), num_threads=num_threads, special_as_text=True)
    counts = np.bincount(ids, minlength=tokenizer.n_vocab) if len(ids) else np.zeros(tokenizer.n_vocab, np.int64)
    return Encoded(sum(len(t.encode("utf-8")) for t in texts), int(len(ids)), counts)


def language_figures(
    encoded: Encoded,
    sentences: int,
    words: int | None,
    ordinary_tokens: int,
    pivot_tokens: int | None = None,
    alpha: float = RENYI_ALPHA,
) -> LanguageFigures:
    """A language's figures from its encoding: `words` its whitespace-separated words (None: not a
    spaced script), `ordinary_tokens` the tokenizer's tokens other than special ones (what
    vocabulary use is a share of), `pivot_tokens` the pivot language's tokens on the same sentences.

    >>> e = Encoded(bytes=12, tokens=4, counts=np.array([0, 2, 1, 1]))
    >>> f = language_figures(e, sentences=2, words=3, ordinary_tokens=4, pivot_tokens=2)
    >>> f.bytes_per_token, f.tokens_per_sentence, f.fertility, f.parity, f.vocabulary_use
    (3.0, 2.0, 1.3333333333333333, 2.0, 0.75)
    """
    tokens = encoded.tokens
    return LanguageFigures(
        sentences=sentences,
        bytes=encoded.bytes,
        tokens=tokens,
        words=words,
        bytes_per_token=encoded.bytes / tokens if tokens else None,
        tokens_per_sentence=tokens / sentences if sentences else None,
        fertility=tokens / words if words else None,
        parity=tokens / pivot_tokens if pivot_tokens else None,
        vocabulary_use=int(np.count_nonzero(encoded.counts)) / ordinary_tokens if ordinary_tokens else 0.0,
        renyi_efficiency=renyi_efficiency(encoded.counts, alpha),
    )

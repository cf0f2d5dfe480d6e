"""Compiled scanners that split text exactly as the GPT-2, cl100k, o200k and superbpe regexes do.

Running the `regex` module over a large corpus costs seconds per 10 MB; these scanners walk UTF-8 bytes
in numba and produce the very same pieces (property-tested against `regex` in tests/test_pretokenize.py).
Character classes (\\p{L}, \\p{N}, \\s, ...) come in as tables read off the `regex` module itself
(`bpe.pretokenize.scanner_tables`), so both sides agree on the Unicode version. Each scanner
mirrors its pattern's alternatives in order, including the backtracking the regex engine would do.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from bpe.engine import kernel_cache  # noqa: F401  (sets where the kernels below are cached)

# Bits of the per-code-point class table.
LETTER = 1  # \p{L}
NUMBER = 2  # \p{N}
SPACE = 4  # \s
UPPERISH = 8  # [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]  (o200k)
LOWERISH = 16  # [\p{Ll}\p{Lm}\p{Lo}\p{M}]  (o200k)
SPLIT_SPACE = 32  # what str.split() splits on: \s and \x1c-\x1f  (whitespace)

# Bits of the case-folding table: which contraction letter a code point matches under (?i).
FOLD_S, FOLD_D, FOLD_M, FOLD_T, FOLD_L, FOLD_V, FOLD_R, FOLD_E = 1, 2, 4, 8, 16, 32, 64, 128
FOLD_LETTERS = "sdmtlvre"

# Characters the patterns name. GPT-2's contractions are case-sensitive: it compares letters as they are.
APOSTROPHE, CR, LF, SPACE_CHAR, SLASH = ord("'"), ord("\r"), ord("\n"), ord(" "), ord("/")
SMALL_S, SMALL_D, SMALL_M, SMALL_T, SMALL_L, SMALL_V, SMALL_R, SMALL_E = (ord(c) for c in "sdmtlvre")

# Pattern kinds: which scanner a kernel runs.
GPT2, CL100K, O200K, WHITESPACE, SUPERBPE = 0, 1, 2, 3, 4
SCANNER_IDS = {"gpt2": GPT2, "cl100k": CL100K, "o200k": O200K, "whitespace": WHITESPACE, "superbpe": SUPERBPE}


# ---------------------------------------------------------------------------------------------
# Small helpers. `cps` holds one document's code points; `n` is its length. The helpers and the
# scanners are inlined where they are used (`inline="always"`): a call per character or per piece,
# with its arrays, costs more than the work it does.


@njit(inline="always")
def _run(cps, n, i, classes, bits):
    while i < n and classes[cps[i]] & bits:
        i += 1
    return i


@njit(inline="always")
def _run_other(cps, n, i, classes):
    """Extend over [^\\s\\p{L}\\p{N}]."""
    while i < n and not classes[cps[i]] & (LETTER | NUMBER | SPACE):
        i += 1
    return i


@njit(inline="always")
def _is_other(k):
    return not k & (LETTER | NUMBER | SPACE)


@njit(inline="always")
def _whitespace_run(cps, n, p, classes, end_rule, newline_rule):
    """The whitespace alternatives for a run starting at p, in order:
    [\\s++$] | [\\s*[\\r\\n]] | \\s+(?!\\S) | \\s (the bracketed ones only where the pattern has them)."""
    e = _run(cps, n, p, classes, SPACE)
    if end_rule and e == n:
        return e
    if newline_rule:
        k = e - 1
        while k >= p and cps[k] != CR and cps[k] != LF:
            k -= 1
        if k >= p:
            return k + 1
    if e == n or e - p == 1:
        return e
    return e - 1


@njit(inline="always")
def _digits_up_to_3(cps, n, p, classes):
    """\\p{N}{1,3} from p (which is a number)."""
    e = p + 1
    while e < n and e < p + 3 and classes[cps[e]] & NUMBER:
        e += 1
    return e


@njit(inline="always")
def _punctuation(cps, n, p, classes, with_slash):
    """The end of ` ?[^\\s\\p{L}\\p{N}]+` then `[\\r\\n]*` (cl100k) or `[\\r\\n/]*` (o200k) from p, or -1."""
    c = cps[p]
    if c == SPACE_CHAR and p + 1 < n and _is_other(classes[cps[p + 1]]):
        s = p + 1
    elif _is_other(classes[c]):
        s = p
    else:
        return -1
    e = _run_other(cps, n, s + 1, classes)
    while e < n and (cps[e] == CR or cps[e] == LF or (with_slash and cps[e] == SLASH)):
        e += 1
    return e


@njit(inline="always")
def _contraction_len(cps, n, i, folds):
    """Length of (?i:'s|'t|'re|'ve|'m|'ll|'d) at i, or 0."""
    if i + 1 >= n or cps[i] != APOSTROPHE:
        return 0
    f1 = folds[cps[i + 1]]
    if f1 & (FOLD_S | FOLD_T | FOLD_M | FOLD_D):
        return 2
    if i + 2 < n:
        f2 = folds[cps[i + 2]]
        if (f1 & FOLD_R and f2 & FOLD_E) or (f1 & FOLD_V and f2 & FOLD_E) or (f1 & FOLD_L and f2 & FOLD_L):
            return 3
    return 0


@njit(inline="always")
def _number_punctuation_or_space(cps, n, p, classes, k, with_slash, end_rule):
    """How cl100k and o200k end, from p (of class `k`): \\p{N}{1,3}, then punctuation (`_punctuation`,
    `with_slash` as o200k), then the whitespace alternatives (`\\s++$` where `end_rule`, as cl100k)."""
    if k & NUMBER:
        return _digits_up_to_3(cps, n, p, classes)
    e = _punctuation(cps, n, p, classes, with_slash)
    if e >= 0:
        return e
    return _whitespace_run(cps, n, p, classes, end_rule, True)


# ---------------------------------------------------------------------------------------------
# One function per pattern: the end of the piece that starts at p.


@njit(inline="always")
def next_gpt2(cps, n, p, classes):
    # '(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s
    c = cps[p]
    if c == APOSTROPHE and p + 1 < n:
        c1 = cps[p + 1]
        if c1 == SMALL_S or c1 == SMALL_D or c1 == SMALL_M or c1 == SMALL_T:
            return p + 2
        if p + 2 < n:
            c2 = cps[p + 2]
            if (
                (c1 == SMALL_L and c2 == SMALL_L)
                or (c1 == SMALL_V and c2 == SMALL_E)
                or (c1 == SMALL_R and c2 == SMALL_E)
            ):
                return p + 3
    s = p + 1 if (c == SPACE_CHAR and p + 1 < n) else p
    k = classes[cps[s]]
    if k & LETTER:
        return _run(cps, n, s + 1, classes, LETTER)
    if k & NUMBER:
        return _run(cps, n, s + 1, classes, NUMBER)
    if _is_other(k):
        return _run_other(cps, n, s + 1, classes)
    return _whitespace_run(cps, n, p, classes, False, False)


@njit(inline="always")
def next_cl100k(cps, n, p, classes, folds):
    # '(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s
    c = cps[p]
    if c == APOSTROPHE and p + 1 < n:
        f1 = folds[cps[p + 1]]
        if f1 & (FOLD_S | FOLD_D | FOLD_M | FOLD_T):
            return p + 2
        if p + 2 < n:
            f2 = folds[cps[p + 2]]
            if (f1 & FOLD_L and f2 & FOLD_L) or (f1 & FOLD_V and f2 & FOLD_E) or (f1 & FOLD_R and f2 & FOLD_E):
                return p + 3
    k = classes[c]
    if k & LETTER:
        return _run(cps, n, p + 1, classes, LETTER)
    if c != CR and c != LF and not k & NUMBER:
        if p + 1 < n and classes[cps[p + 1]] & LETTER:
            return _run(cps, n, p + 2, classes, LETTER)
    return _number_punctuation_or_space(cps, n, p, classes, k, False, True)


@njit(inline="always")
def _o200k_lower_word(cps, n, s, classes, folds):
    """[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+ and a contraction from s, or -1."""
    u = _run(cps, n, s, classes, UPPERISH)
    if u < n and classes[cps[u]] & LOWERISH:
        e = _run(cps, n, u + 1, classes, LOWERISH)
    else:
        # Greedy U* gives back characters until W+ can match: the last W-class char in the U-run.
        r = u - 1
        while r >= s and not classes[cps[r]] & LOWERISH:
            r -= 1
        if r < s:
            return -1
        e = r + 1
    return e + _contraction_len(cps, n, e, folds)


@njit(inline="always")
def _o200k_upper_word(cps, n, s, classes, folds):
    """[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]* and a contraction from s, or -1."""
    if s >= n or not classes[cps[s]] & UPPERISH:
        return -1
    u = _run(cps, n, s + 1, classes, UPPERISH)
    e = _run(cps, n, u, classes, LOWERISH)
    return e + _contraction_len(cps, n, e, folds)


@njit(inline="always")
def _o200k_word(word_end, cps, n, p, classes, folds, prefix):
    """`[^\\r\\n\\p{L}\\p{N}]?` and the word `word_end` ends from p, or -1: with the prefix first where
    p's character is one (`prefix`), as the regex tries it."""
    if prefix:
        e = word_end(cps, n, p + 1, classes, folds)
        if e >= 0:
            return e
    return word_end(cps, n, p, classes, folds)


@njit(inline="always")
def next_o200k(cps, n, p, classes, folds):
    c = cps[p]
    k = classes[c]
    prefix = c != CR and c != LF and not k & (LETTER | NUMBER)  # [^\r\n\p{L}\p{N}]
    e = _o200k_word(_o200k_lower_word, cps, n, p, classes, folds, prefix)
    if e >= 0:
        return e
    e = _o200k_word(_o200k_upper_word, cps, n, p, classes, folds, prefix)
    if e >= 0:
        return e
    return _number_punctuation_or_space(cps, n, p, classes, k, True, False)


@njit(inline="always")
def next_whitespace(cps, n, p, classes):
    """A run of non-whitespace (a word) or of whitespace (a gap, which `is_gap` tells apart)."""
    if classes[cps[p]] & SPLIT_SPACE:
        return _run(cps, n, p + 1, classes, SPLIT_SPACE)
    e = p + 1
    while e < n and not classes[cps[e]] & SPLIT_SPACE:
        e += 1
    return e


@njit(inline="always")
def _superbpe_match(cps, n, p, classes):
    r"""The end of the superword split's match at p, or -1 where it has none:
    \p{N}{1,3} | ` ?[^\s\p{L}\p{N}]{2,}[\r\n/]*` | ` +(?!\S)`, in that order."""
    c = cps[p]
    k = classes[c]
    if k & NUMBER:
        return _digits_up_to_3(cps, n, p, classes)
    s = p + 1 if c == SPACE_CHAR else p  # ` ?`: a space is never [^\s...], so only one start can work
    if s < n and _is_other(classes[cps[s]]):
        e = _run_other(cps, n, s + 1, classes)
        if e - s >= 2:
            while e < n and (cps[e] == CR or cps[e] == LF or cps[e] == SLASH):
                e += 1
            return e
    if c == SPACE_CHAR:
        e = p + 1
        while e < n and cps[e] == SPACE_CHAR:
            e += 1
        if e == n or classes[cps[e]] & SPACE:
            return e
        if e - p >= 2:
            return e - 1  # a \S follows: the regex gives back the last space, which a space then follows
    return -1


@njit(inline="always")
def next_superbpe(cps, n, p, classes):
    r"""A match of the superword split, or the text up to the next match (Hugging Face's Split,
    "isolated"): `(?:P)|(?:(?!P)[\s\S])+`."""
    e = _superbpe_match(cps, n, p, classes)
    if e >= 0:
        return e
    e = p + 1
    while e < n and _superbpe_match(cps, n, e, classes) < 0:
        e += 1
    return e


# The five with one signature, for a kernel compiled for one pattern, which takes its pattern's
# function as an argument (`bpe.engine.count`): only that scanner is compiled into it. A switch on
# a constant pattern id compiled all five into every such kernel (numba inlines callees before it
# prunes branches): about a minute a kernel, against about ten seconds.


@njit(inline="always")
def gpt2_end(cps, n, p, classes, folds):
    return next_gpt2(cps, n, p, classes)


@njit(inline="always")
def cl100k_end(cps, n, p, classes, folds):
    return next_cl100k(cps, n, p, classes, folds)


@njit(inline="always")
def o200k_end(cps, n, p, classes, folds):
    return next_o200k(cps, n, p, classes, folds)


@njit(inline="always")
def whitespace_end(cps, n, p, classes, folds):
    return next_whitespace(cps, n, p, classes)


@njit(inline="always")
def superbpe_end(cps, n, p, classes, folds):
    return next_superbpe(cps, n, p, classes)


@njit(inline="always")
def never_a_gap(cps, p, classes):
    """No pattern but `whitespace` drops anything between its pieces."""
    return False


@njit(inline="always")
def next_piece_end(cps, n, p, scanner_id, classes, folds):
    """The end of the piece that starts at p, for the pattern kind `scanner_id` (a constant where the
    caller is compiled for one pattern: then only that pattern's scanner is compiled in)."""
    if scanner_id == GPT2:
        return next_gpt2(cps, n, p, classes)
    if scanner_id == CL100K:
        return next_cl100k(cps, n, p, classes, folds)
    if scanner_id == O200K:
        return next_o200k(cps, n, p, classes, folds)
    if scanner_id == SUPERBPE:
        return next_superbpe(cps, n, p, classes)
    return next_whitespace(cps, n, p, classes)


@njit(inline="always")
def is_gap(cps, p, scanner_id, classes):
    """Whether the piece starting at p is whitespace that `str.split()` drops (never a piece)."""
    return scanner_id == WHITESPACE and is_split_space(cps, p, classes)


@njit(inline="always")
def is_split_space(cps, p, classes):
    """Whether the code point at p is one `str.split()` splits on."""
    return classes[cps[p]] & SPLIT_SPACE != 0


@njit(inline="always")
def decode_utf8(data, start, end, cps, byte_pos):
    """Decode data[start:end] into cps; byte_pos[i] is where code point i starts. Returns the count,
    or -1 if the bytes are not UTF-8 as Python and Arrow decode it (no overlong form, surrogate or
    code point past U+10FFFF, no sequence cut short): reading text unchecked and checking it here,
    where every byte is read anyway, spares a pass over it (Arrow's check of a 500 MB corpus took
    0.6 s of CPU)."""
    i = start
    n = 0
    while i < end:
        byte_pos[n] = i
        b = np.int32(data[i])
        if b < 0x80:
            cp = b
            i += 1
        elif b < 0xC2 or b > 0xF4:  # a continuation byte, an overlong lead, or past U+10FFFF
            return -1
        elif b < 0xE0:
            if i + 1 >= end or data[i + 1] & 0xC0 != 0x80:
                return -1
            cp = ((b & 0x1F) << 6) | (np.int32(data[i + 1]) & 0x3F)
            i += 2
        elif b < 0xF0:
            if i + 2 >= end or not _follows(data[i + 1], b, 0xE0, 0xA0, 0xED, 0x9F) or data[i + 2] & 0xC0 != 0x80:
                return -1
            cp = ((b & 0x0F) << 12) | ((np.int32(data[i + 1]) & 0x3F) << 6) | (np.int32(data[i + 2]) & 0x3F)
            i += 3
        else:
            if i + 3 >= end or not _follows(data[i + 1], b, 0xF0, 0x90, 0xF4, 0x8F):
                return -1
            if data[i + 2] & 0xC0 != 0x80 or data[i + 3] & 0xC0 != 0x80:
                return -1
            cp = (
                ((b & 0x07) << 18)
                | ((np.int32(data[i + 1]) & 0x3F) << 12)
                | ((np.int32(data[i + 2]) & 0x3F) << 6)
                | (np.int32(data[i + 3]) & 0x3F)
            )
            i += 4
        cps[n] = cp
        n += 1
    byte_pos[n] = end
    return n


@njit(inline="always")
def _follows(c, lead, low_lead, low, high_lead, high):
    """Whether c may come second after `lead`: a continuation byte, at least `low` after
    `low_lead` (no overlong form) and at most `high` after `high_lead` (no surrogate, nothing
    past U+10FFFF)."""
    if c & 0xC0 != 0x80:
        return False
    if lead == low_lead:
        return c >= low
    return lead != high_lead or c <= high


@njit(nogil=True, cache=True)
def split_offsets(data, doc_offsets, scanner_id, classes, folds):
    """Where every piece of every document lies (used by tests and small inputs).

    Returns (starts, ends), byte offsets into `data`: piece i spans data[starts[i]:ends[i]]; pieces
    come in document order, gaps (whitespace the pattern drops) are left out.

    >>> from bpe.pretokenize import scanner_tables
    >>> classes, folds = scanner_tables()
    >>> data = np.frombuffer(b"Hello world's", dtype=np.uint8)
    >>> starts, ends = split_offsets(data, np.array([0, len(data)]), GPT2, classes, folds)
    >>> [data[s:e].tobytes() for s, e in zip(starts, ends)]
    [b'Hello', b' world', b"'s"]
    """
    n_docs = len(doc_offsets) - 1
    longest = 0
    for d in range(n_docs):
        longest = max(longest, doc_offsets[d + 1] - doc_offsets[d])
    cps = np.empty(longest + 1, dtype=np.int32)
    byte_pos = np.empty(longest + 2, dtype=np.int64)
    starts = []
    ends = []
    for d in range(n_docs):
        n = decode_utf8(data, doc_offsets[d], doc_offsets[d + 1], cps, byte_pos)
        if n < 0:
            raise ValueError("a document is not valid UTF-8")
        p = 0
        while p < n:
            e = next_piece_end(cps, n, p, scanner_id, classes, folds)
            if not is_gap(cps, p, scanner_id, classes):
                starts.append(byte_pos[p])
                ends.append(byte_pos[e])
            p = e
    out_starts = np.empty(len(starts), dtype=np.int64)
    out_ends = np.empty(len(ends), dtype=np.int64)
    for i in range(len(starts)):
        out_starts[i] = starts[i]
        out_ends[i] = ends[i]
    return out_starts, out_ends

"""When tiktoken's ranks encode as a tokenizer's merges do. Hugging Face (and `bpe.training._educational`) apply
the listed merges, lowest first; tiktoken joins any two adjacent tokens whose bytes make a token,
the lowest-ranked first. With ranks in merge order the two agree on every text exactly when no token
is reached by rank through a pair its merges never join: merges (b c), (a b), (ab c) make "abc" of
ab + c, yet "ab" never stands before "c" (b c is joined first), so the merges give [a, bc] where by
rank a + bc makes "abc". Trained merges always agree (a merge joins a pair that its words held); a
hand-made list or another tool's file may not.

>>> byte_tokens = [bytes([b]) for b in range(256)]
>>> rank_order_break(byte_tokens + [b"bc", b"ab", b"abc"], [(98, 99), (97, 98), (257, 99)])
2
>>> rank_order_break(byte_tokens + [b"bc", b"abc"], [(98, 99), (97, 256)]) is None
True
"""

from __future__ import annotations

from collections.abc import Sequence

from bpe.formats.spelling import spell


def rank_order_break(vocab: Sequence[bytes], merges: Sequence[tuple[int, int]]) -> int | None:
    """The first merge k whose token (`vocab[256 + k]`, rank 256 + k) merging by rank reaches
    otherwise than by merge k, or None where encoding by rank gives what the merges give on every
    text. The tokens must be distinct.

    Token t = l + r is made by rank as its merge makes it when, encoding t's bytes with the ranks
    below t, nothing joins across the l|r boundary. The tokens at the boundary are, as l and r are
    built (in rank order), the nodes of l's right spine (l, its right part, that one's right part,
    ..., its last byte) and of r's left spine; a boundary pair (a, b) is joined when a + b is a token
    ranked below the merges that would grow a (ties go to that merge, the one on the left) or b (ties
    go to the pair). Checked for every t, the first t failing is where the encoders part: on t's own
    bytes, tiktoken gives [t] and the merges never reach it."""
    rank = dict(zip(vocab, range(len(vocab))))
    left = list(range(256)) + [a for a, _ in merges]
    right = list(range(256)) + [b for _, b in merges]
    for k in range(len(merges)):
        made = 256 + k
        ends_l, ends_r = [left[made]], [right[made]]  # the spines, from the top down
        while ends_l[-1] >= 256:
            ends_l.append(right[ends_l[-1]])
        while ends_r[-1] >= 256:
            ends_r.append(left[ends_r[-1]])
        i, j = len(ends_l) - 1, len(ends_r) - 1  # from the bytes up: the boundary pair at each rank
        while i or j:
            grow_a = ends_l[i - 1] if i else made  # the rank that merges a into a larger token
            grow_b = ends_r[j - 1] if j else made
            joined = rank.get(vocab[ends_l[i]] + vocab[ends_r[j]])
            if joined is not None and joined < grow_a and joined <= grow_b:
                return k
            i -= bool(i) and grow_a <= grow_b
            j -= bool(j) and grow_b <= grow_a
    return None


def rank_order_problem(vocab: Sequence[bytes], merges: Sequence[tuple[int, int]]) -> str | None:
    """Why encoding by rank would not give the merges' ids, in words, or None (`rank_order_break`)."""
    k = rank_order_break(vocab, merges)
    if k is None:
        return None
    a, b = merges[k]
    return (
        f"encoding by rank (tiktoken's) makes {spell(vocab[256 + k])!r} one token, which its merges never make: "
        f"merge {k} joins {spell(vocab[a])!r} and {spell(vocab[b])!r}, which the merges before it never leave "
        "side by side"
    )


def ids_order_problem(merged_ids: Sequence[int]) -> str | None:
    """Why the ids of the merged tokens (in merge order) cannot be tiktoken's ranks, or None: ranks
    must follow the merge order, and other ids would be another order of merging."""
    if all(a < b for a, b in zip(merged_ids, merged_ids[1:])):
        return None
    return "the ids of its merged tokens do not follow the merge order, so they cannot serve as tiktoken's ranks"

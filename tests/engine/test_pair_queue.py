"""The pair queue chooses as a scan of every pair count would: each round's first merge is the pair
of the highest count, ties broken by the rule, through any history of count changes, including the
pairs a round takes and gives back (set aside for the next round rather than put back on the heap)."""

from __future__ import annotations

import re

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from bpe.engine.pair_keys import pack
from bpe.engine.pair_queue import PairQueue
from bpe.engine.rules import SuperwordRules
from tests.conftest import merge_rules

# A step: count changes to pairs of the first few tokens (indices into the tokens made so far,
# taken modulo their number), then a round of at most that many merges.
changes = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40), st.integers(-3, 6)), max_size=12)
steps = st.lists(st.tuples(changes, st.integers(1, 6)), min_size=1, max_size=30)


def best_pair(counts: dict[tuple[int, int], int], vocab: list[bytes], tie_break: str) -> tuple[int, int] | None:
    """The pair a scan of every count picks: highest count, then the greatest pair of byte strings
    (`bytes`; of two pairs of the same bytes, the lower ids) or of ids (`ids`)."""
    live = [pair for pair, count in counts.items() if count > 0]
    if not live:
        return None
    if tie_break == "bytes":
        return max(live, key=lambda p: (counts[p], vocab[p[0]], vocab[p[1]], -p[0], -p[1]))
    return max(live, key=lambda p: (counts[p], pack(*p)))


@settings(max_examples=300, deadline=None)
@given(steps, st.sampled_from(["bytes", "ids"]))
def test_each_round_starts_with_the_pair_a_scan_of_every_count_picks(steps, tie_break):
    queue = PairQueue(merge_rules(tie_break=tie_break))
    vocab = [bytes([b]) for b in range(256)]
    tokens = [97, 98, 99, 32]  # a few bytes, then every token made
    counts: dict[tuple[int, int], int] = {}
    for changed, most in steps:
        keys, deltas = [], []
        for i, j, delta in changed:
            pair = (tokens[i % len(tokens)], tokens[j % len(tokens)])
            delta = max(delta, -counts.get(pair, 0))
            counts[pair] = counts.get(pair, 0) + delta
            keys.append(pack(*pair))
            deltas.append(delta)
        queue.add(np.array(keys, dtype=np.int64), np.array(deltas, dtype=np.int64))
        rows = queue.next_round(most).tolist()
        expected = best_pair(counts, vocab, tie_break)
        if expected is None:
            assert rows == []
            continue
        assert rows and tuple(rows[0][:2]) == expected and rows[0][3] == counts[expected]
        assert len(rows) <= most
        merged = [tuple(row[:2]) for row in rows]
        assert len(set(merged)) == len(merged)
        for a, b, new, count in rows:
            assert count == counts[(a, b)] and new == len(vocab)
            vocab.append(vocab[a] + vocab[b])
            tokens.append(new)
        # What the word tables would then report: every merged pair gone.
        queue.add(np.array([pack(*p) for p in merged]), np.array([-counts[p] for p in merged]))
        for pair in merged:
            counts[pair] = 0


def superword_rules_allow(token: bytes, max_words: int | None, colon_space: bool) -> bool:
    """The superword rules read off a token's bytes: at most `max_words` runs of bytes other than the
    space, and no b": " unless `colon_space`."""
    words = len(re.findall(rb"[^ ]+", token))
    return (max_words is None or words <= max_words) and (colon_space or b": " not in token)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60)), max_size=30),
    st.sampled_from([None, 1, 2, 3]),
    st.booleans(),
)
def test_the_superword_rules_refuse_exactly_the_pairs_whose_bytes_break_them(made, max_words, colon_space):
    """The queue judges a pair by what it keeps of each token (its words, and whether it starts or
    ends with a space or ends with a colon), made as the token is made: it chooses every pair whose
    joined bytes keep the rules, and none other, for tokens made of spaces, colons and letters."""
    queue = PairQueue(merge_rules(superwords=SuperwordRules(max_words, colon_space)))
    vocab = [bytes([b]) for b in range(256)]
    tokens = [ord(c) for c in "ab :"]
    merges = []
    for i, j in made:
        a, b = tokens[i % len(tokens)], tokens[j % len(tokens)]
        merges.append((a, b))
        vocab.append(vocab[a] + vocab[b])
        tokens.append(len(vocab) - 1)
    queue.add_tokens(np.array(merges, dtype=np.int64).reshape(-1, 2))
    pairs = [(a, b) for a in tokens for b in tokens]
    counts = {pair: len(pairs) - k for k, pair in enumerate(pairs)}  # all different: no tie to break
    queue.add(np.array([pack(*p) for p in pairs]), np.array([counts[p] for p in pairs]))
    chosen = set()
    while rows := queue.next_round(16).tolist():
        merged = [(a, b) for a, b, _, _ in rows]
        chosen.update(merged)
        queue.add(np.array([pack(*p) for p in merged]), np.array([-counts[p] for p in merged]))
    assert chosen == {p for p in pairs if superword_rules_allow(vocab[p[0]] + vocab[p[1]], max_words, colon_space)}

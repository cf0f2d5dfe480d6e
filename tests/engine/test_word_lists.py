"""The word tables' lists of the words holding each pair (`bpe.engine.word_table`): an index lays
each list out in consecutive nodes, in the order a merge walks it, and a merge takes the words off
its list `TAKEN_WORDS` at a time, a long word's position alone. Lists far longer than that, with
long words' positions among the words, give the reference's merges and its words."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from bpe.engine import word_table
from bpe.engine.count import WordCounts
from bpe.engine.pair_keys import KEY_COLUMN, LOW32, unpack
from bpe.engine.word_table import WordTable
from tests.conftest import stdlib_paragraphs
from tests.engine.test_long_words import long_words_from, merges_of
from tests.reference import merge_ids, train_reference

# Few symbols, so that most pairs are held by most of the hundreds of words.
SYMBOLS = ["a", "b", "ab", "aa", "é", " "]
word = st.lists(st.sampled_from(SYMBOLS), min_size=1, max_size=10).map(lambda s: "".join(s).encode())
many_words = st.dictionaries(word, st.integers(1, 4), min_size=word_table.TAKEN_WORDS, max_size=400)


def lists_of(table: WordTable) -> list[list[int]]:
    """Each indexed pair's list of nodes, as a merge walks it."""
    state = table._state
    lists = []
    for links in state.pairs[state.pairs[:, KEY_COLUMN] != 0, word_table._LINKS]:
        node, nodes = (int(links) & int(LOW32)) - 1, []
        while node >= 0:
            nodes.append(node)
            node = int(state.node_next[node])
        lists.append(nodes)
    return lists


def test_an_index_lays_each_pair_list_out_in_consecutive_nodes():
    """Every list walks up through one run of nodes, the runs cover the pool's used nodes once,
    and each holds every word that holds its pair, once."""
    lines = [line.encode() for line in stdlib_paragraphs()[:400] if len(line.encode()) < word_table.LONG_WORD]
    counts = WordCounts.from_dict({line: 1 + len(line) % 3 for line in lines})
    table = WordTable(counts)
    lists = lists_of(table)
    assert all(nodes == list(range(nodes[0], nodes[0] + len(nodes))) for nodes in lists)
    used = sorted(node for nodes in lists for node in nodes)
    assert used == list(range(int(table._state.meta[word_table._NODES_USED])))
    holders = {}
    for w in range(len(counts)):
        ids = list(counts.word(w))
        for pair in set(zip(ids, ids[1:])):
            holders.setdefault(pair, set()).add(w)
    state = table._state
    keys = state.pairs[state.pairs[:, KEY_COLUMN] != 0, KEY_COLUMN] - 1
    walked = {unpack(int(k)): [int(state.node_word[n]) for n in nodes] for k, nodes in zip(keys, lists)}
    assert all(len(words) == len(set(words)) for words in walked.values())
    assert {pair: set(words) for pair, words in walked.items()} == holders


@settings(max_examples=60, deadline=None)
@given(many_words, st.integers(1, 30), st.sampled_from([3, 8, 2**31]), st.integers(1, 3))
def test_lists_longer_than_a_take_with_long_words_among_them_give_the_reference_merges(counts, n, long_from, threads):
    """Hundreds of words (lists of more words than a merge takes at once), some of them long
    (positions among the words of one list) or none: the reference's merges, on 1 to 3 threads."""
    expected = train_reference(counts, n)
    with long_words_from(long_from):
        assert merges_of(counts, n, threads=threads) == expected


@settings(max_examples=40, deadline=None)
@given(many_words, st.integers(1, 30), st.sampled_from([3, 2**31]))
def test_a_table_applying_merges_holds_the_reference_words_and_counts(counts, n, long_from):
    """The words once merged, and the pair counts its deltas add up to, are the reference's."""
    merges = train_reference(counts, n)
    with long_words_from(long_from):
        table = WordTable(WordCounts.from_dict(counts))
    pair_counts: dict[int, int] = {}
    rows = np.array([(a, b, 256 + i) for i, (a, b) in enumerate(merges)], dtype=np.int64).reshape(-1, 3)
    for row in [None, *rows]:
        if row is not None:
            table.apply(row[None, :])
        for key, delta in zip(*table.take_deltas()):
            pair_counts[int(key)] = pair_counts.get(int(key), 0) + int(delta)
    words = []
    for w, count in counts.items():
        ids = list(w)
        for i, pair in enumerate(merges):
            ids = merge_ids(ids, pair, 256 + i)
        words.append((ids, count))
    expected: dict[int, int] = {}
    for ids, count in words:
        for a, b in zip(ids, ids[1:]):
            expected[a << 32 | b] = expected.get(a << 32 | b, 0) + count
    assert sorted(map(tuple, table.words())) == sorted(tuple(ids) for ids, _ in words)
    assert {k: v for k, v in pair_counts.items() if v} == expected

"""The compiled count table (`bpe.engine.count`): every way of filling it gives a Counter's counts.
Its slots hold a 16-bit piece of the hash, the length (capped) and the first 8 bytes, so the
words here are built to share all of those: common prefixes, equal lengths, lengths past the cap."""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bpe.engine.count import Tally, WordCounts
from bpe.engine.scanner import SCANNER_IDS
from bpe.pretokenize import scanner_tables

PREFIX = b"prefix__"  # 8 bytes: words that differ only after it share a slot's prefix

words = st.one_of(
    st.binary(min_size=1, max_size=12),
    st.binary(min_size=0, max_size=6).map(lambda tail: PREFIX + tail),
    st.sampled_from([b"x" * 65_534, b"x" * 65_535, b"x" * 65_536, b"x" * 65_535 + b"y", b"y" + b"x" * 65_535]),
)


def words_of(counts: Counter) -> WordCounts:
    return WordCounts.from_dict(dict(counts))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(words, max_size=40), min_size=1, max_size=4))
def test_counts_added_in_parts_are_a_counters(parts):
    tally = Tally(expected_words=1, expected_bytes=1)  # grows on the way: slots, entries and bytes
    expected: Counter = Counter()
    for part in parts:
        counts = Counter(part)
        tally.add(words_of(counts))
        expected.update(counts)
    result = tally.result()
    assert result.to_dict() == dict(expected)
    assert len(set(result.to_dict())) == len(result)  # each word once
    assert WordCounts.combine([words_of(Counter(p)) for p in parts]).to_dict() == dict(expected)


def test_a_result_keeps_its_words_while_the_table_goes_on():
    """The result shares the table's bytes and offsets: later entries must not change it."""
    tally = Tally(expected_words=1, expected_bytes=1)
    tally.add(words_of(Counter({b"alpha": 2, b"beta__long_word": 1})))
    first = tally.result()
    tally.add(words_of(Counter({f"w{i}".encode() * (i % 5 + 1): 1 for i in range(5000)} | {b"alpha": 3})))
    assert first.to_dict() == {b"alpha": 2, b"beta__long_word": 1}
    assert tally.result().to_dict()[b"alpha"] == 5


def test_counting_many_distinct_pieces_grows_the_table_and_counts_each_once():
    texts = [f"w{i} w{i % 997} shared_prefix_{i % 13} shared_prefix_{i % 7}x" for i in range(20_000)]
    data = np.frombuffer("".join(texts).encode(), dtype=np.uint8)
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum([len(t.encode()) for t in texts], out=offsets[1:])
    tally = Tally(expected_words=1, expected_bytes=1)
    pieces = tally.count_pieces(data, offsets, SCANNER_IDS["gpt2"], scanner_tables())
    from bpe.pretokenize import Pretokenizer

    split = Pretokenizer("gpt2").split_ordinary
    expected = Counter(piece.encode() for text in texts for piece in split(text))
    assert pieces == sum(expected.values())
    assert tally.result().to_dict() == dict(expected)


documents = st.lists(
    st.lists(
        st.sampled_from(["a", " bb", " cat", "7", "!!", "\n", " " * 3, "é", "x" * 300, " yy" * 50]), max_size=30
    ).map("".join),
    min_size=1,
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(documents, st.sampled_from(["gpt2", "cl100k", "whitespace"]))
def test_pieces_counted_while_the_table_fills_are_each_counted_once(texts, pattern):
    """A table that starts with room for 1 KB of words fills again and again with pieces of hundreds
    of bytes while pieces cut ahead wait to be counted (the test above fills its entries): each piece
    is counted once all the same."""
    from bpe.pretokenize import Pretokenizer

    data = np.frombuffer("".join(texts).encode(), dtype=np.uint8)
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum([len(t.encode()) for t in texts], out=offsets[1:])
    tally = Tally(expected_words=1, expected_bytes=1)
    pieces = tally.count_pieces(data, offsets, SCANNER_IDS[pattern], scanner_tables())
    split = Pretokenizer(pattern).split_ordinary
    expected = Counter(piece.encode() for text in texts for piece in split(text))
    assert pieces == sum(expected.values())
    assert tally.result().to_dict() == dict(expected)


def test_words_alike_in_their_first_bytes_stay_apart():
    """Trailing zero bytes pack to the same 8-byte prefix: the length tells them apart; so do
    the bytes after the eighth for long words, and the cap for lengths past it."""
    alike = [b"ab", b"ab\x00", b"ab\x00\x00", PREFIX, PREFIX + b"\x00", PREFIX + b"a", PREFIX + b"b",
             b"x" * 65_535, b"x" * 65_536, b"x" * 65_535 + b"\x00"]  # fmt: skip
    counts = Counter({word: i + 1 for i, word in enumerate(alike)})
    tally = Tally()
    tally.add(words_of(counts))
    tally.add(words_of(counts))
    assert tally.result().to_dict() == {word: 2 * n for word, n in counts.items()}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(words, max_size=40), min_size=1, max_size=4), st.integers(min_value=1, max_value=4))
def test_counts_summed_by_hash_are_a_counters_with_each_part_what_splitting_gives(sources, n):
    """What counting threads hand the merge loop: the sum, and in hash part k exactly the words
    `split_by_hash` puts in part k (here as views, there as copies of counts in no order)."""
    expected: Counter = Counter()
    for source in sources:
        expected.update(source)
    given_sources = [words_of(Counter(source)) for source in sources]
    summed = WordCounts.sum_by_hash(given_sources, n)
    assert given_sources == []  # let go of once read
    assert summed.to_dict() == dict(expected)
    assert len(summed) == len(expected)
    unordered = WordCounts.from_dict(dict(expected))
    assert [part.to_dict() for part in summed.split_by_hash(n)] == [p.to_dict() for p in unordered.split_by_hash(n)]


def test_counts_summed_by_hash_split_another_way_are_split_by_hash_again():
    summed = WordCounts.sum_by_hash([words_of(Counter({f"w{i}".encode(): i + 1 for i in range(50)}))] * 1, 2)
    unordered = WordCounts.from_dict(summed.to_dict())
    assert [p.to_dict() for p in summed.split_by_hash(3)] == [p.to_dict() for p in unordered.split_by_hash(3)]
    summed.clear()
    assert len(summed) == 0 and summed.split_by_hash(2)[0].to_dict() == {}


def test_counts_summed_by_hash_hand_the_sources_bytes_back_as_they_are_read(monkeypatch):
    """What counting threads hand over is theirs to let go: with `release`, each chunk of a source's
    bytes goes back to the system once every part has its words (they read as zeros after), and
    the sum is the same."""
    from bpe.engine import count, resident

    monkeypatch.setattr(resident, "RELEASED_AT_LEAST", 0)  # this test's words are a few MB
    monkeypatch.setattr(count, "SUM_CHUNK", 1000)
    made = [Counter({f"word {i} of source {s}, {i * 7919 % 10007}".encode(): 1 + i % 3 for i in range(50_000)})
            for s in range(2)]  # fmt: skip
    sources = [words_of(c) for c in made]
    held = [source.data for source in sources]
    summed = WordCounts.sum_by_hash(sources, 2, release=True)
    assert summed.to_dict() == dict(made[0] + made[1])
    for data in held:
        inside = data[resident.PAGE : -resident.PAGE]
        assert np.count_nonzero(inside) < len(inside) // 100


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=40), st.binary(max_size=9), st.binary(max_size=9))
def test_a_words_hash_is_the_same_wherever_its_bytes_sit(word, before, after):
    """The table hashes a word 8 bytes at a time, where the array has them past it, byte by byte at
    its end. A word counted from the text and found again in the table's own bytes (when it grows)
    is hashed both ways: the two must agree, or a grown table would count it twice."""
    from bpe.engine.count import hash_and_prefix

    alone = np.frombuffer(word, dtype=np.uint8)
    inside = np.frombuffer(before + word + after, dtype=np.uint8)
    assert hash_and_prefix(alone, 0, len(word)) == hash_and_prefix(inside, len(before), len(before) + len(word))
    prefix = hash_and_prefix(inside, len(before), len(before) + len(word))[1]
    assert prefix == int.from_bytes(word[:8], "little")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=8), min_size=2, max_size=50, unique=True))
@example([b"ab", b"ab\x00", b"ab\x00\x00\x00\x00\x00\x00"])  # the same bits, told apart by the length
def test_words_of_up_to_8_bytes_never_share_a_hash(distinct):
    """Each 8-byte step of the hash is one-to-one and the length is its seed, so words of up to 8
    bytes, most of a corpus's pieces, never share a hash."""
    from bpe.engine.count import hash_and_prefix

    hashes = {hash_and_prefix(np.frombuffer(w, dtype=np.uint8), 0, len(w))[0] for w in distinct}
    assert len(hashes) == len(distinct)

"""Replaying a base tokenizer's merges on words (`bpe.engine.replay`), which cuts each word into
segments between bytes that no merge joins and replays each unique segment once: the tokens must
be those of applying the merges one after the other to the whole word (`tests.reference`)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bpe.engine import replay
from bpe.engine.count import WordCounts
from bpe.engine.replay import BaseMerges
from tests.conftest import any_merges
from tests.reference import merge_ids, train_reference

# Words and the separators between them, as a superword piece holds them (" by the way"), over a
# few letters so that words repeat across pieces and merges join some of their bytes but not all.
WORDS = st.text(st.sampled_from("abcé"), min_size=1, max_size=5)
PIECES = st.lists(st.tuples(st.sampled_from(["", " ", "  ", ".", ": "]), WORDS), min_size=1, max_size=6).map(
    lambda parts: "".join(sep + word for sep, word in parts).encode()
)


def applied_in_order(word: bytes, merges: list[tuple[int, int]]) -> list[int]:
    """The word's tokens after each merge in turn, over all of it: what replay must give."""
    ids = list(word)
    for new, pair in enumerate(merges, start=256):
        ids = merge_ids(ids, pair, new)
    return ids


def replayed(merges: list[tuple[int, int]], counts: dict[bytes, int], long_word: int = 1024) -> list[list[int]]:
    tokens, lengths = BaseMerges(np.array(merges, dtype=np.int64).reshape(-1, 2)).replay(
        WordCounts.from_dict(counts), long_word
    )
    ends = np.cumsum(lengths)
    return [tokens[end - length : end].tolist() for end, length in zip(ends, lengths)]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(PIECES, min_size=1, max_size=30, unique=True),
    st.lists(PIECES, min_size=1, max_size=30),
    st.integers(0, 40),
    st.sampled_from([2, 8, 1024]),
    st.sampled_from([1, 2, 7, replay.REPLAY_CHUNK]),
)
def test_pieces_of_several_words_replay_as_the_merges_applied_in_order(pieces, learnt_on, n, long_word, chunk):
    """Merges learnt on the words of other text (so some byte pairs are joined by a merge and
    others not, and a cut may fall inside a word or between words), replayed on pieces of several words: every
    piece's tokens are the merges applied in order to the whole piece, on the short and the long
    (heap) path alike, the pieces taken `chunk` at a time (a segment first met in one chunk
    comes again in later ones)."""
    words = [word for piece in learnt_on for word in re.findall(rb" ?[^ ]+| +", piece)]
    merges = train_reference(dict.fromkeys(words, 1), n)
    counts = {piece: 1 + i % 3 for i, piece in enumerate(pieces)}
    whole = replay.REPLAY_CHUNK
    replay.REPLAY_CHUNK = chunk
    try:
        assert replayed(merges, counts, long_word) == [applied_in_order(piece, merges) for piece in counts]
    finally:
        replay.REPLAY_CHUNK = whole


@settings(max_examples=200, deadline=None)
@given(st.lists(PIECES, min_size=1, max_size=20, unique=True), st.data())
def test_any_valid_merges_replay_as_applied_in_order(pieces, data):
    """Merges of any pairs of tokens made before them, whether or not the words hold them: a merge
    may join bytes across what looks like a word's end, and then no cut falls there."""
    merges = data.draw(any_merges(pieces, 25))
    counts = dict.fromkeys(pieces, 1)
    assert replayed(merges, counts) == [applied_in_order(piece, merges) for piece in counts]


def test_a_merge_that_uses_a_token_made_after_it_is_refused():
    """Merges are checked as the replay reads them: a token id from the future would read past the
    arrays of the compiled kernel."""
    with pytest.raises(ValueError, match="made after it"):
        BaseMerges(np.array([[97, 257], [97, 98]]))


def test_a_replay_that_hands_the_words_back_as_it_goes_gives_the_same_tokens(monkeypatch):
    """A run done with its counts (a superword stage) lets the replay hand each chunk's bytes back
    once replayed: the tokens are the same, and the words' pages are gone (they read as zeros)."""
    from bpe.engine import resident
    from bpe.engine.merge import learn_merges
    from tests.conftest import merge_rules

    monkeypatch.setattr(resident, "RELEASED_AT_LEAST", 0)  # this test's words are a few MB
    monkeypatch.setattr(replay, "REPLAY_CHUNK", 1000)
    words = {f"piece {i} of the words {i % 97}, and {i * 7919 % 10007}".encode(): 1 + i % 5 for i in range(60_000)}
    base = BaseMerges(learn_merges(WordCounts.from_dict(words), 60, merge_rules()).merges)
    kept, handed_back = WordCounts.from_dict(words), WordCounts.from_dict(words)
    tokens, lengths = base.replay(kept)
    released_tokens, released_lengths = base.replay(handed_back, release=True)
    assert np.array_equal(released_tokens, tokens) and np.array_equal(released_lengths, lengths)
    inside = handed_back.data[resident.PAGE : -resident.PAGE]
    assert np.count_nonzero(inside) < len(inside) // 100 < np.count_nonzero(kept.data[resident.PAGE : -resident.PAGE])


def test_a_segment_table_that_fills_inside_a_piece_goes_on_from_where_it_stopped(monkeypatch):
    """The unique segments' table starts at its least (512 entries, 1 KB of bytes) and grows many
    times, so that it fills inside pieces, with segments waiting to be looked up: every piece's
    tokens are still the merges applied in order to the whole piece."""
    from bpe.engine import count

    monkeypatch.setattr(replay, "table_new", lambda entries, nbytes: count.table_new(1, 1))
    rng = np.random.default_rng(7)
    letters = np.array(list("abcdefgh"))
    pieces = {
        " ".join("".join(rng.choice(letters, rng.integers(1, 9))) for _ in range(rng.integers(1, 8))).encode(): 1
        for _ in range(4000)
    }
    words = [word for piece in list(pieces)[:300] for word in re.findall(rb" ?[^ ]+", piece)]
    merges = train_reference(dict.fromkeys(words, 1), 40)
    assert replayed(merges, pieces) == [applied_in_order(piece, merges) for piece in pieces]

"""Our merges against the peers' trainers: Hugging Face `tokenizers` (`BpeTrainer`) and rustbpe,
trained on the same rows with the same split pattern (`bench/peers.py` builds them as the
benchmark runs them).

All three pick the pair with the highest count. On a tie they part: the peers take the smaller
pair of ids (each in its own alphabet's order), we take the greater pair of byte strings (or of
ids, with `tie_break="ids"`). So the contract is: the merges are the same up to the first step
where two pairs tie, and where the lists part, the two pairs chosen have the same count, the
highest. A peer that parted from us on a pair with a lower count would be a bug (theirs or ours).
With the peers' tie-break given to the reference trainer, every merge of theirs is the reference's
(below), so the three trainers differ in the order of ties alone.
"""

from __future__ import annotations

import unicodedata
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bpe import train
from bpe.formats.spelling import unspell
from bpe.pretokenize import Pretokenizer
from tests.conftest import any_text
from tests.reference import encode_word

pytest.importorskip("tokenizers")
pytest.importorskip("rustbpe")

from bench.peers import hf_trained, rustbpe_trained  # noqa: E402  (after the skips)


def hf_tokens(texts: list[str], vocab_size: int, pattern: str) -> list[bytes]:
    """The tokens Hugging Face's trainer made, in the order it made them (ids 256 on)."""
    vocab = hf_trained(texts, vocab_size, pattern).get_vocab()
    return [unspell(token) for token, i in sorted(vocab.items(), key=lambda item: item[1]) if i >= 256]


def rustbpe_tokens(texts: list[str], vocab_size: int, pattern: str) -> list[bytes]:
    """The tokens rustbpe made, in the order it made them (ranks 256 on)."""
    ranks = rustbpe_trained(texts, vocab_size, pattern).get_mergeable_ranks()
    return [bytes(token) for token, rank in sorted(ranks, key=lambda item: item[1]) if rank >= 256]


PEERS = {"Hugging Face": hf_tokens, "rustbpe": rustbpe_tokens}


def agreed_merges(
    texts: list[str], pattern: str, merges: list[tuple[int, int]], ours: list[bytes], theirs: list[bytes], peer: str
) -> int:
    """How many merges `ours` and `theirs` (the tokens each trainer made, in order) share before
    they part; asserts that where they part, both chose a pair of the highest count (a tie)."""
    common = min(len(ours), len(theirs))
    parted = next((k for k in range(common) if ours[k] != theirs[k]), common)
    if parted == common:
        assert len(ours) == len(theirs), f"{peer} made {len(theirs)} merges where we made {len(ours)}"
        return parted
    split = Pretokenizer(pattern, []).split
    words = Counter(piece.encode() for text in texts for piece in split(text))
    ranks = {pair: rank for rank, pair in enumerate(merges[:parted])}
    stats: Counter[tuple[int, int]] = Counter()
    for word, count in words.items():
        ids = encode_word(word, ranks)
        for pair in zip(ids, ids[1:]):
            stats[pair] += count
    best = max(stats.values())
    assert stats[merges[parted]] == best, f"at merge {parted} we chose a pair of count {stats[merges[parted]]} < {best}"
    ids = {bytes([i]): i for i in range(256)} | {token: 256 + k for k, token in enumerate(ours[:parted])}
    token = theirs[parted]
    pairs = [(ids[token[:j]], ids[token[j:]]) for j in range(1, len(token)) if token[:j] in ids and token[j:] in ids]
    assert any(stats[pair] == best for pair in pairs), (
        f"{peer} parts from us at merge {parted} with {token!r}, not a pair of the highest count {best}: "
        f"{[(pair, stats[pair]) for pair in pairs]}"
    )
    return parted


def compare(texts: list[str], vocab_size: int, pattern: str, tie_break: str) -> dict[str, int]:
    tok = train(texts, vocab_size=vocab_size, pattern=pattern, special_tokens=[], tie_break=tie_break)
    ours = [tok.token_bytes(256 + k) for k in range(len(tok.merges))]
    merges = [tuple(pair) for pair in tok.merges]
    return {
        peer: agreed_merges(texts, pattern, merges, ours, tokens(texts, vocab_size, pattern), peer)
        for peer, tokens in PEERS.items()
    }


def assigned_text() -> st.SearchStrategy[str]:
    """Arbitrary text of assigned characters (`any_text` less category Cn): regex engines built on
    different Unicode versions class a newly assigned code point differently (Python's `regex`
    and ours split ':\U0003d000' in two, Hugging Face's Oniguruma keeps it whole), which is a
    pre-tokenization difference, not a training one."""
    return any_text("ab1 ab1 the cat").filter(lambda text: all(unicodedata.category(c) != "Cn" for c in text))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    texts=st.lists(assigned_text(), min_size=1, max_size=8).filter(lambda texts: any(texts)),
    extra=st.integers(1, 40),
    pattern=st.sampled_from(["gpt2", "cl100k", "o200k"]),
    tie_break=st.sampled_from(["bytes", "ids"]),
)
def test_small_corpora_agree_with_the_peers_until_a_tie(texts, extra, pattern, tie_break):
    compare(texts, 256 + extra, pattern, tie_break)


@pytest.mark.parametrize("pattern", ["gpt2", "cl100k"])
def test_real_english_agrees_with_the_peers_until_a_tie(corpus_rows, pattern):
    """3,000 rows of `../shared/corpora/en`, 3,000 merges: on real text the counts at the top are
    rarely equal, so the lists agree for a long stretch before the first tie parts them."""
    agreed = compare(corpus_rows, 256 + 3000, pattern, "bytes")
    print(f"\n{pattern}: merges shared before the first tie of 3,000: {agreed}")
    assert all(n > 0 for n in agreed.values()), agreed


# -- with the peers' own tie-break: the whole list agrees ------------------------------------------
#
# Both peers break a tie by the smaller pair of ids: rustbpe's ids are ours (bytes by value, then
# merges in order), Hugging Face's give the 256 byte tokens the order of their spellings (its
# alphabet is sorted), then merges in order. The reference trainer run with that order must give
# every merge each peer makes, which shows that on the same counts the three differ in the order of
# ties alone (ours is checked against the same reference with our tie-break everywhere else).


def hf_ids() -> dict[bytes, int]:
    """Hugging Face's ids of the 256 byte tokens (the sorted order of their spellings)."""
    from bpe.formats.spelling import spell

    spelled = sorted(spell(bytes([b])) for b in range(256))
    return {unspell(text): i for i, text in enumerate(spelled)}


def reference_tokens(texts: list[str], pattern: str, n_merges: int, peer: str) -> list[bytes]:
    """The tokens the reference trainer makes, in order, breaking ties as `peer` does: the pair of
    smaller peer ids wins (a merged token's id is the same in both: 256 + the merge's index)."""
    from tests.reference import train_reference

    split = Pretokenizer(pattern, []).split
    words = Counter(piece.encode() for text in texts for piece in split(text))
    byte_ids = hf_ids() if peer == "Hugging Face" else {bytes([b]): b for b in range(256)}

    def smaller_pair_first(pair: tuple[int, int], vocab: dict[int, bytes]) -> tuple[int, int]:
        a, b = (i if i >= 256 else byte_ids[vocab[i]] for i in pair)
        return -a, -b  # the reference takes the greatest key

    merges = train_reference(dict(words), n_merges, smaller_pair_first)
    vocab = {i: bytes([i]) for i in range(256)}
    for k, (a, b) in enumerate(merges):
        vocab[256 + k] = vocab[a] + vocab[b]
    return [vocab[256 + k] for k in range(len(merges))]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    texts=st.lists(assigned_text(), min_size=1, max_size=8).filter(lambda texts: any(texts)),
    extra=st.integers(1, 40),
    pattern=st.sampled_from(["gpt2", "cl100k"]),
)
def test_with_their_tie_break_the_peers_make_the_references_merges(texts, extra, pattern):
    for peer, tokens in PEERS.items():
        theirs = tokens(texts, 256 + extra, pattern)
        assert theirs == reference_tokens(texts, pattern, len(theirs), peer), peer


@pytest.mark.parametrize("pattern", ["gpt2", "cl100k"])
def test_on_real_english_with_their_tie_break_every_merge_agrees(corpus_rows, pattern):
    """400 rows of `../shared/corpora/en`, 600 merges: every merge of each peer is the reference's
    when the reference breaks ties as the peer does (and ours is the reference's with ours)."""
    texts = corpus_rows[:400]
    for peer, tokens in PEERS.items():
        theirs = tokens(texts, 256 + 600, pattern)
        assert len(theirs) == 600 and theirs == reference_tokens(texts, pattern, 600, peer), peer
    print(f"\n{pattern}: Hugging Face and rustbpe agree with the reference on all 600 merges with their tie-break")

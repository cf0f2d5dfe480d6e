"""Long words: a piece with no break for the pattern (a file with no spaces, a run of spaces) is
one word of millions of bytes. The engine indexes such a word by position (`bpe.engine.word_table`,
`LONG_WORD`): the merges stay the reference's on every engine and thread count, and memory a few
bytes per byte of the word (a subprocess under an address-space limit). A run that makes tokens
longer than any real tokenizer's says so in one line, naming the cap."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from bpe import Tokenizer, train
from bpe.cli import main
from bpe.engine import word_table
from bpe.engine.count import WordCounts
from bpe.engine.merge import learn_merges
from bpe.engine.replay import BaseMerges
from bpe.engine.word_slices import ThreadedWordTable
from bpe.engine.word_table import WordTable
from bpe.formats.files import MAX_FILE_BYTES
from bpe.pretokenize import NAMED_PATTERNS
from bpe.training.long_tokens import LONG_TOKEN_BYTES, LongTokensWarning
from tests.conftest import any_merges, merge_rules, ruled, stdlib_paragraphs
from tests.engine.conftest import carries_on_across_a_checkpoint
from tests.reference import merge_ids, train_reference

# Few symbols (ties, multi-byte characters) and runs of one of them (pairs (a, a), "a a a").
SYMBOLS = ["a", "b", "aa", "aaaa", "é", " ", "   ", "x"]
word = st.lists(st.sampled_from(SYMBOLS), min_size=1, max_size=24).map(lambda s: "".join(s).encode())
corpora = st.dictionaries(word, st.integers(1, 6), min_size=1, max_size=12)


@contextlib.contextmanager
def long_words_from(tokens: int):
    """Words of `tokens` tokens or more are long (indexed by position) in tables built inside."""
    saved = word_table.LONG_WORD
    word_table.LONG_WORD = tokens
    try:
        yield
    finally:
        word_table.LONG_WORD = saved


def merges_of(counts: dict[bytes, int], n: int, **options) -> list[tuple[int, int]]:
    rules, options = ruled(options)
    return [tuple(pair) for pair in learn_merges(WordCounts.from_dict(counts), n, rules, **options).merges.tolist()]


def random_letters(n: int, seed: int = 0) -> str:
    return "".join(random.Random(seed).choices("abcdefghijklmnopqrstuvwxyz", k=n))


@settings(max_examples=400, deadline=None)
@given(
    corpora,
    st.integers(0, 40),
    st.sampled_from([2, 3, 8]),
    st.sampled_from(["bytes", "ids"]),
    st.integers(1, 3),
    st.booleans(),
    st.integers(1, 3),
    st.one_of(st.none(), st.integers(2, 9)),
)
def test_merges_over_long_words_equal_the_reference(
    counts, n, long_from, tie_break, min_frequency, one_per_round, threads, limit
):
    """Any corpus with words made long from 2, 3 or 8 tokens (all of them, most, a few), any
    settings and threads: the reference's merges."""
    expected = train_reference(counts, n, tie_break, min_frequency, max_token_length=limit)
    options = dict(tie_break=tie_break, min_frequency=min_frequency, one_per_round=one_per_round, threads=threads)
    with long_words_from(long_from):
        assert merges_of(counts, n, max_token_length=limit, **options) == expected


@settings(max_examples=150, deadline=None)
@given(corpora, st.integers(0, 10), st.integers(0, 20), st.sampled_from(["bytes", "ids"]), st.integers(1, 2))
def test_long_words_after_a_base_tokenizer_give_the_reference_merges(counts, k, n, tie_break, threads):
    """Replayed words (a base's merges applied first) are long or not by their tokens then."""
    base = train_reference(counts, k, tie_break)
    with long_words_from(3):
        replayed = BaseMerges(np.array(base).reshape(-1, 2))
        made = learn_merges(
            WordCounts.from_dict(counts), n, merge_rules(tie_break=tie_break), base=replayed, threads=threads
        )
    assert base + [tuple(pair) for pair in made.merges.tolist()] == train_reference(counts, k + n, tie_break)


# Merges a base tokenizer may hold: over the corpora's bytes and tokens made before, whether or
# not the corpus holds the pair.
base_merges = any_merges([symbol.encode() for symbol in SYMBOLS], 16)


@settings(max_examples=300, deadline=None)
@given(corpora, base_merges, st.sampled_from([2, 3, 8]))
def test_a_base_replayed_on_long_words_gives_the_tokens_of_its_merges_in_order(counts, merges, long_from):
    """Replaying a base by a heap of (rank, position) over a long word gives what applying its
    merges one after the other does."""
    tokens, lengths = BaseMerges(np.array(merges).reshape(-1, 2)).replay(WordCounts.from_dict(counts), long_from)
    ends = np.cumsum(lengths)
    replayed = [tokens[end - length : end].tolist() for end, length in zip(ends, lengths)]
    assert replayed == [merge_ids_all(word, merges) for word in counts]


def test_a_long_word_is_rewritten_as_the_reference_rewrites_it():
    """Merge by merge, a word indexed by position holds the reference's tokens, and the pair
    counts the table reports add up to a recount (runs of a pair (a, a) merge from the left)."""
    text = ("a" * 37 + "b" + random_letters(3000, seed=3)[:2000] + "ab" * 300).encode()
    counts = WordCounts.from_dict({text: 3, b"ab": 2})
    merges = train_reference(counts.to_dict(), 60)
    table = WordTable(counts)
    assert table.long_words == 1
    ids, totals = list(text), {}
    for key, delta in zip(*table.take_deltas()):
        totals[int(key)] = totals.get(int(key), 0) + int(delta)
    for new, pair in enumerate(merges, start=256):
        table.apply(np.array([[*pair, new]]))
        ids = merge_ids(ids, pair, new)
        for key, delta in zip(*table.take_deltas()):
            totals[int(key)] = totals.get(int(key), 0) + int(delta)
        assert table.words()[0] == ids
    recount: dict[int, int] = {}
    for word, count in [(ids, 3), (merge_ids_all(b"ab", merges), 2)]:
        for a, b in zip(word, word[1:]):
            recount[a << 32 | b] = recount.get(a << 32 | b, 0) + count
    assert {k: v for k, v in totals.items() if v} == recount


def merge_ids_all(word: bytes, merges: list[tuple[int, int]]) -> list[int]:
    ids = list(word)
    for new, pair in enumerate(merges, start=256):
        ids = merge_ids(ids, pair, new)
    return ids


def test_long_words_at_their_default_size_with_ordinary_text_give_the_reference_merges():
    """Words of thousands of bytes among prose (the default `LONG_WORD`), on 1 and 2 threads."""
    texts = stdlib_paragraphs()[:60] + [random_letters(5000), " " * 3000 + "x", "ab" * 1500, "é" * 1200]
    counts: dict[bytes, int] = {}
    pattern = regex.compile(NAMED_PATTERNS["cl100k"])
    for text in texts:
        for piece in pattern.findall(text):
            counts[piece.encode()] = counts.get(piece.encode(), 0) + 1
    assert max(map(len, counts)) >= 2 * word_table.LONG_WORD
    expected = train_reference(counts, 150)
    for threads in (1, 2):
        assert train(texts, vocab_size=256 + 150, pattern="cl100k", threads=threads).merges == expected


@pytest.mark.services
def test_the_dask_engine_gives_the_local_engines_merges_over_long_words(two_workers):
    """Long words on 2 workers (each bucket holder indexes its own by position): the local
    engine's merges, which are the reference's."""
    texts = stdlib_paragraphs()[:40] + [random_letters(6000, seed=5), "\t" * 4000, "xy" * 2000]
    expected = train(texts, vocab_size=256 + 200, pattern="cl100k").merges
    on_dask = train(texts, vocab_size=256 + 200, pattern="cl100k", engine="dask", client=two_workers)
    assert on_dask.merges == expected


def test_slices_with_long_words_restored_from_a_checkpoint_carry_on_exactly():
    """A Dask bucket holder's checkpoint (`to_words`, then `from_words` on another number of
    threads) closes a long word's gaps and indexes it again: the same deltas as one table all along."""
    counts = WordCounts.from_dict(
        {random_letters(3000, seed=k).encode(): k + 1 for k in range(4)} | {b" " * 2500: 2, b"the": 9}
    )
    merges = learn_merges(counts, 300, merge_rules()).merges

    def long_words_kept(slices: ThreadedWordTable) -> None:
        assert sum(table.long_words for table in slices.tables) >= 4  # the letters' words are long still

    carries_on_across_a_checkpoint(counts, merges, 150, (5, 5), long_words_kept)


# -- memory: a subprocess under an address-space limit ---------------------------------------------

WORD_BYTES = 3_000_000
# Today a long word costs about 32 bytes of address space per byte (tokens, links to neighbours, a
# node per pair); rewriting it whole, with room for two new pairs per token, cost about 240.
LIMIT_BYTES_PER_BYTE = 100

RUN = """
import re, resource, sys
limit, long_word = int(sys.argv[1]), sys.argv[2]
if limit:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from bpe.engine import word_table
if long_word == "never":
    word_table.LONG_WORD = 2**31  # no word indexed by position: each rewritten whole, replayed a rank at a time
from bpe.cli import main
code = main(sys.argv[3:])
peak = re.search(r"VmPeak:\\s+(\\d+)", open("/proc/self/status").read()).group(1)
print("VmPeak", int(peak) * 1024, file=sys.stderr)
sys.exit(code)
"""


def run_train(path: Path, out: Path, options: list[str], limit: int = 0, long_word: str = "default"):
    """`bpe train` in a process of its own, under an address-space limit unless 0. Its threads and
    malloc's arenas (64 MB of address space each) are as many on any machine, with any input."""
    command = [sys.executable, "-c", RUN, str(limit), long_word]
    command += ["train", str(path), "--vocab-size", "600", "--threads", "2", "--out", str(out), "--quiet", *options]
    env = {**os.environ, "MALLOC_ARENA_MAX": "2"}
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)


def address_space_peak(run: subprocess.CompletedProcess) -> int:
    assert run.returncode == 0, run.stderr[-3000:]
    return int(re.search(r"VmPeak (\d+)", run.stderr).group(1))


@pytest.mark.chaos  # words of many megabytes: at scale
@pytest.mark.parametrize(
    "make, options",
    [  # the word is made when the test runs: 3 MB of random letters cost collecting two seconds
        pytest.param(random_letters, [], id="letters without spaces"),
        pytest.param(lambda n: " " * n, ["--max-token-length", "64"], id="a run of spaces"),
    ],
)
def test_one_huge_word_trains_within_a_memory_bound(tmp_path, make, options):
    """One line of 3 MB that the pattern cannot cut trains under an address-space limit of what a
    tiny input takes plus 100 bytes per byte of it (the machine is never at risk: a regression
    fails here), with the merges of rewriting the word whole (unlimited, in another process)."""
    text = make(WORD_BYTES)
    tiny, word = tmp_path / "tiny.txt", tmp_path / "word.txt"
    tiny.write_text(text[:2000] + " end")
    word.write_text(text)
    baseline = address_space_peak(run_train(tiny, tmp_path / "tiny", options))
    limited = run_train(word, tmp_path / "limited", options, limit=baseline + LIMIT_BYTES_PER_BYTE * WORD_BYTES)
    assert limited.returncode == 0, f"failed under the limit: {limited.stderr[-2000:]}"
    whole = run_train(word, tmp_path / "whole", options, long_word="never")
    assert whole.returncode == 0, whole.stderr[-2000:]
    assert Tokenizer.load(tmp_path / "limited").merges == Tokenizer.load(tmp_path / "whole").merges
    assert len(Tokenizer.load(tmp_path / "limited").merges) > 5


def test_a_tokenizer_too_large_to_read_back_is_refused_before_anything_is_written(tmp_path):
    """10 MB of spaces merged all the way make tokens of millions of bytes: a tokenizer.json of
    about 300 MB, past what any tokenizer file may hold (`MAX_FILE_BYTES`), which nothing could
    load. The run ends in one line naming the flag that caps token length, writes nothing, and
    stays within the same memory bound as training."""
    size = 10_000_000
    word, tiny = tmp_path / "spaces.txt", tmp_path / "tiny.txt"
    word.write_text(" " * size)
    tiny.write_text(" " * 2000 + " end")
    baseline = address_space_peak(run_train(tiny, tmp_path / "tiny", []))
    refused = run_train(word, tmp_path / "out", [], limit=baseline + LIMIT_BYTES_PER_BYTE * size)
    errors = [line for line in refused.stderr.splitlines() if line.startswith("bpe: error: ")]
    assert refused.returncode == 1 and len(errors) == 1, refused.stderr[-2000:]
    assert "tokenizer.json would hold" in errors[0] and errors[0].endswith("cap tokens with --max-token-length")
    assert f"{MAX_FILE_BYTES >> 20} MiB" in errors[0]
    assert not (tmp_path / "out").exists()


# -- the warning -----------------------------------------------------------------------------------


def test_bpe_train_says_in_one_line_that_it_made_tokens_too_long(tmp_path, capsys):
    """5,000 spaces before a word: cl100k keeps 4,999 of them as one piece, which merging all the
    way makes one token. One line on stderr names the longest token and the flag that caps it;
    with the flag, or on ordinary text, no such line."""
    path = tmp_path / "spaces.txt"
    text = " " * 5000 + "hello world"
    path.write_text(text)
    longest_piece = max(len(piece.encode()) for piece in regex.findall(NAMED_PATTERNS["cl100k"], text))
    assert main(["train", str(path), "--vocab-size", "400", "--out", str(tmp_path / "a"), "--quiet"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "longer than" in line]
    assert len(lines) == 1, lines
    assert f"the longest {longest_piece:,} bytes" in lines[0]
    assert lines[0].startswith("bpe: warning: ") and "--max-token-length" in lines[0]
    assert max(map(len, Tokenizer.load(tmp_path / "a").vocab)) == longest_piece
    assert main(["train", str(path), "--vocab-size", "400", "--out", str(tmp_path / "a"), "--force", "--json"]) == 0
    recorded = [w for w in json.loads(capsys.readouterr().out)["warnings"] if "longer than" in w]
    assert recorded == [lines[0].removeprefix("bpe: warning: ")]  # --json carries it too

    capped = ["--max-token-length", str(LONG_TOKEN_BYTES)]
    assert main(["train", str(path), "--vocab-size", "400", "--out", str(tmp_path / "b"), "--quiet", *capped]) == 0
    prose = tmp_path / "prose.txt"
    prose.write_text("\n\n".join(stdlib_paragraphs()[:300]))
    assert main(["train", str(prose), "--vocab-size", "2000", "--out", str(tmp_path / "c"), "--quiet"]) == 0
    assert "longer than" not in capsys.readouterr().err


def test_train_warns_with_the_parameter_name():
    with pytest.warns(LongTokensWarning, match=r"the longest 3,000 bytes.*max_token_length caps"):
        train(["x" * 3000], vocab_size=300, pattern="whitespace")
    with warnings.catch_warnings():
        warnings.simplefilter("error", LongTokensWarning)
        train(["x" * 3000], vocab_size=300, pattern="whitespace", max_token_length=LONG_TOKEN_BYTES)

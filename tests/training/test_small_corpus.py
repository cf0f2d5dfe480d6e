"""The small-corpus path (`bpe.training.small_corpus`): merges in pure Python equal to the reference trainer's
and the compiled engine's for every setting it takes, and a `bpe train` of a small input that
never imports numba, while a larger one, or one given threads, runs the compiled engine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bpe.training.small_corpus import SMALL_CORPUS_BYTES, learn_merges_small
from tests.conftest import merge_rules
from tests.reference import train_reference

# Few distinct bytes, so that pairs repeat, tie and overlap ("aaa"), and multi-byte characters.
word = st.lists(st.sampled_from([b"a", b"b", b"c", b" ", b"aa", b"\xc3\xa9", b"\xe6\x9d\xb1"]), min_size=1, max_size=10)
words = st.dictionaries(word.map(b"".join), st.integers(1, 6), min_size=1, max_size=40)
tie_breaks = st.sampled_from(["bytes", "ids"])


@settings(max_examples=300, deadline=None)
@given(words, st.integers(0, 60), tie_breaks, st.integers(1, 4), st.one_of(st.none(), st.integers(2, 6)))
def test_small_corpus_merges_are_the_reference_merges(counts, n, tie_break, min_frequency, max_token_length):
    got = learn_merges_small(
        counts, n, merge_rules(tie_break=tie_break, min_frequency=min_frequency, max_token_length=max_token_length)
    )
    want = train_reference(counts, n, tie_break, min_frequency=min_frequency, max_token_length=max_token_length)
    assert [tuple(m) for m in got.merges.tolist()] == want


@settings(max_examples=150, deadline=None)
@given(words, st.integers(0, 60), tie_breaks, st.integers(1, 3), st.one_of(st.none(), st.integers(2, 6)))
def test_small_corpus_result_is_the_compiled_engines(counts, n, tie_break, min_frequency, max_token_length):
    """Merges, the count of each merged pair, why the run stopped and the tokens left: the same."""
    from bpe.engine.count import WordCounts
    from bpe.engine.merge import learn_merges

    options = {"tie_break": tie_break, "min_frequency": min_frequency, "max_token_length": max_token_length}
    small = learn_merges_small(counts, n, merge_rules(**options))
    compiled = learn_merges(WordCounts.from_dict(counts), n, merge_rules(**options))
    assert small.merges.tolist() == compiled.merges.tolist()
    assert small.counts.tolist() == compiled.counts.tolist()
    assert (small.stop_reason, small.tokens_after) == (compiled.stop_reason, compiled.tokens_after)


def test_progress_reports_every_merge_once():
    import random

    rng = random.Random(0)
    counts = {bytes(rng.randrange(97, 123) for _ in range(30)): rng.randrange(1, 9) for _ in range(300)}
    calls: list[int] = []
    result = learn_merges_small(counts, 3000, merge_rules(), progress=calls.append)
    assert calls[0] == 0 and sum(calls) == len(result) > 1024


BPE = str(Path(sys.executable).parent / "bpe")


def _train(tmp_path: Path, data: Path, *flags: str) -> tuple[dict, str]:
    """`bpe train` run by a Python that reports, after the command, whether it imported numba."""
    out = tmp_path / "tok"
    code = (
        "import sys; from bpe.cli import main; status = main(sys.argv[1:]); "
        "print('pyarrow imported:', 'pyarrow' in sys.modules); "
        "print('numba imported:', 'numba' in sys.modules); sys.exit(status)"
    )
    args = ["train", str(data), "--vocab-size", "400", "--out", str(out), "--force", "--json", *flags]
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    _train.pyarrow = lines[-2]
    return json.loads((out / "manifest.json").read_text()), lines[-1]


def _merges(tmp_path: Path) -> list[list[int]]:
    from bpe.tokenizer import Tokenizer

    return [list(m) for m in Tokenizer.load(tmp_path / "tok").merges]


@pytest.fixture
def small_text(tmp_path) -> Path:
    path = tmp_path / "small.txt"
    lines = [f"line {i}: the quick brown fox jumps over the lazy dog {i * 7 % 13} times" for i in range(60)]
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def test_a_small_input_trains_without_loading_numba_and_gives_the_compiled_merges(tmp_path, small_text):
    manifest, said = _train(tmp_path, small_text)
    assert said == "numba imported: False" and _train.pyarrow == "pyarrow imported: False"
    assert manifest["engine"]["compiled"] is False
    small = _merges(tmp_path)
    manifest, said = _train(tmp_path, small_text, "--threads", "1")  # threads given: the compiled engine
    assert said == "numba imported: True" and manifest["engine"]["compiled"] is True
    assert _merges(tmp_path) == small and len(small) > 50


def test_an_input_past_the_small_corpus_size_runs_the_compiled_engine(tmp_path):
    path = tmp_path / "big.txt"
    line = "a line of text that is long enough and repeats, with some words: {}\n"
    path.write_text("".join(line.format(i) for i in range(SMALL_CORPUS_BYTES // len(line) + 10)), encoding="utf-8")
    assert path.stat().st_size > SMALL_CORPUS_BYTES
    manifest, said = _train(tmp_path, path)
    assert said == "numba imported: True" and manifest["engine"]["compiled"] is True


def test_a_small_input_of_long_words_is_merged_by_the_compiled_engine(tmp_path):
    """Long words (text without spaces, as in Chinese) make pure-Python merges slow: a small input
    whose words' work passes SMALL_CORPUS_WORK is counted without kernels, then merged compiled,
    with the merges of the compiled engine run in full."""
    import random

    rng = random.Random(1)
    han = [chr(0x4E00 + i) for i in range(40)]
    path = tmp_path / "long.txt"
    path.write_text("\n".join("".join(rng.choice(han) for _ in range(120)) for _ in range(200)), encoding="utf-8")
    assert path.stat().st_size < SMALL_CORPUS_BYTES
    manifest, said = _train(tmp_path, path)
    assert said == "numba imported: True" and manifest["engine"]["compiled"] is True
    merged = _merges(tmp_path)
    _train(tmp_path, path, "--threads", "2")
    assert _merges(tmp_path) == merged


TEXT_FILES = {
    "a BOM, CR LF lines and an empty one": b"\xef\xbb\xbfthe cat sat\r\non the mat\r\n\r\nthe end\n",
    "no newline at the end, non-ASCII": "naïve café — 東京 2024\nzürich\tzürich  ".encode(),
    "special tokens": b"one<|endoftext|>two three<|endoftext|><|endoftext|> four\nfive",
    "empty": b"",
}


@pytest.mark.parametrize("text_format", ["doc", "lines"])
@pytest.mark.parametrize("name", list(TEXT_FILES))
def test_text_files_read_without_arrow_count_as_the_readers_count_them(tmp_path, name, text_format):
    """A small text file is read and counted in Python, without pyarrow: documents, bytes,
    pre-tokens, unique words, special tokens and merges are those of the compiled path, which reads
    it with the Arrow readers (any --threads)."""
    path = tmp_path / "in.txt"
    path.write_bytes(TEXT_FILES[name] * 3)
    flags = ["--text-format", text_format, "--special-token", "<|endoftext|>"]
    if name == "empty":
        for extra in ([], ["--threads", "1"]):
            done = subprocess.run([BPE, "train", str(path), "--vocab-size", "300", "--out", str(tmp_path / "x"),
                                   *flags, *extra], capture_output=True, text=True)  # fmt: skip
            assert done.returncode == 1 and "no text to train on" in done.stderr
        return
    small, _ = _train(tmp_path, path, *flags)
    assert _train.pyarrow == "pyarrow imported: False" and small["engine"]["compiled"] is False
    merges = _merges(tmp_path)
    compiled, _ = _train(tmp_path, path, *flags, "--threads", "1")
    assert compiled["engine"]["compiled"] is True
    assert small["counts"] == compiled["counts"] and _merges(tmp_path) == merges


def test_invalid_utf8_in_a_small_text_file_is_the_same_one_line_error(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"\xef\xbb\xbfgood text\nand then \xff bad\n")
    said = []
    for extra in ([], ["--threads", "1"]):
        done = subprocess.run([BPE, "train", str(path), "--vocab-size", "300", "--out", str(tmp_path / "x"), *extra],
                              capture_output=True, text=True)  # fmt: skip
        assert done.returncode == 1 and not (tmp_path / "x").exists()
        said.append(done.stderr)
    assert said[0] == said[1] and said[0].count("\n") == 1 and f"{path}: invalid UTF-8 at byte 22" in said[0]

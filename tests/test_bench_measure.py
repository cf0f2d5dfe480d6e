"""The benchmarks' measuring (bench/measure.py, bench/launch.py), the sentencepiece peer
(bench/peers.py) and the floor of bench/limits.py: what `python -m bench.train` and
`python -m bench.limits` report rests on them."""

from __future__ import annotations

import sys
import time

import pytest

from bench.measure import TooLong, run
from bench.train import first_lines

ALLOCATE = "x = bytearray({mb} * 2**20); x[::4096] = bytes(len(x[::4096]))"  # touched, so resident


def test_a_commands_peak_memory_is_its_own_not_its_callers():
    held = bytearray(300 * 2**20)
    held[::4096] = bytes(len(held[::4096]))  # this process now peaks above 300 MB
    small = run([sys.executable, "-c", "pass"])
    assert small["peak_mb"] < 60, small["peak_mb"]  # a bare Python, not this process's 300 MB
    big = run([sys.executable, "-c", ALLOCATE.format(mb=150)])
    assert 150 < big["peak_mb"] < 250, big["peak_mb"]
    assert small["wall"] > 0 and big["cpu"] > 0
    del held


def test_a_failing_command_raises_with_its_stderr():
    with pytest.raises(RuntimeError, match="boom"):
        run([sys.executable, "-c", "import sys; sys.exit('boom')"])
    with pytest.raises(RuntimeError, match="127"):
        run(["/nonexistent/command"])


def test_a_command_past_its_limit_is_stopped_with_its_children(tmp_path):
    import psutil

    pids = tmp_path / "pids"
    # A command that starts a child and both sleep: stopping the command alone would leave the child.
    child = (
        "import os, subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{p.pid}}')\n"
        "time.sleep(60)"
    )
    with pytest.raises(TooLong, match="did not finish in 5 s"):
        run([sys.executable, "-c", child], limit=5)

    def runs(pid: int) -> bool:  # a dead process not yet reaped by init is a zombie
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + 10
    for pid in map(int, pids.read_text().split()):
        while runs(pid):
            assert time.monotonic() < deadline, f"process {pid} still runs"
            time.sleep(0.05)


def test_the_floor_file_is_whole_lines_within_its_size(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = ["first line\n\nsecond line", "third line é\nfourth", "x" * 5000]
    pq.write_table(pa.table({"text": rows}), tmp_path / "part-0.parquet")
    assert first_lines(tmp_path, 40) == "first line\nsecond line\nthird line é\n"
    assert first_lines(tmp_path, 1000) == "first line\nsecond line\nthird line é\nfourth\n"
    pq.write_table(pa.table({"text": ["é" * 100]}), tmp_path / "part-0.parquet")
    assert first_lines(tmp_path, 11) == "é" * 5 + "\n"


def test_sentencepiece_accepts_its_smallest_vocabulary_and_not_one_less():
    spm = pytest.importorskip("sentencepiece")
    from bench.peers import sentencepiece_smallest_vocab, sentencepiece_trained

    texts = ["Hello  world, the ﬁrst line\n\nand a second: 42 cafés", "Привет мир\nthe end"]
    smallest = sentencepiece_smallest_vocab(texts)
    model = sentencepiece_trained(texts, smallest, threads=1)
    assert spm.SentencePieceProcessor(model_proto=model).get_piece_size() == smallest
    with pytest.raises(RuntimeError, match="smaller than required_chars"):
        sentencepiece_trained(texts, smallest - 1, threads=1)


def test_sentencepiece_ends_early_on_a_corpus_too_small_for_its_vocabulary():
    spm = pytest.importorskip("sentencepiece")
    from bench.peers import sentencepiece_trained

    model = sentencepiece_trained(["the cat sat on the mat\nthe dog sat on the log"], 2000, threads=1)
    assert 259 < spm.SentencePieceProcessor(model_proto=model).get_piece_size() < 2000


def test_the_limits_floor_counts_reading_on_the_cores_that_split():
    from bench.limits import split_floor

    # 1 s of reading and 3 s of splitting on 2 cores fill both for 2 s; a reader with a core of
    # its own would let it end at 1.5 s, which no run on 2 cores can do.
    assert split_floor(1.0, 3.0, 2) == 2.0
    assert split_floor(3.0, 1.0, 2) == 3.0  # one thread reads: never faster than the reading
    assert split_floor(1.0, 3.0, 8) == 1.0


def test_the_design_floor_adds_the_driver_and_the_sum_whole_and_spreads_the_rest():
    from bench.limits import design_floor

    # The words' index and the merges applied run on every core; the driver works while the slices
    # wait, and the sum is timed on the cores already, so more cores never shorten either here.
    parts = {"read": 1.0, "count": 3.0, "summed": 0.25, "index": 1.0, "applied": 4.0, "driver": 0.5}
    assert design_floor(**parts, cores=2) == 2.0 + 0.25 + 2.5 + 0.5
    assert design_floor(**parts, cores=8) == 1.0 + 0.25 + 0.625 + 0.5


def test_the_driver_is_timed_on_the_rounds_of_the_run_it_measures():
    import numpy as np

    from bench.limits import driver_seconds
    from bpe.engine.count import WordCounts
    from bpe.engine.merge import learn_merges
    from bpe.engine.rules import MergeRules

    words = {
        f"{a}{b}{c}".encode(): 1 + (ord(a) * 7 + ord(b) * 3 + ord(c)) % 11 for a in "abcd" for b in "abc" for c in "xyz"
    }
    counts = WordCounts.from_dict(words)
    rules = MergeRules("bytes", 1, max_token_length=None, superwords=None)
    merges = learn_merges(counts, 20, rules, threads=2).merges
    assert driver_seconds(counts, merges, rules, slices=2) >= 0.0
    with pytest.raises(AssertionError, match="other merges"):
        driver_seconds(counts, np.flipud(merges), rules, slices=2)

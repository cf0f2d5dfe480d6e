"""The Dask engine on real local clusters: the same merges as the local engine for any number of
workers, partitioning and input order; worker loss recovered; scheduler loss reported."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import time
from pathlib import Path

import numpy as np
import pytest

from bpe import train
from bpe.cli import main
from bpe.engine.count import WordCounts
from bpe.errors import InputError
from bpe.training.counting import count_words
from tests.conftest import scale, stdlib_paragraphs, write_parquet
from tests.distributed.conftest import VOCAB, at_merge, train_args, train_on

pytestmark = pytest.mark.services  # starts real services

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def texts() -> list[str]:
    """Real prose every machine has: the standard library's docstrings."""
    return stdlib_paragraphs()[:2500]


@pytest.fixture(scope="module")
def local_merges(texts) -> list:
    return train(texts, vocab_size=VOCAB, pattern="cl100k").merges


@pytest.fixture(scope="module")
def cluster(local_cluster):
    """The test process's LocalCluster (tests/conftest.py), which each test sizes (`scale`)."""
    return local_cluster


def layouts(texts, root: Path) -> dict[str, list[str]]:
    """The same documents as one file of many row groups, as shuffled files, and as txt + jsonl."""
    one = write_parquet(root / "one" / "all.parquet", texts)
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": texts}), one, row_group_size=300)
    shuffled = texts[:]
    random.Random(7).shuffle(shuffled)
    for i in range(3):
        write_parquet(root / "three" / f"part-{i}.parquet", shuffled[i::3])
    (root / "mixed").mkdir()
    for i, t in enumerate(texts[:40]):
        (root / "mixed" / f"doc-{i:03d}.txt").write_text(t)
    with open(root / "mixed" / "rest.jsonl", "w") as f:
        for t in reversed(texts[40:]):
            f.write(json.dumps({"text": t}) + "\n")
    return {
        "row groups": [str(one)],
        "shuffled files": [str(root / "three")],
        "txt+jsonl": [f"file://{root / 'mixed'}"],
    }


def test_workers_with_several_threads_apply_each_round_on_all_of_them(texts, local_merges):
    """A worker started with --nthreads 2 splits its word bucket over two threads (as the local
    engine does); the merges are the local engine's."""
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=2, processes=True, host="127.0.0.1", dashboard_address=None
    )
    try:
        with distributed.Client(cluster) as client:
            tok = train(texts, vocab_size=VOCAB, pattern="cl100k", engine="dask", client=client)
    finally:
        cluster.close()
    assert tok.merges == local_merges
    assert tok.manifest["engine"]["bucket_threads"] == [min(2, os.cpu_count())] * 2


# CI's Dask engine on a real cluster (`smoke`): at one worker and at four; two and three in the slow tier.
@pytest.mark.parametrize(
    "workers", [pytest.param(1, marks=pytest.mark.smoke), 2, 3, pytest.param(4, marks=pytest.mark.smoke)]
)
def test_same_merges_as_the_local_engine(cluster, texts, local_merges, tmp_path, workers):
    scale(*cluster, workers)
    for name, files in layouts(texts, tmp_path).items():
        tok = train(files=files, vocab_size=VOCAB, pattern="cl100k", engine="dask", client=cluster[1])
        assert tok.merges == local_merges, f"{workers} workers, {name}"
        engine = tok.manifest["engine"]
        assert engine["workers"] == workers and engine["word_buckets"] == workers
        assert engine["rounds"] < len(tok.merges)
    assert tok.manifest["counts"]["documents"] == len(texts)


def test_the_word_counts_leave_the_workers_once_the_holders_hold_them(cluster, texts, local_merges, tmp_path):
    """During the merge loop a worker holds its holder's table and nothing Dask keeps for the run:
    every partition's counts and every bucket's sum are released (each worker held its bucket's
    counts twice, as the table and as the sum, for the whole loop)."""
    from dask.utils import key_split

    scale(*cluster, 2)
    client = cluster[1]
    held: list[set[str]] = []

    def progress(phase: str, done: int, total: int) -> None:
        if phase == "merge" and not held:  # the loop's start: the holders hold their words
            deadline = time.monotonic() + 10  # releasing a key reaches the workers a moment later
            while True:
                kinds = {key_split(key) for keys in client.has_what().values() for key in keys}
                if kinds <= {"new_holder"} or time.monotonic() > deadline:
                    held.append(kinds)
                    return
                time.sleep(0.05)

    files = layouts(texts, tmp_path)["row groups"]
    tok = train(files=files, vocab_size=VOCAB, pattern="cl100k", engine="dask", client=client, progress=progress)
    assert tok.merges == local_merges
    assert held == [{"new_holder"}]  # the holders (Dask actors), and nothing else


def test_a_worker_holds_its_words_without_the_compiler(cluster, texts, local_merges, tmp_path):
    """Once a run's kernels are loaded, no worker keeps numba's compiler resident: LLVM's code,
    touched whole at import, was a third of each worker's memory at 8 workers on 500 MB (108 of
    350 MiB), and Dask pauses and restarts workers by their resident memory."""
    from bpe.engine.resident import resident_kb

    scale(*cluster, 2)
    client = cluster[1]
    resident: list[dict] = []

    def progress(phase: str, done: int, total: int) -> None:
        if phase == "merge" and not resident:  # the holders hold their words
            resident.append(client.run(resident_kb))

    files = layouts(texts, tmp_path)["row groups"]
    tok = train(files=files, vocab_size=VOCAB, pattern="cl100k", engine="dask", client=client, progress=progress)
    assert tok.merges == local_merges
    assert len(resident[0]) == 2
    assert all(kb < 16 * 1024 for kb in resident[0].values()), f"LLVM resident (kB): {resident[0]}"


def _set_status(status: str, dask_worker=None) -> None:
    """Set a worker's status as Dask's memory monitor does (client.run passes `dask_worker`)."""
    from distributed.core import Status

    dask_worker.status = Status[status]


def test_holders_wait_for_a_paused_worker_rather_than_doubling_up(cluster, texts, local_merges, tmp_path):
    """A worker Dask has paused (for memory, at the end of counting) when the holders start gets
    its holder once it resumes: placed on the running workers alone, two holders shared one
    worker (twice its memory) and the paused one held none."""
    import threading

    scale(*cluster, 2)
    client = cluster[1]
    paused = sorted(client.scheduler_info()["workers"])[0]
    resume = threading.Timer(3.0, lambda: client.run(_set_status, "running", workers=[paused]))
    held: list[dict] = []

    def progress(phase: str, done: int, total: int) -> None:
        if phase == "count" and done == total and total and not resume.is_alive():  # counted: holders next
            client.run(_set_status, "paused", workers=[paused])
            resume.start()
        if phase == "merge" and not held:
            held.append(client.run(lambda dask_worker: len(dask_worker.state.actors)))

    try:
        files = layouts(texts, tmp_path)["row groups"]
        tok = train(files=files, vocab_size=VOCAB, pattern="cl100k", engine="dask", client=client, progress=progress)
    finally:
        if resume.is_alive() or resume.finished.is_set():
            resume.join()
        client.run(_set_status, "running")
    assert tok.merges == local_merges
    assert sorted(held[0].values()) == [1, 1], held[0]


@pytest.fixture(scope="module")
def superword_merges(texts) -> list:
    return train(texts, vocab_size=VOCAB, superwords=True, transition=600).merges


# From the size the test before left, down: the shared cluster starts no worker for these.
@pytest.mark.parametrize("workers", [4, 3, 2, 1])
def test_superwords_on_any_number_of_workers_are_the_local_engines(cluster, texts, superword_merges, tmp_path, workers):
    """Both stages run on the workers (stage 2's pieces counted on the partitions and held there)
    and give the local engine's merges, which tests/training/test_superwords.py checks against the reference."""
    scale(*cluster, workers)
    files = layouts(texts, tmp_path)["shuffled files"]
    tok = train(files=files, vocab_size=VOCAB, superwords=True, transition=600, engine="dask", client=cluster[1])
    assert tok.merges == superword_merges
    stages = tok.manifest["superwords"]["stages"]
    assert [s["merges"] for s in stages] == [600 - 256, VOCAB - 600]
    assert tok.manifest["engine"]["workers"] == workers


def test_textbook_tie_break_on_dask(cluster, texts):
    scale(*cluster, 2)
    local = train(texts, vocab_size=VOCAB, pattern="whitespace", tie_break="ids").merges
    on_dask = train(texts, vocab_size=VOCAB, pattern="whitespace", tie_break="ids", engine="dask", client=cluster[1])
    assert on_dask.merges == local


def test_a_users_regex_on_dask_gives_the_local_engines_merges(cluster, texts, tmp_path):
    """A regex with capture groups that leaves text between its matches and matches the empty string
    after a digit: the workers cut Hugging Face's pieces as the local engine does (which
    tests/training/test_custom_patterns.py checks against the reference trainer)."""
    scale(*cluster, 2)
    pattern = r"(\p{L}+)|(?<=\d)"
    local = train(texts, vocab_size=VOCAB, pattern=pattern).merges
    files = layouts(texts, tmp_path)["shuffled files"]
    assert train(files=files, vocab_size=VOCAB, pattern=pattern, engine="dask", client=cluster[1]).merges == local


def test_counts_are_summed_on_the_workers_by_stable_hash(cluster, texts, tmp_path):
    from bpe.distributed.count_tasks import count_on_dask, split_by_bucket
    from bpe.engine.hashing import hash_buckets
    from bpe.inputs.discover import discover
    from bpe.pretokenize import Pretokenizer

    cluster, client = cluster
    scale(cluster, client, 2)
    files = layouts(texts, tmp_path)["row groups"]
    futures, stats, fingerprints = count_on_dask(client, discover(files), None, Pretokenizer("cl100k"), "text", 3)
    assert all(isinstance(f, distributed.Future) for f in futures)  # results stay on the workers
    buckets = client.gather(futures)
    expected = count_words(texts, "cl100k")
    assert WordCounts.combine(buckets).to_dict() == expected.to_dict()
    assert stats.documents == len(texts) and stats.pretokens == expected.total
    mine = split_by_bucket(expected, 3)
    for b in range(3):
        assert buckets[b].to_dict() == mine[b].to_dict()
    remote = client.submit(hash_buckets, expected.data, expected.offsets, 3).result()
    assert np.array_equal(remote, hash_buckets(expected.data, expected.offsets, 3))


@pytest.mark.parametrize("checkpoint_seconds", [0.0, 0.02])
def test_a_killed_worker_is_rebuilt_and_merges_stay_exact(cluster, texts, local_merges, checkpoint_seconds):
    cluster, client = cluster
    scale(cluster, client, 2)
    pids = list(client.run(os.getpid).values())
    progress = at_merge(1 / 3, lambda: os.kill(pids[0], signal.SIGKILL))
    log: list[str] = []
    tok = train_on(client, texts, progress, log, checkpoint_seconds=checkpoint_seconds)
    assert progress.fired and tok.merges == local_merges
    assert tok.manifest["engine"]["recoveries"] >= 1
    assert any("lost; rebuilt" in line for line in log)


def bad_inputs(root: Path) -> dict[str, Path]:
    """Files whose fault shows only when their rows are read: on a worker, in the Dask engine."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root.mkdir(parents=True, exist_ok=True)
    rows = [f"document {i} has a few words in it".encode() for i in range(60)]
    rows[45] = b"bad \xff\xfe row"
    bad_row = root / "bad-row.parquet"
    pq.write_table(pa.table({"text": pa.array(rows, pa.binary()).view(pa.string())}), bad_row, row_group_size=20)
    (root / "bad-row.jsonl").write_bytes(b'{"text": "fine"}\n{"text": "bad \xff row"}\n')
    (root / "no-field.jsonl").write_text('{"text": "fine"}\n{"body": "no text here"}\n')
    return {
        "invalid UTF-8 in a row group": bad_row,
        "invalid UTF-8 in a jsonl line": root / "bad-row.jsonl",
        "a jsonl line without the text field": root / "no-field.jsonl",
        "no text column": write_parquet(root / "no-column.parquet", ["some text"], column="body"),
    }


def same_but_numbers(a: str, b: str) -> bool:
    return re.sub(r"\d+", "N", a) == re.sub(r"\d+", "N", b)


FAULTS = [
    "invalid UTF-8 in a row group",
    "invalid UTF-8 in a jsonl line",
    "a jsonl line without the text field",
    "no text column",
]


@pytest.mark.parametrize("fault", FAULTS)
def test_a_bad_file_fails_with_the_local_engines_one_line_error(cluster, tmp_path, capsys, fault):
    scale(*cluster, 2)
    path = str(bad_inputs(tmp_path / "data")[fault])
    errors = {}
    for engine, options in (("local", {}), ("dask", {"client": cluster[1]})):
        with pytest.raises(InputError) as caught:
            train(files=[path], vocab_size=300, engine=engine, **options)
        errors[engine] = str(caught.value)
    assert errors["dask"].startswith(f"{path}:") and same_but_numbers(errors["dask"], errors["local"]), errors
    lines = {}
    for engine, flags in (("local", []), ("dask", ["--scheduler", cluster[0].scheduler_address])):
        code = main(
            [
                "train",
                path,
                "--vocab-size",
                "300",
                "--engine",
                engine,
                *flags,
                "--out",
                str(tmp_path / engine),
                "--quiet",
            ]
        )
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 1 and err, engine
        lines[engine] = err[-1]
    assert lines["dask"].startswith(f"bpe: error: {path}:") and same_but_numbers(lines["dask"], lines["local"]), lines


def test_bad_input_found_on_a_worker_is_not_retried_by_the_pipeline(cluster, tmp_path):
    """What the pipeline's count task raises for a bad row group, as its Prefect state holds it:
    the retry condition must see bad data in it, whether it arrives as itself or wrapped."""
    pytest.importorskip("prefect")
    from prefect.states import Failed

    from bpe.distributed.count_tasks import count_shard_to_files
    from bpe.inputs.discover import discover
    from bpe.pretokenize import Pretokenizer
    from bpe.tasks.data import retry_if_transient

    scale(*cluster, 2)
    path = bad_inputs(tmp_path / "data")["invalid UTF-8 in a row group"]
    shard = discover([str(path)])[0]
    with pytest.raises(InputError) as counted:
        count_shard_to_files(
            cluster[1],
            {**shard.fingerprint(), "kind": shard.kind},
            Pretokenizer("cl100k"),
            "text",
            0.0,
            str(tmp_path / "counts.parquet"),
            str(tmp_path / "held-out.parquet"),
        )
    with pytest.raises(InputError) as trained:
        train(files=[str(path)], vocab_size=300, engine="dask", client=cluster[1])
    wrapped = RuntimeError("count-shard failed")
    wrapped.__cause__ = counted.value
    for error in (counted.value, trained.value, wrapped, ExceptionGroup("counts", [OSError("x"), trained.value])):
        assert retry_if_transient(None, None, Failed(data=error)) is False, repr(error)
    assert retry_if_transient(None, None, Failed(data=OSError("connection reset"))) is True


def test_a_bad_shard_on_a_local_cluster_is_one_line_on_stderr(tmp_path):
    """The workers of the cluster `bpe train --engine dask` starts share its stderr: bad input on a
    worker must show only the one-line error, never the worker's log of a failed task."""
    import subprocess
    import sys

    path, out = tmp_path / "bad.txt", tmp_path / "tok"
    path.write_bytes(b"ok\n\xff\xfe bad\n")
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "bpe"),
            "train",
            str(path),
            "--engine",
            "dask",
            "--workers",
            "2",
            "--vocab-size",
            "300",
            "--out",
            str(out),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [f"bpe: error: {path}: invalid UTF-8 at byte 3"], done.stderr
    assert not out.exists()


def time_parts(summary: str) -> tuple[float, dict[str, float]]:
    """The total a summary's first line gives and the parts of its `time` line (notes in
    parentheses, such as the merge loop's share of the merge, left out)."""
    total = float(re.search(r" in ([\d.]+) s$", summary.splitlines()[0])[1])
    line = next(line for line in summary.splitlines() if line.startswith("  time "))
    parts = re.sub(r" \([^)]*\)", "", line.removeprefix("  time")).strip().split(", ")
    named = (re.fullmatch(r"(.+) ([\d.]+) s", part).groups() for part in parts)
    return total, {name: float(seconds) for name, seconds in named}


def test_the_time_line_of_a_run_that_starts_its_cluster_adds_up_to_its_total(texts, tmp_path):
    """`trained in 18.1 s` was not the sum of the `time` line: starting (and stopping) the cluster
    `bpe train --engine dask` starts was in no part of it."""
    import subprocess
    import sys

    data = write_parquet(tmp_path / "d.parquet", texts)
    command = [str(Path(sys.executable).parent / "bpe"), "train", str(data), "--engine", "dask", "--workers", "1"]
    started = time.perf_counter()
    done = subprocess.run(
        [*command, "--vocab-size", "400", "--out", str(tmp_path / "tok")], capture_output=True, text=True, timeout=300
    )
    wall = time.perf_counter() - started
    assert done.returncode == 0, done.stderr[-2000:]
    total, parts = time_parts(done.stdout)
    assert sum(parts.values()) == pytest.approx(total, abs=0.05 + 0.005 * len(parts)), parts  # each part rounded
    assert {"cluster start", "count", "merge", "export", "cluster stop"} <= set(parts), parts
    assert parts["cluster start"] > 0.1  # a scheduler and a worker process started
    assert total <= wall


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def process_cluster(tmp_path):
    """`dask scheduler` and two `dask worker` processes on 127.0.0.1 of this test's own (it may kill
    them), stopped workers-first."""
    from bpe.pipeline.services import start_dask_scheduler, start_dask_workers

    scheduler = start_dask_scheduler(_free_port(), log=tmp_path / "scheduler.log")
    workers = start_dask_workers(scheduler.url, [tmp_path / f"worker-{i}.log" for i in range(2)])
    yield scheduler.url, scheduler.process
    for service in workers + [scheduler]:
        service.stop()


def test_cli_against_a_running_scheduler(dask_services, texts, local_merges, tmp_path, capsys):
    """`bpe train --scheduler` on the session's `dask scheduler` and two `dask worker` processes."""
    address = dask_services["ready"]()
    data = write_parquet(tmp_path / "data" / "d.parquet", texts)
    out = tmp_path / "tok"
    code = main(
        [
            "train",
            str(data),
            "--vocab-size",
            str(VOCAB),
            "--engine",
            "dask",
            "--scheduler",
            address,
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["engine"]["scheduler"] == address and manifest["engine"]["workers"] == 2
    from bpe import Tokenizer

    assert Tokenizer.load(out).merges == local_merges


def test_losing_the_scheduler_stops_with_a_clear_error(process_cluster, texts):
    from bpe.errors import SchedulerLost

    address, scheduler = process_cluster

    def kill_scheduler(phase: str, done: int, total: int) -> None:
        if phase == "merge" and scheduler.poll() is None:
            scheduler.kill()

    started = time.monotonic()
    with pytest.raises(SchedulerLost, match="lost the Dask scheduler"):
        train(texts * 3, vocab_size=6000, pattern="cl100k", engine="dask", scheduler=address, progress=kill_scheduler)
    assert time.monotonic() - started < 60


def test_an_unreachable_scheduler_is_one_line_and_writes_nothing(tmp_path, capsys, texts):
    data = write_parquet(tmp_path / "d.parquet", texts[:10])
    dead = f"tcp://127.0.0.1:{_free_port()}"
    code = main([*train_args(data, dead, tmp_path / "tok"), "--quiet"])
    assert code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("bpe: error: cannot reach the Dask scheduler")
    assert not (tmp_path / "tok").exists()


def test_a_scratch_directory_left_by_a_killed_run_is_swept(cluster, texts, tmp_path, monkeypatch):
    """kill -9 of a Dask run leaves its scratch directory in the temporary directory; the next
    run removes it once the process that made it is gone (and leaves a live run's alone)."""
    import subprocess
    import sys
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = tmp_path / f"bpe-scratch-{dead.stdout.strip()}-abcd"
    (left / "run-1" / "bucket-0000").mkdir(parents=True)
    (left / "run-1" / "bucket-0000" / "words.parquet").write_bytes(b"\0" * 1000)
    alive = subprocess.Popen(["sleep", "60"])
    busy = tmp_path / f"bpe-scratch-{alive.pid}-efgh"
    busy.mkdir()
    try:
        scale(*cluster, 1)
        train(texts[:200], vocab_size=300, pattern="cl100k", engine="dask", client=cluster[1])
        assert not left.exists() and busy.exists()
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith("bpe-scratch-")] == [busy.name]
    finally:
        alive.kill()

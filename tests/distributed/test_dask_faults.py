"""Faults in the Dask engine's merge loop, injected at chosen moments on a real local cluster: a
worker killed when a checkpoint or the final statistics first notice it, both workers killed, a
hung worker, a corrupted checkpoint, and a scratch directory that a previous run left behind.
The merges must stay those of the local engine. The holder-level tests run the holder in this
process, as a Dask worker would."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from bpe import train
from bpe.distributed.bucket_holder import BucketHolder
from bpe.engine.word_table import WordTable
from bpe.training.counting import count_words
from tests.conftest import stdlib_paragraphs, two_worker_cluster
from tests.distributed.conftest import VOCAB, at_merge, train_on

pytestmark = pytest.mark.services  # starts real services: the slow tier

distributed = pytest.importorskip("distributed")
dask = pytest.importorskip("dask")

EVERY_ROUND = 1e-9  # a checkpoint interval that makes the driver checkpoint after every round


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return stdlib_paragraphs()[:2500]


@pytest.fixture(scope="module")
def local(texts):
    """The local engine's result: what every faulty Dask run must still give."""
    return train(texts, vocab_size=VOCAB, pattern="cl100k")


@pytest.fixture(scope="module")
def cluster():
    """Two workers under nannies. A killed worker's nanny starts a new one, but LocalCluster closes
    that nanny for good when no worker of its name registers within `lost-worker-timeout` (15 s),
    which a restart can take on a busy machine: the cluster would then stay at one worker."""
    with dask.config.set({"distributed.deploy.lost-worker-timeout": "600s"}), two_worker_cluster() as both:
        yield both


@pytest.fixture
def client(cluster):
    """The shared cluster's client once two workers run again (nannies restart killed ones)."""
    cluster, client = cluster
    # A restarted worker imports and loads its kernels: slow on a busy machine (one restart during a
    # full clean-clone CI run took about two minutes to register again).
    deadline = time.monotonic() + 300
    while len(client.scheduler_info()["workers"]) != 2 or len(cluster.workers) != 2:
        assert time.monotonic() < deadline, "the cluster did not come back to two workers"
        time.sleep(0.1)
    return client


def kill(pid: int) -> None:
    """SIGKILL a worker process and wait until it is gone, so that the driver's next call meets a dead peer."""
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return
        except (FileNotFoundError, ProcessLookupError):  # reaped between open and read: ESRCH
            return
        time.sleep(0.005)


@pytest.mark.chaos
@pytest.mark.parametrize("victims", [1, 2])
def test_worker_loss_first_noticed_by_a_checkpoint_is_recovered(client, texts, local, victims):
    pids = list(client.run(os.getpid).values())
    progress = at_merge(1 / 3, lambda: [kill(pid) for pid in pids[:victims]])
    log: list[str] = []
    started = time.monotonic()
    tok = train_on(client, texts, progress, log, checkpoint_seconds=EVERY_ROUND)
    assert progress.fired and tok.merges == local.merges
    assert tok.manifest["engine"]["recoveries"] >= victims
    assert sum("during a checkpoint" in line for line in log) >= victims, log
    # A guard against hanging, not a speed figure: alone this takes ~3 s, about 10 s on a loaded
    # machine. A holder placed on the other worker killed in the same moment would wait out the
    # actor timeout (120 s) unless `started_actor` submitted it again at once, as it does.
    assert time.monotonic() - started < 90


@pytest.mark.chaos
def test_worker_loss_first_noticed_by_the_final_statistics_is_recovered(client, texts, local):
    pids = list(client.run(os.getpid).values())
    progress = at_merge(1.0, lambda: kill(pids[0]))
    log: list[str] = []
    tok = train_on(client, texts, progress, log, checkpoint_seconds=0)
    assert progress.fired and tok.merges == local.merges
    assert tok.manifest["engine"]["recoveries"] == 1
    assert any("during the statistics" in line for line in log), log
    for part, key in (("result", "tokens"), ("counts", "unique_words")):  # the rebuilt bucket's own numbers
        assert tok.manifest[part][key] == local.manifest[part][key]


@pytest.mark.chaos
def test_a_hung_worker_is_not_chosen_to_rebuild_its_own_shard(client, texts, local):
    """A stopped worker still counts as alive for the scheduler, and looks the more attractive one
    here (the other holds 50 MB more); the holder it hung must be rebuilt on the other worker."""
    (hung, hung_pid), (other, _) = sorted(client.run(os.getpid).items())
    ballast = client.scatter(np.zeros(50_000_000, np.uint8), workers=[other])
    stopped: list[int] = []

    def stop() -> None:
        os.kill(hung_pid, signal.SIGSTOP)
        stopped.append(hung_pid)

    log: list[str] = []
    started = time.monotonic()
    try:
        tok = train(
            texts,
            vocab_size=VOCAB,
            pattern="cl100k",
            engine="dask",
            client=client,
            progress=at_merge(1 / 3, stop),
            log=log.append,
            call_timeout=3,
        )
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        del ballast
    assert stopped and tok.merges == local.merges
    rebuilt = [line for line in log if "lost; rebuilt" in line]
    assert rebuilt and all(f"rebuilt on {other}" in line for line in rebuilt), log
    assert time.monotonic() - started < 60


@pytest.mark.chaos
def test_a_corrupted_checkpoint_falls_back_to_the_words_on_a_cluster(client, texts, local, tmp_path):
    scratch = tmp_path / "scratch"
    pids = list(client.run(os.getpid).values())

    def corrupt_then_kill() -> None:
        checkpoints = list(scratch.rglob("checkpoint.npz"))
        assert checkpoints
        for path in checkpoints:
            with open(path, "r+b") as f:
                f.truncate(path.stat().st_size // 2)
        kill(pids[0])

    progress = at_merge(1 / 3, corrupt_then_kill)
    log: list[str] = []
    tok = train_on(client, texts, progress, log, checkpoint_seconds=EVERY_ROUND, scratch=str(scratch))
    assert progress.fired and tok.merges == local.merges
    assert any("checkpoint.npz unusable" in line for line in log), log


@pytest.mark.chaos
def test_a_reused_scratch_directory_does_not_poison_a_run(client, texts, local, tmp_path):
    """A previous run (other data, checkpoints written) leaves its files in the scratch directory;
    the next run, losing a worker before its own first checkpoint, must not restore from them."""
    scratch = tmp_path / "scratch"
    train(
        texts[::-1][:800],
        vocab_size=500,
        pattern="cl100k",
        engine="dask",
        client=client,
        scratch=str(scratch),
        checkpoint_seconds=EVERY_ROUND,
    )
    pids = list(client.run(os.getpid).values())
    progress = at_merge(1 / 2, lambda: kill(pids[0]))
    log: list[str] = []
    tok = train_on(client, texts, progress, log, checkpoint_seconds=0, scratch=str(scratch))
    assert progress.fired and tok.merges == local.merges
    assert tok.manifest["engine"]["recoveries"] == 1
    assert not list(scratch.iterdir()), "a run leaves nothing behind in a scratch directory it was given"


class Echo:
    """The smallest actor: stands for a bucket holder where only its placement matters."""

    def ping(self) -> str:
        return "pong"


def test_an_actor_whose_workers_all_left_before_it_was_placed_is_given_up_at_once():
    """Dask parks a task whose (loose) worker restrictions name only departed workers as
    "no-worker" and keeps it there after new workers join: the driver notices instead of waiting."""
    from bpe.distributed.driver import StrandedPlacement, started_actor

    gone = ["tcp://127.0.0.1:9"]  # a worker that left: nothing listens there
    cluster = distributed.LocalCluster(n_workers=0, processes=True, host="127.0.0.1", dashboard_address=None)
    with cluster, distributed.Client(cluster) as client:
        stranded = client.submit(Echo, actor=True, workers=gone, allow_other_workers=True, pure=False)
        cluster.scale(1)
        client.wait_for_workers(1, timeout=120)
        with pytest.raises(TimeoutError):  # Dask's own wait: the task is never placed on the new worker
            stranded.result(timeout=5)
        began = time.monotonic()
        with pytest.raises(StrandedPlacement, match="the workers chosen for a holder left: tcp://127.0.0.1:9"):
            started_actor(client, stranded, gone, timeout=120)
        assert time.monotonic() - began < 30
        running = sorted(client.scheduler_info()["workers"])
        again = client.submit(Echo, actor=True, workers=running, allow_other_workers=True, pure=False)
        assert started_actor(client, again, running, timeout=120).ping().result(timeout=30) == "pong"


# -- the holder's persistence, in this process ------------------------------------------------

SECRET = "s3cret-of-this-run"


@pytest.fixture(scope="module")
def small():
    """A few hundred documents, their words, and the merge log the local engine learns on them."""
    docs = stdlib_paragraphs()[:300]
    merges = train(docs, vocab_size=420, pattern="whitespace").merges
    log = np.array([(a, b, 256 + i) for i, (a, b) in enumerate(merges)], np.int64)
    return count_words(docs, "whitespace"), log


def words_of(table: WordTable) -> dict[tuple[int, ...], int]:
    tokens, lengths, freqs = table.to_words()
    ends = np.cumsum(lengths)
    return {tuple(tokens[e - n : e].tolist()): int(f) for e, n, f in zip(ends, lengths, freqs)}


def replayed(counts, log: np.ndarray) -> dict[tuple[int, ...], int]:
    table = WordTable(counts)
    table.apply(log)
    return words_of(table)


_made: list[BucketHolder] = []


@pytest.fixture(autouse=True)
def _close_holders():
    yield
    while _made:
        _made.pop().server.close()


def holder(*args, **kwargs) -> BucketHolder:
    """A holder in this process; its listening socket (unused here) is closed after the test."""
    _made.append(BucketHolder(*args, **kwargs))
    return _made[-1]


@pytest.mark.parametrize("damage", ["truncated", "bytes flipped", "empty"])
def test_a_corrupted_checkpoint_falls_back_to_the_words_and_the_full_log(small, tmp_path, damage):
    counts, log = small
    first = holder(counts, str(tmp_path), 0, SECRET)
    first.table.apply(log[:60])
    first.merges_applied = 60
    first._checkpoint()
    path = tmp_path / "bucket-0000" / "checkpoint.npz"
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) * 2 // 3])
    elif damage == "bytes flipped":
        middle = len(data) // 2
        path.write_bytes(data[:middle] + bytes(b ^ 0xFF for b in data[middle : middle + 64]) + data[middle + 64 :])
    else:
        path.write_bytes(b"")
    rebuilt = holder(None, str(tmp_path), 0, SECRET, log)
    assert words_of(rebuilt.table) == replayed(counts, log)
    assert rebuilt.merges_applied == len(log)
    assert "checkpoint.npz unusable" in rebuilt.address()["restored_from"]


def test_an_intact_checkpoint_is_used(small, tmp_path):
    counts, log = small
    first = holder(counts, str(tmp_path), 0, SECRET)
    first.table.apply(log[:60])
    first.merges_applied = 60
    first._checkpoint()
    rebuilt = holder(None, str(tmp_path), 0, SECRET, log)
    assert words_of(rebuilt.table) == replayed(counts, log)
    assert rebuilt.address()["restored_from"] == "its checkpoint after 60 merges"


@pytest.mark.parametrize("given_as", ["counts", "a parquet file"])
def test_a_new_holder_ignores_what_another_run_left_in_its_directory(small, tmp_path, given_as):
    from bpe.distributed.count_tasks import write_counts

    counts, log = small
    other = count_words(["entirely different words, nothing alike"] * 3, "whitespace")
    if given_as == "counts":
        old, new = other, counts
    else:
        old = write_counts(other, str(tmp_path / "old.parquet"))
        new = write_counts(counts, str(tmp_path / "new.parquet"))
    scratch = str(tmp_path / "scratch")
    stale = holder(old, scratch, 0, SECRET)
    stale.merges_applied = 5
    stale._checkpoint()
    holder(new, scratch, 0, SECRET)  # this run's holder over the same directory
    rebuilt = holder(None, scratch, 0, SECRET, log[:10])
    assert words_of(rebuilt.table) == replayed(counts, log[:10])
    assert Path(scratch, "bucket-0000", "words.parquet").exists()

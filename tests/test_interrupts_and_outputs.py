"""Failing early and in one line: settings and output locations are checked before any counting;
a full disk, a read-only place and Ctrl-C end in one line and a clean exit code, with nothing
half-written. Ctrl-C is sent as a terminal sends it: to the whole process group, with the
progress bars on a real pseudo-terminal."""

from __future__ import annotations

import os
import pty
import random
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bpe.cli import main
from tests.conftest import write_parquet

BPE = str(Path(sys.executable).parent / "bpe")


@pytest.fixture
def data(tmp_path) -> Path:
    return write_parquet(tmp_path / "data" / "part.parquet", ["the cat sat on the mat"] * 100)


@pytest.fixture
def no_counting(monkeypatch):
    """Counting must not start: the check under test comes first."""

    def counting_started(*args, **kwargs):
        raise AssertionError("counting started before the check")

    monkeypatch.setattr(sys.modules["bpe.training"], "count_shards", counting_started)


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("bpe: error: "), err
    return err


def test_a_special_token_spelled_like_a_byte_is_refused_before_counting(data, tmp_path, capsys, no_counting):
    assert main(["train", str(data), "--vocab-size", "300", "--special-token", "a", "--out", str(tmp_path / "t")]) == 1
    assert "--special-token: 'a' is spelled like a byte token" in one_error_line(capsys)
    assert not (tmp_path / "t").exists()


def test_an_out_under_a_regular_file_is_refused_before_counting(data, tmp_path, capsys, no_counting):
    (tmp_path / "file").write_text("x")
    assert main(["train", str(data), "--vocab-size", "300", "--out", str(tmp_path / "file" / "tok")]) == 1
    assert "is a file, not a directory" in one_error_line(capsys)


@pytest.fixture
def mounted(tmp_path):
    """A small tmpfs mounted at tmp_path/mnt with the given options (skips where mounting is not allowed)."""
    mounts = []

    def mount(options: str) -> Path:
        point = tmp_path / f"mnt{len(mounts)}"
        point.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
        mounts.append(point)
        return point

    yield mount
    for point in mounts:
        subprocess.run(["umount", str(point)], capture_output=True)


def test_a_read_only_out_is_refused_before_counting(data, capsys, mounted, no_counting):
    read_only = mounted("ro,size=1m")
    assert main(["train", str(data), "--vocab-size", "300", "--out", str(read_only / "tok")]) == 1
    assert "Read-only file system" in one_error_line(capsys)


def test_a_full_disk_during_export_is_one_line_and_leaves_nothing(data, capsys, mounted):
    small = mounted("size=16k")
    assert main(["train", str(data), "--vocab-size", "400", "--out", str(small / "tok"), "--quiet"]) == 1
    # the user's path, not the staging directory's, nor a bare [Errno 28]
    line = f"bpe: error: {small / 'tok'}: no space left on device while writing the tokenizer files\n"
    assert one_error_line(capsys) == line
    assert list(small.iterdir()) == []


def test_a_full_disk_while_replacing_a_tokenizer_keeps_the_old_one(tmp_path, capsys, mounted):
    rng = random.Random(0)
    words = [
        " ".join("".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(3, 9))) for _ in range(50))
        for _ in range(400)
    ]
    data = write_parquet(tmp_path / "words.parquet", words)
    small = mounted("size=40k")  # room for a tokenizer of 7 small files (a page each), not for a larger one
    out = small / "tok"
    assert main(["train", str(data), "--vocab-size", "257", "--out", str(out), "--quiet"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert main(["train", str(data), "--vocab-size", "1000", "--out", str(out), "--force", "--quiet"]) == 1
    assert one_error_line(capsys) == f"bpe: error: {out}: no space left on device while writing the tokenizer files\n"
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before and list(small.iterdir()) == [out]


@pytest.fixture(scope="module")
def encoding(tmp_path_factory) -> tuple[Path, Path]:
    """A saved tokenizer, and texts whose ids take about 100 kB (far more than a 16 kB tmpfs holds)."""
    from bpe import train

    where = tmp_path_factory.mktemp("encoding")
    texts = [f"document {i}: the cat sat on the mat" for i in range(5000)]
    train(texts[:50], vocab_size=280, special_tokens=["<|endoftext|>"]).save(where / "tok")
    return where / "tok", write_parquet(where / "texts.parquet", texts)


FULL_CASES = [
    ("ids.npy", None, "--out"),
    ("ids.txt", "o.npy", "--out"),
    ("ids.jsonl", "o.npy", "--out"),
    (os.devnull, "o.npy", "--offsets"),
]


@pytest.mark.parametrize("out, offsets, full", FULL_CASES)
def test_a_full_disk_while_encoding_names_the_output_and_leaves_nothing(encoding, capsys, mounted, out, offsets, full):
    tok, texts = encoding
    small = mounted("size=16k")
    paths = {"--out": small / out, "--offsets": small / offsets if offsets else None}  # small / os.devnull: /dev/null
    for path in paths.values():
        if path is not None and path.parent == small:
            path.write_text("keep me")  # replaced only by a complete file
    flags = [str(a) for flag, path in paths.items() if path is not None for a in (flag, path)]
    assert main(["encode", str(tok), str(texts), *flags, "--eot", "--force", "--quiet"]) == 1
    line = one_error_line(capsys)
    assert re.fullmatch(
        rf"bpe: error: {full} {re.escape(str(paths[full]))}: no space left on device after writing "
        r"[\d,]+ bytes\n",
        line,
    ), line
    assert sorted(p.name for p in small.iterdir()) == sorted(p.name for p in paths.values() if p and p.parent == small)
    assert all(p.read_text() == "keep me" for p in small.iterdir())


def test_a_full_device_written_in_place_is_one_line(encoding, capsys):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    tok, texts = encoding
    assert main(["encode", str(tok), str(texts), "--out", "/dev/full", "--format", "bin", "--quiet"]) == 1
    assert one_error_line(capsys) == "bpe: error: --out /dev/full: no space left on device\n"


@pytest.fixture(scope="module")
def slow_merges(tmp_path_factory) -> Path:
    """A corpus whose merge loop takes seconds: many unique random words."""
    rng = random.Random(1)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = lambda: " ".join("".join(rng.choice(letters) for _ in range(rng.randint(3, 12))) for _ in range(200))  # noqa: E731
    path = tmp_path_factory.mktemp("slow") / "words.parquet"
    pq.write_table(pa.table({"text": [words() for _ in range(3000)]}), path)
    return path


def interrupt_when(args: list[str], seen: bytes, cwd: Path, timeout: float = 120) -> tuple[int, str]:
    """Run `bpe args` on a pseudo-terminal; when `seen` shows on it, press Ctrl-C (SIGINT to the
    process group); returns the exit code and everything the terminal showed."""
    leader, follower = pty.openpty()
    # A shell gives a foreground command the default SIGINT; a test run started in the background
    # (as a CI job may be) would otherwise hand down "ignore SIGINT", which bpe rightly respects.
    process = subprocess.Popen(
        [BPE, *args],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        cwd=cwd,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    os.close(follower)
    shown = b""
    interrupted = False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                chunk = b""
            if not chunk and process.poll() is not None:
                break
            shown += chunk
        if not interrupted and seen in shown:
            os.killpg(process.pid, signal.SIGINT)
            interrupted = True
        if process.poll() is not None and not ready:
            break
    code = process.wait(timeout=60)
    os.close(leader)
    text = re.sub(r"\x1b\[[0-9;]*m", "", shown.decode(errors="replace"))  # colour resets some libraries print
    assert interrupted, text[-2000:]
    return code, text


def test_ctrl_c_in_the_local_merge_loop(slow_merges, tmp_path):
    code, shown = interrupt_when(
        ["train", str(slow_merges), "--vocab-size", "20000", "--out", "tok"], b"merge:", tmp_path
    )
    assert code == 130, shown[-3000:]
    assert "Traceback" not in shown and shown.rstrip().endswith("bpe: interrupted; nothing was written")
    assert not (tmp_path / "tok").exists() and not list(tmp_path.glob(".tok*"))


@pytest.mark.services
@pytest.mark.parametrize("phase", [b"count:", b"merge:"])
def test_ctrl_c_on_the_dask_engine(slow_merges, tmp_path, phase):
    args = ["train", str(slow_merges), "--vocab-size", "20000", "--out", "tok", "--engine", "dask", "--workers", "2"]
    code, shown = interrupt_when(args, phase, tmp_path)
    assert code == 130, shown[-3000:]
    assert "Traceback" not in shown, shown[-3000:]
    assert shown.rstrip().endswith("bpe: interrupted; nothing was written"), shown[-3000:]
    assert not (tmp_path / "tok").exists()


def test_what_a_killed_export_left_is_swept_by_the_next_run(data, tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    alive = subprocess.Popen(["sleep", "60"])
    try:
        left = tmp_path / f".tok.tmp-{dead.stdout.strip()}-abcd1234"  # kill -9 during an export leaves this
        left.mkdir()
        (left / "merges.txt").write_bytes(b"")
        busy = tmp_path / f".tok.tmp-{alive.pid}-efgh5678"  # another export, still running
        busy.mkdir()
        assert main(["train", str(data), "--vocab-size", "300", "--out", str(tmp_path / "tok"), "--quiet"]) == 0
        assert not left.exists() and busy.exists()
    finally:
        alive.kill()

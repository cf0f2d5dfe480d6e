"""Where a run writes, and what it leaves when it cannot finish: `--out` is checked before any
counting (a path under a regular file, a read-only place); a full disk while exporting or encoding
ends in one line naming the output, a non-zero exit, and nothing half-written (an existing
tokenizer or output kept whole); what a run killed during its export left is swept by the next."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bpe.cli import main
from tests.conftest import write_parquet


@pytest.fixture
def data(tmp_path) -> Path:
    return write_parquet(tmp_path / "data" / "part.parquet", ["the cat sat on the mat"] * 100)


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("bpe: error: "), err
    return err


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

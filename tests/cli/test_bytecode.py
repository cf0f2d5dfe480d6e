"""The package's bytecode where Python writes none (PYTHONDONTWRITEBYTECODE, as in the image and
on many CI machines): the first `bpe` run writes it, and later processes load it instead of
compiling every module from source as they start."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Imports what a `bpe train` run imports, and prints how many of the package's modules were
# compiled from source on the way (Python's loader compiles a module whose bytecode it cannot use).
PROBE = """
import importlib._bootstrap_external as external
compiled = []
compile_source = external.SourceLoader.source_to_code
def spy(self, data, path, *args, **kwargs):
    compiled.append(path)
    return compile_source(self, data, path, *args, **kwargs)
external.SourceLoader.source_to_code = spy
import bpe.cli, bpe.training.trainer, bpe.engine.merge
print(sum(path.startswith({package!r}) for path in compiled))
"""


def _compiled_from_source(package: Path, env: dict[str, str]) -> int:
    probe = PROBE.format(package=str(package))
    run = [sys.executable, "-c", probe]
    done = subprocess.run(run, env=env, cwd=package.parent, capture_output=True, text=True, check=True)
    return int(done.stdout.split()[-1])


def test_first_run_writes_the_bytecode_later_processes_load(tmp_path):
    root = tmp_path / "install"
    shutil.copytree(REPO / "bpe", root / "bpe", ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    assert _compiled_from_source(root / "bpe", env) > 20  # Python wrote nothing: every start compiles

    text = tmp_path / "a.txt"
    text.write_text("the cat sat on the mat, the cat ate the rat\n" * 20)
    run = [sys.executable, "-m", "bpe.cli", "train", str(text), "--vocab-size", "270", "--out", str(tmp_path / "tok")]
    done = subprocess.run([*run, "--quiet"], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "tok" / "merges.txt").exists()

    assert _compiled_from_source(root / "bpe", env) == 0


def test_a_package_it_cannot_write_to_runs_as_before(tmp_path):
    """Where no bytecode can be written (here a file named `__pycache__` in every folder of the
    package, which stops root too), the run succeeds and leaves the package as it was."""
    root = tmp_path / "install"
    shutil.copytree(REPO / "bpe", root / "bpe", ignore=shutil.ignore_patterns("__pycache__"))
    folders = [Path(folder) for folder, _, files in os.walk(root / "bpe") if "__init__.py" in files]
    for folder in folders:
        (folder / "__pycache__").write_text("not a folder")
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    text = tmp_path / "a.txt"
    text.write_text("the cat sat on the mat\n" * 20)
    out = tmp_path / "tok"
    run = [sys.executable, "-m", "bpe.cli", "train", str(text), "--vocab-size", "266", "--out", str(out), "--quiet"]
    done = subprocess.run(run, env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert (out / "merges.txt").exists()
    assert all((folder / "__pycache__").read_text() == "not a folder" for folder in folders)


def test_a_package_it_cannot_write_to_is_tried_once_not_compiled_whole(tmp_path):
    """Compiling every module only to fail at writing each would cost every run half a second."""
    root = tmp_path / "install"
    shutil.copytree(REPO / "bpe", root / "bpe", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "bpe" / "__pycache__").write_text("not a folder")
    probe = (
        "import py_compile\n"
        "tried = []\n"
        "compile_module = py_compile.compile\n"
        "py_compile.compile = lambda *a, **k: tried.append(a[0]) or compile_module(*a, **k)\n"
        "from bpe.cli.bytecode import write_bytecode\n"
        "write_bytecode()\n"
        "print(len(tried))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "-c", probe], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) == 1

"""Cold start: what a new install, image or worker pays before its first tokenizer.

Building the package compiles the kernels into it (setup.py), so a fresh machine loads them; the
path that compiles (a CPU the package was not built on, or BPE_PREBUILT_KERNELS=0) says so first
and reports the compile time apart. Compiling every kernel from nothing takes about 45 s of a core
(`bpe warm` on an empty cache; the README's install does it on a fresh machine), so the test below
starts from a cache that lacks two of them: the path is the same, kernel by kernel.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import write_parquet
from tests.reference import train_reference

pytestmark = pytest.mark.cold

BPE = str(Path(sys.executable).parent / "bpe")
ROOT = Path(__file__).resolve().parent.parent
TEXT = ["the cat sat on the mat"] * 100


@pytest.fixture
def data(tmp_path) -> Path:
    return write_parquet(tmp_path / "data" / "part.parquet", TEXT)


# What the test's cache lacks: a kernel every `bpe train` needs (indexing the word table), and one
# that only the Dask engine uses (a holder's tables), which the run does not compile and `bpe warm`
# must. Both compile in seconds; a pattern's counting kernel would take half a minute each.
MISSING_FOR_THE_RUN = "word_table._index_words-"
# One kernel of each path a first run may not take is enough to show that warm compiles the path: the
# Dask engine's, training from a tokenizer (replaying its merges), a word of a thousand tokens or more
# (which warm's sample lacks) and, where there are 2 cores, the merge loop on threads. Each is called
# from Python (a kernel called only from kernels is not needed where its callers are cached) and
# compiles in seconds.
MISSING_FOR_WARM = (
    "table_group._append-",
    "replay._joined_bytes-",
    "count._gather_words-",
    "word_table._index_long_words-",
) + (("spin_rounds._serve-",) if len(os.sched_getaffinity(0)) >= 2 else ())


def compiling_from_nothing(tmp_path: Path) -> dict:
    """An empty kernel cache and no prebuilt kernels: the path of a CPU the package was not built on."""
    return {**os.environ, "BPE_KERNEL_CACHE": str(tmp_path / "empty-kernel-cache"), "BPE_PREBUILT_KERNELS": "0"}


def cache_lacking(tmp_path: Path, missing: tuple[str, ...]) -> dict:
    """A kernel cache holding every kernel this machine has compiled for this version of the engine
    but those whose files start with `missing`, and no prebuilt kernels to fill it: for those, the
    path of a CPU the package was not built on. With nothing compiled here yet, the cache is empty."""
    from bpe.engine.kernel_cache import PREBUILT_DIR, kernel_cache_base, kernel_cache_name, seed_from_prebuilt

    env = compiling_from_nothing(tmp_path)
    name = kernel_cache_name()
    for source in (Path(kernel_cache_base()) / name, PREBUILT_DIR / name):
        if list(source.glob("engine/*.nbi")):
            target = Path(env["BPE_KERNEL_CACHE"]) / name
            seed_from_prebuilt(source, target)
            for path in (target / "engine").iterdir():
                if path.name.startswith(missing):
                    path.unlink()
            break
    return env


def reference_merges(vocab_size: int) -> list[tuple[int, int]]:
    """The reference trainer's merges for TEXT, split by the cl100k regex itself."""
    import regex

    from bpe.pretokenize import NAMED_PATTERNS

    words = Counter(piece.encode() for row in TEXT for piece in regex.findall(NAMED_PATTERNS["cl100k"], row))
    return train_reference(dict(words), vocab_size - 256)


def _merges_txt(directory: Path) -> list[tuple[int, int]]:
    from bpe.tokenizer import Tokenizer

    return [tuple(m) for m in Tokenizer.load(directory).merges]


def test_a_cold_start_says_it_compiles_and_bpe_warm_compiles_the_rest_ahead(data, tmp_path):
    """With a kernel it needs not compiled, the command says first that it compiles, trains
    correctly, and reports compiling apart from counting and merging. `bpe warm` then compiles what
    that run did not need, promising no duration it does not take (it reports the time it took),
    and afterwards neither a second warm nor a run with another pattern and tie-break, on two
    threads, or from the first run's tokenizer compiles anything."""
    env = cache_lacking(tmp_path, (MISSING_FOR_THE_RUN, *MISSING_FOR_WARM))
    done = subprocess.run(  # threads given: the compiled engine, not the path for small corpora
        [BPE, "train", str(data), "--vocab-size", "270", "--threads", "1", "--out", str(tmp_path / "tok")],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.startswith("bpe: compiling the kernels"), done.stderr[:500]
    manifest = json.loads((tmp_path / "tok" / "manifest.json").read_text())
    assert manifest["seconds"]["compile"] > 1 and manifest["seconds"]["count"] < manifest["seconds"]["compile"]
    assert "compile " in done.stdout and "first run of this version only" in done.stdout
    assert _merges_txt(tmp_path / "tok") == reference_merges(270)

    warm = subprocess.run([BPE, "warm"], capture_output=True, text=True, env=env, timeout=900)
    assert warm.returncode == 0, warm.stderr[-3000:]
    said = "bpe: compiling the kernels the cache lacks into " + str(tmp_path / "empty-kernel-cache")
    assert warm.stderr.startswith(said) and "minute" not in warm.stderr, warm.stderr
    assert re.match(r"compiled \d+ kernel\(s\) in [\d.]+ s", warm.stdout), warm.stdout
    compiled = {path.name.split("-")[0] + "-" for path in (tmp_path / "empty-kernel-cache").rglob("*.nbi")}
    assert compiled >= {MISSING_FOR_THE_RUN, *MISSING_FOR_WARM}, "warm left a kernel uncompiled"
    again = subprocess.run([BPE, "warm"], capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 0 and again.stderr == "" and again.stdout.startswith("kernels already compiled")
    runs = [
        ["--threads", "1"],
        ["--pattern", "o200k", "--tie-break", "ids", "--threads", "2"],
        ["--from", str(tmp_path / "tok"), "--threads", "1"],
    ]
    for n, options in enumerate(runs):
        out = tmp_path / f"tok{n}"
        run = subprocess.run(
            [BPE, "train", str(data), "--vocab-size", "280", *options, "--out", str(out)],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert run.returncode == 0, run.stderr[-2000:]
        assert "compiling" not in run.stderr and "first run of this version only" not in run.stdout
        assert json.loads((out / "manifest.json").read_text())["seconds"]["compile"] < 0.5


def test_a_built_package_carries_its_kernels_so_a_new_machine_compiles_nothing(built_wheel, data, tmp_path):
    """Building the package (what `pip install` runs: the wheel, tests/conftest.py `built_wheel`)
    compiles the kernels into it; installed in another directory with an empty kernel cache, both
    engines' first runs load them, compile nothing and learn the reference's merges."""
    assert "bpe: kernels compiled in" in built_wheel["output"], built_wheel["output"][-2000:]
    site = tmp_path / "site"
    with zipfile.ZipFile(built_wheel["path"]) as wheel:  # what pip does with a pure-Python wheel
        wheel.extractall(site)
    assert list((site / "bpe" / "engine" / "prebuilt").glob("*/engine/*.nbi")), "no kernels in the built package"

    env = {**os.environ, "PYTHONPATH": str(site), "BPE_KERNEL_CACHE": str(tmp_path / "new-machine-cache")}
    env.pop("BPE_PREBUILT_KERNELS", None)
    command = "import sys, bpe; from bpe.cli import main; print('from', bpe.__file__); sys.exit(main(sys.argv[1:]))"
    engines = [["--engine", "local", "--threads", "1"]]  # threads given: the compiled engine, not pure Python
    if _has("distributed"):
        engines.append(["--engine", "dask", "--workers", "2"])
    for n, engine in enumerate(engines):
        out = tmp_path / f"tok{n}"
        args = [sys.executable, "-c", command, "train", str(data), "--vocab-size", "270", *engine, "--out", str(out)]
        run = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
        assert run.returncode == 0, run.stderr[-3000:]
        assert run.stdout.startswith(f"from {site}"), run.stdout[:300]
        assert "compil" not in run.stderr and "compile" not in run.stdout, (engine, run.stderr[-2000:])
        assert _merges_txt(out) == reference_merges(270), engine


@pytest.mark.parametrize("pattern", ["gpt2", "cl100k", "o200k", "whitespace"])
def test_counting_has_one_compiled_variant_whatever_holds_the_text(data, pattern):
    """numba compiles a kernel once per type of its arguments, read-only arrays apart. A file's
    batches came writable and Python strings (`train(texts=...)`, a Dask task's texts) read-only,
    and `bpe warm` compiled the first: a user's first in-memory run of a pattern compiled its
    counting kernel again (half a minute). Both sources must reach one variant."""
    script = (
        "import sys; from bpe.counting import WordCounter, count_shards; from bpe.inputs.discover import discover; "
        "from bpe.pretokenize import Pretokenizer; from bpe.engine.count import PIECE_COUNTERS; "
        "from bpe.engine.scanner import SCANNER_IDS; p = Pretokenizer(sys.argv[2]); "
        "c = WordCounter(p); c.add_texts(['text held in memory, 12 words or so.']); "
        "held_out = WordCounter(p, holdout=0.5); held_out.add_texts(['some', 'rows', 'are', 'held', 'out']); "
        "count_shards(discover([sys.argv[1]]), p, threads=1); "
        "print(len(PIECE_COUNTERS[SCANNER_IDS[sys.argv[2]]].signatures))"
    )
    command = [sys.executable, "-c", script, str(data), pattern]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1"], done.stdout


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None

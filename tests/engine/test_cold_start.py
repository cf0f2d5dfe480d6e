"""Cold start: what a new install, image or worker pays before its first tokenizer.

Installing compiles nothing (the package has no build step). A run compiles first the kernel
groups it needs that the machine's kernel cache lacks (`bpe.training.warm.compile_ahead`), on every core,
saying so at least every few seconds; every kernel it then calls must be one its groups hold, or
it would compile it in silence, mid-run. The tests below start from a copy of this machine's cache
that lacks a group or two: the path is the same as from nothing, group by group, in seconds.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import tomllib
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import cache_lacking, write_parquet
from tests.reference import train_reference

BPE = str(Path(sys.executable).parent / "bpe")
ROOT = Path(__file__).resolve().parents[2]
TEXT = ["the cat sat on the mat"] * 100
SILENCE = 10.0  # the longest a first run may go without a line while it compiles


@pytest.fixture
def data(tmp_path) -> Path:
    return write_parquet(tmp_path / "data" / "part.parquet", TEXT)


def reference_merges(vocab_size: int, pattern: str) -> list[tuple[int, int]]:
    """The reference trainer's merges for TEXT, split by the named pattern's regex itself."""
    import regex

    from bpe.pretokenize import NAMED_PATTERNS

    words = Counter(piece.encode() for row in TEXT for piece in regex.findall(NAMED_PATTERNS[pattern], row))
    return train_reference(dict(words), vocab_size - 256)


def _merges(directory: Path) -> list[tuple[int, int]]:
    from bpe.tokenizer import Tokenizer

    return [tuple(m) for m in Tokenizer.load(directory).merges]


def timed_lines(command: list[str], env: dict, timeout: float = 600) -> tuple[int, list[tuple[float, str]], str]:
    """Run `command`; (exit code, each line of its stderr with the second it came, its stdout)."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    started, lines = time.monotonic(), []
    deadline = started + timeout
    for line in process.stderr:
        lines.append((time.monotonic() - started, line.rstrip("\n")))
        assert time.monotonic() < deadline, f"{command} took more than {timeout} s"
    output = process.stdout.read()
    return process.wait(timeout=60), lines, output


@pytest.mark.cold
def test_a_first_run_compiles_its_groups_first_and_says_so_at_least_every_few_seconds(data, tmp_path):
    """With its counting group missing, `bpe train` says first what it compiles, then never falls
    silent for long while it compiles, trains the reference's merges and reports compiling apart
    from counting and merging; a second run compiles nothing and says nothing of it."""
    env = cache_lacking(tmp_path, ("count o200k",), ("count._count_o200k-",))
    command = [BPE, "train", str(data), "--pattern", "o200k", "--vocab-size", "270", "--threads", "1"]
    code, lines, output = timed_lines([*command, "--out", str(tmp_path / "tok")], env)
    said = "\n".join(line for _, line in lines)
    assert code == 0, said[-3000:]
    assert lines and lines[0][1].startswith("bpe: compiling ") and "count o200k" in lines[0][1], said[:500]
    compiling = [t for t, line in lines if line.startswith("bpe: compil")]
    gaps = [b - a for a, b in zip(compiling, compiling[1:])]
    assert compiling[-1] == lines[-1][0] or "compiled" in said
    assert max(gaps, default=0.0) < SILENCE, said
    assert "bpe: compiling the kernels for this version" not in said, "a kernel compiled outside its group"
    manifest = json.loads((tmp_path / "tok" / "manifest.json").read_text())
    assert manifest["seconds"]["compile"] > 0.5 and "first run of this version only" in output
    assert _merges(tmp_path / "tok") == reference_merges(270, "o200k")

    code, lines, output = timed_lines([*command, "--out", str(tmp_path / "again")], env)
    assert code == 0 and not [line for _, line in lines if "compil" in line], lines
    assert json.loads((tmp_path / "again" / "manifest.json").read_text())["seconds"]["compile"] < 0.5


@pytest.mark.cold
def test_bpe_warm_compiles_what_the_cache_lacks_and_lists_the_groups(tmp_path):
    """`bpe warm GROUP` compiles a missing group (saying what each took), a second time finds it
    compiled, `--list` tells which groups the cache holds, and an unknown group is one line."""
    env = cache_lacking(tmp_path, ("count whitespace",), ("count._count_whitespace-",))
    listed = subprocess.run([BPE, "warm", "--list"], capture_output=True, text=True, env=env, timeout=120)
    assert listed.returncode == 0 and "count whitespace\tnot compiled" in listed.stdout, listed.stdout
    warm = subprocess.run([BPE, "warm", "count whitespace"], capture_output=True, text=True, env=env, timeout=600)
    assert warm.returncode == 0, warm.stderr[-2000:]
    assert warm.stderr.startswith("bpe: compiling 1 kernel group") and "count whitespace" in warm.stdout
    assert list((tmp_path / "kernel-cache").rglob("count._count_whitespace-*.nbi")), "warm compiled nothing"
    again = subprocess.run([BPE, "warm", "count whitespace"], capture_output=True, text=True, env=env, timeout=120)
    assert again.returncode == 0 and again.stderr == "" and again.stdout.startswith("kernels already compiled")
    listed = subprocess.run([BPE, "warm", "--list"], capture_output=True, text=True, env=env, timeout=120)
    assert "count whitespace\tcompiled" in listed.stdout
    unknown = subprocess.run([BPE, "warm", "count klingon"], capture_output=True, text=True, env=env, timeout=120)
    assert unknown.returncode != 0 and unknown.stderr.count("\n") == 1 and "count klingon" in unknown.stderr


# What runs of each path load, as Python kernels with their argument types: every kernel a run calls
# must be among those its groups load (`bpe.training.warm.groups_of_run`), or a first run compiles it after
# the compiling said it was done: mid-run, with no line saying so, and on a Dask worker unseen.
KERNELS_LOADED = """
import json, sys
from numba.core.registry import CPUDispatcher
import bpe.training.warm

def loaded():
    found = set()
    for name, module in list(sys.modules.items()):
        if not name.startswith("bpe.engine"):
            continue
        for attr, value in vars(module).items():
            if isinstance(value, CPUDispatcher):
                found |= {f"{name}.{attr}{signature}" for signature in value.signatures}
    return sorted(found)

asked = []  # the groups the run asks to have compiled first
compile_ahead = bpe.training.warm.compile_ahead

def recording(names, *args, **kwargs):
    asked.extend(name for name in names if name not in asked)
    return compile_ahead(names, *args, **kwargs)

bpe.training.warm.compile_ahead = recording
import bpe.training.trainer
bpe.training.trainer.compile_ahead = recording
"""

RUNS = {
    "local, one thread": ({"threads": 1}, {}),
    "local, threads": ({"threads": 2, "pattern": "gpt2"}, {}),
    "from a tokenizer": ({"threads": 1, "tie_break": "ids"}, {"base": True}),
    "superwords": ({"threads": 1, "superwords": True, "transition": 262}, {}),
    "parity": ({"threads": 1, "parity": True}, {"languages": True}),
    "a small text of long words": ({"threads": None}, {"texts": ["ab" * 700 + " the cat"]}),
    # more distinct words than a new counting table holds: it grows
    "a text of many words": ({"threads": 1}, {"texts": [" ".join(f"w{chr(19968 + i)}" for i in range(20_000))]}),
}


@pytest.mark.parametrize("run", list(RUNS))
def test_every_kernel_a_run_calls_is_in_the_groups_it_compiles_first(run, data, tmp_path):
    """The groups a run asks to have compiled before it starts load, in a process of their own,
    every kernel the run then calls, with the same argument types (a read-only array or a literal
    is a kernel of its own)."""
    options, kind = RUNS[run]
    base = tmp_path / "base"
    if kind.get("base"):
        subprocess.run([BPE, "train", str(data), "--vocab-size", "262", "--out", str(base)], check=True, timeout=600)
    files = {"eng": str(data), "deu": str(data)} if kind.get("languages") else [str(data)]
    given = f"texts={kind['texts']!r}" if "texts" in kind else f"files={files!r}"
    script = (
        KERNELS_LOADED
        + f"""
from bpe import train
options = {options!r}
base = {str(base) if kind.get("base") else None!r}
tok = train({given}, vocab_size=280, base=base, **options)
print(json.dumps({{"groups": asked, "loaded": loaded()}}))
"""
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    ran = json.loads(done.stdout.splitlines()[-1])
    groups = ran["groups"]
    script = (
        KERNELS_LOADED
        + f"""
from bpe.training.warm import GROUPS
for name in {groups!r}:
    GROUPS[name].run()
print(json.dumps(loaded()))
"""
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    outside = sorted(set(ran["loaded"]) - set(json.loads(done.stdout.splitlines()[-1])))
    assert not outside, f"kernels the run calls that its groups {groups} leave out: {outside}"


@pytest.mark.services
def test_a_dask_runs_driver_and_workers_call_only_kernels_of_its_groups(data, tmp_path):
    """On the Dask engine the driver calls only the kernels of the groups it compiles for itself,
    and every worker only those of the groups it loads as it becomes ready."""
    pytest.importorskip("distributed")
    script = (
        KERNELS_LOADED
        + f"""
from distributed import Client, LocalCluster
from bpe import train
from bpe.training.warm import GROUPS

with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \\
        Client(cluster) as client:
    train(files=[{str(data)!r}], vocab_size=280, engine="dask", client=client)
    on_workers = client.run(loaded)
driver = loaded()
groups = list(asked)  # the driver's own, with a client given; the workers load theirs
groups += [name for name in ("word tables", "count cl100k") if name not in groups]
for name in groups:
    GROUPS[name].run()
print(json.dumps({{
    "groups": groups, "workers": sorted(set().union(*on_workers.values())), "driver": driver, "groups_load": loaded()
}}))
"""
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    for side in ("driver", "workers"):
        outside = sorted(set(found[side]) - set(found["groups_load"]))
        assert not outside, f"kernels the {side} call that the groups {found['groups']} leave out: {outside}"


def test_building_the_package_compiles_nothing(built_wheel):
    """Building (what `pip install` runs) needs no numba and compiles no kernel: the wheel holds
    none, and a machine's first run compiles what it needs (above)."""
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    assert not [r for r in requires if r.split(">")[0].split("=")[0].strip() in ("numba", "numpy", "pyarrow")]
    with zipfile.ZipFile(built_wheel["path"]) as wheel:
        compiled = [name for name in wheel.namelist() if name.endswith((".nbi", ".nbc"))]
    assert not compiled, compiled[:5]
    assert "bpe: " not in built_wheel["output"], built_wheel["output"][-2000:]  # the build step said "bpe: compiling"


@pytest.mark.parametrize("pattern", ["gpt2", "cl100k", "o200k", "whitespace"])
def test_counting_has_one_compiled_variant_whatever_holds_the_text(data, pattern):
    """numba compiles a kernel once per type of its arguments, read-only arrays apart. A file's
    batches came writable and Python strings (`train(texts=...)`, a Dask task's texts) read-only,
    and `bpe warm` compiled the first: a user's first in-memory run of a pattern compiled its
    counting kernel again (half a minute). Both sources must reach one variant."""
    script = (
        "import sys; from bpe.training.counting import WordCounter, count_shards; "
        "from bpe.inputs.discover import discover; "
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


def test_every_kernel_lives_in_the_engine_whose_source_keys_the_kernel_cache():
    kernel_files = [p for p in (ROOT / "bpe").rglob("*.py") if "@njit" in p.read_text()]
    assert kernel_files and {p.parent for p in kernel_files} == {ROOT / "bpe" / "engine"}
    import numba

    import bpe.engine.kernel_cache  # noqa: F401  (sets the cache directory)

    digest = hashlib.sha256()
    for path in sorted((ROOT / "bpe" / "engine").glob("*.py")):
        digest.update(path.name.encode() + path.read_bytes())
    assert numba.config.CACHE_DIR.endswith(digest.hexdigest()[:16])


def test_a_script_that_imports_numba_first_keeps_the_kernel_cache(tmp_path):
    """numba, imported before this package, reads its settings again from the environment when
    the environment has changed since (importing `bpe` sets a variable): the kernel cache must
    survive that, or kernels compile beside the source and group markers land in the working
    directory (`groups/`), found there by no later run."""
    script = """
import numba
import bpe
from bpe.engine.kernel_cache import kernel_cache_base, kernel_cache_name
tok = bpe.train(["low lower lowest " * 50], vocab_size=260, threads=1)
@numba.njit
def one():
    return 1
one()
print(numba.config.CACHE_DIR == f"{kernel_cache_base()}/{kernel_cache_name()}")
"""
    fresh = {name: value for name, value in os.environ.items() if not name.startswith("NUMBA_")}  # a user's shell
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, env=fresh, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    left = list(tmp_path.iterdir())
    assert done.stdout.split() == ["True"] and not (tmp_path / "groups").exists(), (done.stdout, left)


def test_a_run_on_cached_kernels_loads_none_of_numbas_compiler_and_a_later_compile_still_works(data):
    """Kernels loaded from the cache need numba's runtime, not its compiler: a run that finds
    every kernel cached trains the reference's merges without importing the implementations a
    compile registers (a fifth of a second of every run's start). A kernel compiled later in the
    same process, which needs them, still compiles and runs."""
    script = f"""
import sys
import bpe
tok = bpe.train(files=[{str(data)!r}], vocab_size=270, pattern="o200k", threads=2)
compiler_only = ("numba.np.npyimpl", "numba.np.random.generator_methods", "numba.np.polynomial.polynomial_functions")
registered = sorted(m for m in compiler_only if m in sys.modules)
import numba
import numpy as np

@numba.njit
def norm(values):
    return np.sqrt(np.sum(values * values))

print(repr(([list(m) for m in tok.merges], registered, float(norm(np.array([3.0, 4.0]))))))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    merges, registered, norm = eval(done.stdout.splitlines()[-1])
    assert [tuple(m) for m in merges] == reference_merges(270, "o200k")
    assert registered == [], f"loading cached kernels imported numba's compiler registries: {registered}"
    assert norm == 5.0

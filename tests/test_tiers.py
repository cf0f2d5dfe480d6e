"""The tiers: the core (`bpe`'s loose modules and its packages engine, languages, inputs, formats,
tokenizer, evaluation, training, cli) <- `bpe.distributed` <- `bpe.pipeline` <- flows and tasks.

Imports point one way, between modules and between packages; the library and `bpe train` run
without Prefect, Dask, PyYAML or matplotlib; a command that needs a missing extra says which one;
the wheel ships the flows, tasks and demo configuration inside the package and installs no generic
top-level package.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import write_parquet

REPO = Path(__file__).resolve().parent.parent
PIPELINE_ONLY = ("prefect", "yaml", "matplotlib")
DASK = ("dask", "distributed")
UPPER_TIERS = ("bpe.distributed", "bpe.pipeline", "bpe.flows", "bpe.tasks")
CORE_PACKAGES = ("engine", "languages", "inputs", "formats", "tokenizer", "evaluation", "training", "cli")

# The one place where the core reaches up, inside a function and behind `require_extra`: train()
# and count() dispatching to the Dask engine. The `bpe` command finds the pipeline's subcommands
# through the `bpe.commands` entry point group, without importing the pipeline.
ALLOWED_UPWARD = {
    "bpe/training/trainer.py": ("bpe.distributed.driver", "bpe.distributed.counts_out"),
}
# The core's one drawing, behind `require_extra("plot", ...)`: `bpe eval --plot` imports matplotlib
# (the [plot] extra) inside the function that draws.
ALLOWED_EXTRAS = {
    "bpe/evaluation/report.py": ("matplotlib",),
}


def imports(path: Path) -> list[tuple[str, bool]]:
    """(module imported, at module level?) for every import in a file."""
    tree = ast.parse(path.read_text())
    top_level = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, id(node) in top_level) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
            found += [(name, id(node) in top_level) for name in [node.module, *names]]
    return found


def modules(folder: str) -> list[Path]:
    return sorted((REPO / folder).rglob("*.py"))


def core_modules() -> list[Path]:
    return sorted((REPO / "bpe").glob("*.py")) + [path for name in CORE_PACKAGES for path in modules(f"bpe/{name}")]


def reaches(name: str, targets: tuple[str, ...]) -> bool:
    return any(name == t or name.startswith(t + ".") for t in targets)


def test_the_core_imports_neither_dask_nor_prefect_nor_an_upper_tier():
    for path in core_modules():
        where = str(path.relative_to(REPO))
        for name, at_top in imports(path):
            extra = not at_top and reaches(name, ALLOWED_EXTRAS.get(where, ()))
            assert not reaches(name, PIPELINE_ONLY + DASK) or extra, f"{where} imports {name}"
            if reaches(name, UPPER_TIERS):
                assert not at_top and reaches(name, ALLOWED_UPWARD.get(where, ())), f"{where} imports {name}"


def test_the_engine_imports_only_itself_numpy_numba_and_the_standard_library():
    """The compiled kernels' package is the bottom tier: counting threads, input files, settings,
    progress and the `regex` module's character tables live above it and come in as arguments."""
    allowed = set(sys.stdlib_module_names) | {"__future__", "numpy", "numba", "llvmlite"}
    for path in modules("bpe/engine"):
        for name, _ in imports(path):
            assert reaches(name, ("bpe.engine",)) or name.split(".")[0] in allowed, f"{path.name} imports {name}"


def import_graph(top_level: bool = False) -> dict[str, set[str]]:
    """module -> the modules of `bpe/` it imports, counting every import (inside functions and under
    TYPE_CHECKING too). With `top_level`, each module stands for its top-level package or module
    (`bpe.training.plan` is `bpe.training`), less the one allowed lazy import (`ALLOWED_UPWARD`)."""
    package = {}
    for path in (REPO / "bpe").rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        package[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    allowed = {".".join(Path(where).with_suffix("").parts): names for where, names in ALLOWED_UPWARD.items()}

    def top(module: str) -> str:
        return ".".join(module.split(".")[:2]) if top_level else module

    graph: dict[str, set[str]] = {}
    for module, path in package.items():
        targets = graph.setdefault(top(module), set())
        for name, _ in imports(path):
            if top_level and reaches(name, allowed.get(module, ())):
                continue
            while name and name not in package:
                name = name.rpartition(".")[0]
            if name and top(name) not in (top(module), "bpe"):
                targets.add(top(name))
    return graph


def circle_in(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of `graph` (its modules, the first repeated at the end), or None."""
    state: dict[str, str] = {}
    path_so_far: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = "open"
        path_so_far.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == "open":
                return path_so_far[path_so_far.index(target) :] + [target]
            if target not in state and (found := visit(target)):
                return found
        path_so_far.pop()
        state[module] = "done"
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return None


def test_no_module_of_the_package_imports_one_that_imports_it_back():
    """No import circle anywhere in `bpe/`: each module can be read, and loaded, before those
    that use it."""
    circle = circle_in(import_graph())
    assert circle is None, "import circle: " + " -> ".join(circle or [])


def test_no_top_level_package_imports_one_that_imports_it_back():
    """Nor between `bpe`'s packages and loose modules (`bpe.formats` -> `bpe.schema` ->
    `bpe.formats` was one): the packages stand in floors, read bottom up. The one exception is
    `train(engine="dask")` reaching the Dask engine inside a function (`ALLOWED_UPWARD`); the Dask
    engine counts and loads kernels with the training package's modules."""
    graph = import_graph(top_level=True)
    assert {"bpe.training", "bpe.languages", "bpe.evaluation"} <= set(graph)  # the measurement sees the packages
    circle = circle_in(graph)
    assert circle is None, "import circle between packages: " + " -> ".join(circle or [])


def test_bpe_keeps_few_loose_modules_and_a_package_per_concept():
    """At most 10 modules at `bpe/`'s top level (those the whole library shares: errors, schema,
    storage, ...); training, languages and evaluation are packages. Each package is declared for
    the wheel in pyproject.toml."""
    loose = sorted(p.name for p in (REPO / "bpe").glob("*.py"))
    assert len(loose) <= 10, loose
    packages = sorted(
        ".".join(p.parent.relative_to(REPO).parts)
        for p in (REPO / "bpe").rglob("__init__.py")
        if "__pycache__" not in str(p)
    )
    declared = (REPO / "pyproject.toml").read_text()
    for name in packages:
        assert f'"{name}"' in declared, f"{name} is not in pyproject.toml's packages"


def test_production_code_never_imports_the_textbook_trainers():
    """`bpe.training._educational` is to read and to test against, as tiktoken's `_educational.py`."""
    for path in (REPO / "bpe").rglob("*.py"):
        for name, _ in imports(path):
            assert not reaches(name, ("bpe.training._educational",)), f"{path.relative_to(REPO)} imports {name}"


def test_the_dask_engine_never_imports_prefect_or_the_pipeline():
    for path in modules("bpe/distributed"):
        for name, _ in imports(path):
            assert not reaches(name, PIPELINE_ONLY + UPPER_TIERS[1:]), f"{path.name} imports {name}"


def test_the_pipeline_imports_no_flow_or_task():
    for path in modules("bpe/pipeline"):
        for name, _ in imports(path):
            assert not reaches(name, ("bpe.flows", "bpe.tasks", "flows", "tasks")), f"{path.name} imports {name}"


def test_import_bpe_loads_neither_prefect_nor_dask():
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import bpe; bpe.train; bpe.Tokenizer"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    loaded = {line.split("|")[-1].strip().split(".")[0] for line in done.stderr.splitlines() if "|" in line}
    assert "numpy" in loaded and "regex" in loaded  # the measurement sees real imports
    # nor numba nor pyarrow: they load when a run needs them (a small text file's does not, bpe.training.small_corpus)
    heavy = {"prefect", "dask", "distributed", "matplotlib", "numba", "pyarrow"}
    assert not loaded & heavy, sorted(loaded & heavy)


def test_the_command_and_its_errors_load_no_kernels_until_a_command_needs_them():
    """`bpe --help` (the command's module, its settings and errors) loads neither numpy nor numba:
    the engine's errors and tie-breaks sit in modules that set up no kernel cache."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, bpe.cli, bpe.errors, bpe.training.settings; print(' '.join(sorted(sys.modules)))",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    loaded = set(done.stdout.split())
    assert {"bpe.cli", "bpe.engine.errors"} <= loaded  # the measurement sees real imports
    assert not loaded & {"numpy", "numba", "bpe.engine.kernel_cache"}, sorted(loaded & {"numpy", "numba"})


WITHOUT_EXTRAS = """
import sys
for name in {blocked!r}:
    sys.modules[name] = None  # `import name` now fails as if it were not installed
from bpe.cli import main
sys.exit(main(sys.argv[1:]))
"""


def bpe_without(blocked: tuple[str, ...], *args: str, cwd: Path) -> subprocess.CompletedProcess:
    code = WITHOUT_EXTRAS.format(blocked=blocked)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=600
    )


def test_bpe_train_encode_decode_work_without_the_extras(tmp_path):
    data = write_parquet(tmp_path / "data.parquet", ["hello world, hello tokenizers"] * 50 + ["the end"])
    blocked = PIPELINE_ONLY + DASK
    done = bpe_without(blocked, "train", str(data), "--vocab-size", "280", "--out", "tok", "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "tok" / "tokenizer.json").exists()
    encoded = bpe_without(blocked, "encode", "tok", "hello world", cwd=tmp_path)
    assert encoded.returncode == 0, encoded.stderr[-3000:]
    decoded = bpe_without(blocked, "decode", "tok", *encoded.stdout.split(), cwd=tmp_path)
    assert decoded.stdout == "hello world\n"


def test_a_command_needing_a_missing_extra_names_it_in_one_line(tmp_path):
    data = write_parquet(tmp_path / "data.parquet", ["hello world"])
    done = bpe_without(
        DASK, "train", str(data), "--vocab-size", "280", "--out", "tok", "--engine", "dask", cwd=tmp_path
    )
    assert done.returncode == 1 and not (tmp_path / "tok").exists()
    assert done.stderr.count("\n") == 1 and "[dask] extra" in done.stderr and "pip install" in done.stderr
    for command in (["demo"], ["versions", "artifacts/demo"], ["deploy"], ["cluster", "status"]):
        done = bpe_without(("prefect",), *command, cwd=tmp_path)
        assert done.returncode == 1, command
        assert done.stderr.startswith(f"bpe: error: bpe {command[0]} needs the [pipeline] extra"), done.stderr
        assert done.stderr.count("\n") == 1
    assert not (tmp_path / "demo-data").exists()  # refused before doing anything


def test_a_missing_extra_names_the_install_that_works_here(tmp_path):
    """No package index knows `bpe-trainer`, and after the Quick start the environment's pip is not
    the shell's: from a clone (an editable install) the error names this environment's pip and the
    checkout (relative from inside it), and from an installed package it names the package, whose
    extras pip then adds to the installed copy."""
    import shlex

    pip = Path(sys.executable).parent / "pip"

    def program(word: str, cwd: Path) -> Path:  # what a shell in `cwd` runs for the command's first word
        return (cwd / word).resolve() if os.sep in word else Path(shutil.which(word)).resolve()

    train = (
        "train",
        str(tmp_path / "x.txt"),
        "--vocab-size",
        "280",
        "--out",
        str(tmp_path / "tok"),
        "--engine",
        "dask",
    )
    (tmp_path / "x.txt").write_text("hello world")
    for cwd in (tmp_path, REPO):
        done = bpe_without(DASK, *train, cwd=cwd)
        assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
        words = shlex.split(done.stderr.strip().rsplit("): ", 1)[1])
        assert program(words[0], cwd) == pip.resolve() and words[1:3] == ["install", "-e"], words
        checkout, extra = words[3].rsplit("[", 1)
        assert (cwd / checkout).resolve() == REPO and extra == "dask]", words
    assert not (tmp_path / "tok").exists()

    # An installed package (a wheel, or a directory copied in): pip records no editable origin.
    site = tmp_path / "site" / "bpe_trainer-0.1.0.dist-info"
    site.mkdir(parents=True)
    (site / "METADATA").write_text("Metadata-Version: 2.1\nName: bpe-trainer\nVersion: 0.1.0\n")
    (site / "RECORD").write_text("")
    (site / "direct_url.json").write_text(
        '{"url": "file:///tmp/bpe_trainer-0.1.0-py3-none-any.whl", "archive_info": {}}'
    )
    code = "from bpe.install import install_extra; print(install_extra('s3'))"
    env = {**os.environ, "PYTHONPATH": f"{site.parent}{os.pathsep}{REPO}"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env)
    words = shlex.split(done.stdout)
    assert program(words[0], tmp_path) == pip.resolve() and words[1:] == ["install", "bpe-trainer[s3]"], done


@pytest.fixture(scope="module")
def wheel(built_wheel) -> zipfile.ZipFile:
    """The wheel `pip install .` would install (tests/conftest.py `built_wheel`, shared with the
    cold-start test that installs it)."""
    return zipfile.ZipFile(built_wheel["path"])


def test_the_wheel_ships_flows_tasks_and_demo_config_inside_the_package(wheel):
    names = wheel.namelist()
    top_level = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert top_level == {"bpe"}, top_level
    for shipped in (
        "bpe/flows/train_bpe.py",
        "bpe/flows/deploy.py",
        "bpe/tasks/data.py",
        "bpe/conf/demo.yaml",
        "bpe/engine/word_table.py",
        "bpe/inputs/read.py",
        "bpe/distributed/driver.py",
        "bpe/pipeline/store.py",
    ):
        assert shipped in names, shipped
    sources = {f"bpe/{p.relative_to(REPO / 'bpe').as_posix()}" for p in (REPO / "bpe").rglob("*.py")}
    missing = sorted(sources - set(names))
    assert not missing, f"modules of the source tree missing from the wheel: {missing}"


def test_the_wheel_declares_the_extras_by_tier(wheel):
    (metadata,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    requires = [line for line in wheel.read(metadata).decode().splitlines() if line.startswith("Requires-Dist:")]
    core = [r for r in requires if "extra ==" not in r]
    assert not any(
        reaches(
            r.split()[1].split(">")[0].split("[")[0].lower(), ("prefect", "dask", "distributed", "matplotlib", "pyyaml")
        )
        for r in core
    ), core
    assert any(r.startswith("Requires-Dist: distributed") and 'extra == "dask"' in r for r in requires)
    assert any(r.startswith("Requires-Dist: prefect") and 'extra == "pipeline"' in r for r in requires)

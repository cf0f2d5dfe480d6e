"""Build step: compile the kernels when the package is built or installed, so that `pip install`
leaves ready machine code in bpe/engine/prebuilt/ and a new user's first run does not compile.

Everything else is declared in pyproject.toml. The kernels are compiled for the CPU that builds
the package; on another CPU numba ignores them and compiles on first use, as without this step.
BPE_SKIP_KERNEL_BUILD=1 skips it (a quick build for packaging checks).
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SOURCE_ROOT = Path(__file__).resolve().parent


def compile_kernels(package_root: Path) -> None:
    """Run `bpe warm` against the package under `package_root` into a scratch cache, then move the
    result to `package_root/bpe/engine/prebuilt/`, replacing older builds. Kernels this machine's
    kernel cache already holds for the same engine source and numba version are copied, not
    compiled again (a rebuild or reinstall takes seconds)."""
    prebuilt = package_root / "bpe" / "engine" / "prebuilt"
    with tempfile.TemporaryDirectory(prefix="bpe-kernels-") as scratch:
        env = dict(os.environ, BPE_KERNEL_CACHE=scratch, BPE_PREBUILT_KERNELS="0", PYTHONDONTWRITEBYTECODE="1",
                   PYTHONPATH=os.pathsep.join([str(package_root), os.environ.get("PYTHONPATH", "")]))  # fmt: skip
        started = time.perf_counter()
        reused = seed_from_machine_cache(Path(scratch), env)
        print(f"bpe: compiling the kernels into the package{reused} (about half a minute on 2 cores from nothing)",
              flush=True)  # fmt: skip
        subprocess.run([sys.executable, "-c", "from bpe.warm import warm_kernels; warm_kernels()"],
                       env=env, cwd=scratch, check=True)  # fmt: skip
        built = [p for p in Path(scratch).iterdir() if p.is_dir()]
        if len(built) != 1:
            raise RuntimeError(f"expected one kernel cache in {scratch}, found {[p.name for p in built]}")
        shutil.rmtree(prebuilt, ignore_errors=True)
        prebuilt.mkdir(parents=True)
        shutil.copytree(built[0], prebuilt / built[0].name)
        print(f"bpe: kernels compiled in {time.perf_counter() - started:.1f} s into {prebuilt}", flush=True)


def seed_from_machine_cache(scratch: Path, env: dict) -> str:
    """Copy into `scratch` this machine's cached kernels of the same key (engine source and numba
    version: `bpe.engine.kernel_cache.kernel_cache_name`), if it has them; says so for the build's
    message."""
    ask = (
        "import os; from bpe.engine import kernel_cache as k; "
        "print(os.path.join(k.kernel_cache_base(), k.kernel_cache_name()))"
    )
    machine_env = {**env, "BPE_KERNEL_CACHE": os.environ.get("BPE_KERNEL_CACHE", "")}
    where = subprocess.run([sys.executable, "-c", ask], env=machine_env, cwd=scratch, capture_output=True, text=True)
    found = Path(where.stdout.strip()) if where.returncode == 0 and where.stdout.strip() else None
    if found is None or not list(found.glob("*/*.nbi")):
        return ""
    shutil.copytree(found, scratch / found.name)
    return f" (reusing those cached in {found})"


class BuildWithKernels(build_py):
    """`build_py`, then the kernels: into the build directory for a wheel, into the source tree
    for an editable install (where the package is imported from)."""

    def run(self) -> None:
        super().run()
        if os.environ.get("BPE_SKIP_KERNEL_BUILD") == "1":
            return
        root = SOURCE_ROOT if getattr(self, "editable_mode", False) else Path(self.build_lib).resolve()
        compile_kernels(root)


setup(cmdclass={"build_py": BuildWithKernels})

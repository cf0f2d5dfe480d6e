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
    result to `package_root/bpe/engine/prebuilt/`, replacing older builds."""
    prebuilt = package_root / "bpe" / "engine" / "prebuilt"
    with tempfile.TemporaryDirectory(prefix="bpe-kernels-") as scratch:
        env = dict(os.environ, BPE_KERNEL_CACHE=scratch, BPE_PREBUILT_KERNELS="0", PYTHONDONTWRITEBYTECODE="1",
                   PYTHONPATH=os.pathsep.join([str(package_root), os.environ.get("PYTHONPATH", "")]))  # fmt: skip
        started = time.perf_counter()
        print("bpe: compiling the kernels into the package (about half a minute on 2 cores)", flush=True)
        subprocess.run([sys.executable, "-c", "from bpe.warm import warm_kernels; warm_kernels()"],
                       env=env, cwd=scratch, check=True)  # fmt: skip
        built = [p for p in Path(scratch).iterdir() if p.is_dir()]
        if len(built) != 1:
            raise RuntimeError(f"expected one kernel cache in {scratch}, found {[p.name for p in built]}")
        shutil.rmtree(prebuilt, ignore_errors=True)
        prebuilt.mkdir(parents=True)
        shutil.copytree(built[0], prebuilt / built[0].name)
        print(f"bpe: kernels compiled in {time.perf_counter() - started:.1f} s into {prebuilt}", flush=True)


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

"""Where compiled kernels are cached, set up before any kernel is defined: every module of this
package that defines kernels imports this one first. Kernels are cached per version of this
folder's source and of numba; the first import on a machine seeds the cache from the copies the
package build compiled into `prebuilt/`.
"""

import hashlib
import os
import shutil
import uuid
from pathlib import Path

ENGINE_DIR = Path(__file__).parent
PREBUILT_DIR = ENGINE_DIR / "prebuilt"


def kernel_cache_name() -> str:
    """This version of the kernels: numba's version and a digest of this folder's source. numba
    keys a cached kernel by its own file only, so a kernel could otherwise keep a stale copy of a
    helper it inlines from another file."""
    import numba

    digest = hashlib.sha256()
    for path in sorted(ENGINE_DIR.glob("*.py")):
        digest.update(path.name.encode() + path.read_bytes())
    return f"{numba.__version__}-{digest.hexdigest()[:16]}"


def kernel_cache_base() -> str:
    """Where compiled kernels are kept: BPE_KERNEL_CACHE, or ~/.cache/bpe/kernels."""
    cache_home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.environ.get("BPE_KERNEL_CACHE") or os.path.join(cache_home, "bpe", "kernels")


def seed_from_prebuilt(prebuilt: Path, cache_dir: Path) -> int:
    """Copy the kernels compiled when the package was built into the cache, each file that the
    cache lacks, under a temporary name then renamed (processes starting together do not see half
    a file). Returns how many files were copied. numba itself skips any kernel compiled for another
    CPU and compiles it here."""
    if not prebuilt.is_dir():
        return 0
    copied = 0
    for source in prebuilt.rglob("*"):
        target = cache_dir / source.relative_to(prebuilt)
        if not source.is_file() or target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}")
        shutil.copyfile(source, temporary)
        os.replace(temporary, target)
        copied += 1
    return copied


def _use_package_locator() -> None:
    """Cache this package's kernels under `<cache>/engine/` wherever the package is installed
    (numba's own locator names the folder after the source's absolute path), so kernels compiled
    in a build directory load from site-packages."""
    from numba.core import caching, config

    class PackageCacheLocator(caching.UserProvidedCacheLocator):
        def __init__(self, py_func, py_file):
            super().__init__(py_func, py_file)
            self._cache_path = os.path.join(config.CACHE_DIR, ENGINE_DIR.name)

        @classmethod
        def from_function(cls, py_func, py_file):
            if Path(py_file).resolve().parent != ENGINE_DIR.resolve():
                return None
            return super().from_function(py_func, py_file)

    locators = caching.CacheImpl._locator_classes
    if not any(locator.__name__ == PackageCacheLocator.__name__ for locator in locators):
        locators.insert(0, PackageCacheLocator)


def _use_kernel_cache() -> None:
    """Point numba at this version's cache directory, seeded from `prebuilt/` unless
    BPE_PREBUILT_KERNELS=0. Runs before any kernel is defined; every process (Dask workers too)
    derives the same directory."""
    import numba

    name = kernel_cache_name()
    numba.config.CACHE_DIR = os.path.join(kernel_cache_base(), name)
    _use_package_locator()
    if os.environ.get("BPE_PREBUILT_KERNELS", "1") != "0":
        try:
            seed_from_prebuilt(PREBUILT_DIR / name, Path(numba.config.CACHE_DIR))
        except OSError:  # a read-only or full cache: numba compiles as it would without a prebuilt copy
            pass


_use_kernel_cache()
from bpe.engine.compilation import numba_imported  # noqa: E402  (after the cache is set: no kernel compiles before)

numba_imported()

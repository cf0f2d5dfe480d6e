"""Where compiled kernels are cached, set up before any kernel is defined: every module of this
package that defines kernels imports this one first. Kernels are cached per version of this
folder's source and of numba, and numba keys each by the CPU it was compiled for. Nothing is
compiled when the package is installed: a run compiles what the cache lacks first (`bpe.training.warm`).
"""

import hashlib
import os
from pathlib import Path

ENGINE_DIR = Path(__file__).parent


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


def _use_package_locator() -> None:
    """Cache this package's kernels under `<cache>/engine/` wherever the package is installed
    (numba's own locator names the folder after the source's absolute path), so that an editable
    install, a copy in site-packages and an image share one layout."""
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


def _load_without_refresh() -> None:
    """Load a cached kernel without refreshing numba's compiler first. numba refreshes its target
    context before each load from the cache; the first refresh imports and registers every
    implementation numba has, 0.2 s of each run's start. A loaded kernel needs only numba's
    runtime, and a compile refreshes the context itself (numba's `CompilerBase`)."""
    from numba.core import caching
    from numba.core.runtime import rtsys

    def load_overload(self, sig, target_context):
        rtsys.initialize(target_context)  # what the refresh did that a loaded kernel needs
        with self._guard_against_spurious_io_errors():
            return self._load_overload(sig, target_context)

    caching.Cache.load_overload = load_overload


def _use_kernel_cache() -> None:
    """Point numba at this version's cache directory. Runs before any kernel is defined; every
    process (Dask workers too) derives the same directory. The environment says it too: numba,
    imported before this package, reads its settings from the environment again at its next
    compile once the environment has changed (importing `bpe` sets a variable)."""
    import numba

    os.environ["NUMBA_CACHE_DIR"] = numba.config.CACHE_DIR = os.path.join(kernel_cache_base(), kernel_cache_name())
    _use_package_locator()
    _load_without_refresh()


_use_kernel_cache()
from bpe.engine.compilation import numba_imported  # noqa: E402  (after the cache is set: no kernel compiles before)

numba_imported()

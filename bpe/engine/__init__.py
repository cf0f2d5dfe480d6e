"""The compiled engine: numba kernels over flat arrays for scanning, counting and merging.

`scanner` cuts text as the split patterns do, `count` counts unique words, `word_table` and
`pair_queue` are the two sides of the merge loop, and `merge` runs them together in one process.
"""

import hashlib
import os
from pathlib import Path


def _use_kernel_cache() -> None:
    """Cache compiled kernels per version of this folder's source. numba keys a cached kernel by
    its own file only, so a kernel could otherwise keep a stale copy of a helper it inlines from
    another file. Set before any kernel is defined; every process (Dask workers too) derives the
    same directory. BPE_KERNEL_CACHE moves it (default: ~/.cache/bpe/kernels)."""
    import numba

    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + path.read_bytes())
    cache_home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    base = os.environ.get("BPE_KERNEL_CACHE") or os.path.join(cache_home, "bpe", "kernels")
    numba.config.CACHE_DIR = os.path.join(base, f"{numba.__version__}-{digest.hexdigest()[:16]}")


_use_kernel_cache()

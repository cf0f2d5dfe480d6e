"""Exact, fast byte-level BPE training.

>>> from bpe import train, Tokenizer
>>> tok = train(["hello hello world"], vocab_size=260, pattern="gpt2")
>>> tok.decode(tok.encode("hello world"))
'hello world'
"""

import hashlib
import os
from pathlib import Path

KERNEL_MODULES = ("scanner.py", "count.py", "pair_keys.py", "word_table.py", "pair_queue.py", "merge.py")


def _use_kernel_cache() -> None:
    """Cache compiled kernels per version of this package's source. numba keys a cached kernel by
    its own file only, so a kernel could otherwise keep a stale copy of a helper it inlines from
    another file. Set before any kernel is defined; every process (Dask workers too) derives the
    same directory. BPE_KERNEL_CACHE moves it (default: ~/.cache/bpe/kernels)."""
    import numba

    here = Path(__file__).parent
    digest = hashlib.sha256()
    for name in KERNEL_MODULES:
        digest.update(name.encode() + (here / name).read_bytes())
    cache_home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    base = os.environ.get("BPE_KERNEL_CACHE") or os.path.join(cache_home, "bpe", "kernels")
    numba.config.CACHE_DIR = os.path.join(base, f"{numba.__version__}-{digest.hexdigest()[:16]}")


_use_kernel_cache()

from bpe.tokenizer import Tokenizer  # noqa: E402
from bpe.train import train  # noqa: E402

__all__ = ["Tokenizer", "train"]
__version__ = "0.1.0"

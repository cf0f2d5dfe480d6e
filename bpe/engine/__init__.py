"""The compiled engine: numba kernels over flat arrays for scanning, counting and merging.

`scanner` cuts text as the split patterns do, `count` counts unique words, `word_table` and
`pair_queue` are the two sides of the merge loop, and `merge` runs them together in one process.

Kernels are compiled once per version of this folder's source and CPU, and cached. Building or
installing the package compiles them into `prebuilt/` (see setup.py), and the first import on a
machine copies those into the kernel cache, so that a new install does not compile at all
(`kernel_cache`, which every module with kernels imports first).

This tier imports only itself, the standard library, numpy and numba; its errors
(`bpe.engine.errors`) are the base of those the whole package raises.
"""

TIE_BREAKS = ("bytes", "ids")  # how the pair queue orders pairs of equal count (see `pair_queue`)

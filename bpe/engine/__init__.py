"""The compiled engine: numba kernels over flat arrays for scanning, counting and merging.

`scanner` cuts text as the split patterns do, `count` counts unique words, `word_table` and
`pair_queue` are the two sides of the merge loop, and `merge` runs them together in one process.

Kernels are compiled once per version of this folder's source and CPU, and cached
(`kernel_cache`, which every module with kernels imports first). Installing compiles nothing: a
machine's first run compiles the groups of kernels it needs first, on every core (`bpe.training.warm`).

This tier imports only itself, the standard library, numpy and numba; its errors
(`bpe.engine.errors`) are the base of those the whole package raises.
"""

TIE_BREAKS = ("bytes", "ids")  # how the pair queue orders pairs of equal count (see `pair_queue`)

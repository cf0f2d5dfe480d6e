"""`bpe warm`: compile every kernel ahead of time."""

from __future__ import annotations

import argparse
import sys


def run_warm(args: argparse.Namespace) -> int:
    """Compile (or load) every kernel, so that no later run, worker or container pays for it."""
    import numba

    from bpe.warm import warm_kernels

    def say_compiling() -> None:
        print(
            f"bpe: compiling the kernels the cache lacks into {numba.config.CACHE_DIR}...", file=sys.stderr, flush=True
        )

    warmed = warm_kernels(on_compile=say_compiling)
    if warmed.kernels_compiled:
        print(
            f"compiled {warmed.kernels_compiled} kernel(s) in {warmed.compile_seconds:.1f} s; "
            f"cache: {numba.config.CACHE_DIR}"
        )
    else:
        print(f"kernels already compiled; loaded from the cache in {warmed.seconds:.1f} s ({numba.config.CACHE_DIR})")
    return 0

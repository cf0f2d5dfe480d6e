"""A Dask worker preload that readies the kernels when the worker starts, before any task:

    dask worker tcp://scheduler:8786 --preload bpe.distributed.preload

A worker with a warm kernel cache (`bpe warm`, or an image built with it) loads them in about a
second; one without compiles them here, once per machine, rather than inside a run's first task.
A worker that a nanny restarts after a crash runs it again.
"""

from __future__ import annotations

import logging

logger = logging.getLogger("bpe.distributed.preload")


def dask_setup(worker) -> None:
    """Called by Dask as the worker starts."""
    from bpe.distributed.client import warm_up

    warmed = warm_up()
    if warmed["compile_seconds"] >= 0.5:
        logger.warning(f"bpe: compiled the kernels in {warmed['compile_seconds']:.1f} s (first start of this version)")
    else:
        logger.info(f"bpe: kernels loaded in {warmed['seconds']:.1f} s")

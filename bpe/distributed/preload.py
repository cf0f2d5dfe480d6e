"""A Dask worker preload that readies the kernels when the worker starts, before any task:

    dask worker tcp://scheduler:8786 --preload bpe.distributed.preload

A worker with a warm kernel cache (`bpe warm`, or an image built with it) finds them there at
once; one without compiles them here, once per machine and in processes of their own, rather than
inside a run's first task. Nothing is loaded into the worker: a run loads the kernels it uses
(`bpe.distributed.client.ready_workers`), so a worker holds one pattern's counting kernels, not
all five (about 30 MB each, in every worker, before it holds a word). A worker that a nanny
restarts after a crash runs it again.
"""

from __future__ import annotations

import logging

logger = logging.getLogger("bpe.distributed.preload")


def dask_setup(worker) -> None:
    """Called by Dask as the worker starts."""
    from bpe.training.warm import WORKER_GROUPS, compile_ahead

    compiled = compile_ahead(WORKER_GROUPS, logger.info)
    if compiled.seconds >= 0.5:
        logger.warning(f"bpe: compiled the kernels in {compiled.seconds:.1f} s (first start of this version)")
    else:
        logger.info("bpe: kernels found in the kernel cache")

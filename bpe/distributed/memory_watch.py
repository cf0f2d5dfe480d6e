"""Watching a Dask run's workers for memory trouble, so that it is never silent.

Dask pauses a worker at a fraction of its memory limit (`distributed.worker.memory.pause`, 80%):
it runs no task until its memory falls. A word bucket does not shrink, so a run whose workers are
too small waits for ever. While a run goes on, `MemoryWatch` asks the scheduler every few seconds
how its workers are, says in one line when one is paused or leaves, and when a worker stays paused
for `give_up` seconds while tasks wait that no running worker can take, stops the run with the way
out: a larger limit, or more workers.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass

from bpe.errors import WorkersOutOfMemory

MB = 1 << 20
POLL_SECONDS = 2.0  # how often the scheduler is asked (it learns from each worker's heartbeat)
GIVE_UP_SECONDS = 30.0  # a worker paused this long: the run stops rather than wait for ever


@dataclass(frozen=True)
class WorkerMemory:
    """One worker as the scheduler last saw it: `status` ("running", "paused", ...), its process's
    memory and its limit (0: none), in bytes."""

    address: str
    status: str
    memory: int
    limit: int

    @classmethod
    def of(cls, address: str, info: dict) -> WorkerMemory:
        metrics = info.get("metrics", {})
        return cls(
            address,
            info.get("status", "running"),
            metrics.get("memory", 0),
            info.get("memory_limit") or 0,
        )

    def described(self) -> str:
        """`tcp://127.0.0.1:40123: 270 MB of its 320 MB limit (84%)` (a bucket's words, the kernels
        and Python itself: the process's memory, as Dask measures it)."""
        share = f" ({self.memory / self.limit:.0%})" if self.limit else ""
        limit = f" of its {self.limit / MB:,.0f} MB limit{share}" if self.limit else ""
        return f"{self.address}: {self.memory / MB:,.0f} MB{limit}"


def enough_memory(worker: WorkerMemory, pause: float) -> int:
    """The limit, in MB, under which `worker`'s memory now stays below the `pause` fraction."""
    return math.ceil(worker.memory / pause / MB / 10) * 10


class MemoryWatch:
    """While active (`with MemoryWatch(client, log, may_stop):`), says through `log` each worker that
    Dask pauses for memory, resumes or loses. When one stays paused `give_up` seconds and the run's
    client is its own (`may_stop`), it closes the client, so that what waits on the cluster returns,
    and leaving the block raises `WorkersOutOfMemory` in place of the error that closing caused."""

    def __init__(
        self,
        client,
        log: Callable[[str], None] | None = None,
        may_stop: bool = True,
        give_up: float = GIVE_UP_SECONDS,
        poll: float = POLL_SECONDS,
    ) -> None:
        self.client = client
        self.log = log
        self.may_stop = may_stop
        self.give_up = give_up
        self.poll = poll
        self.stopped: WorkersOutOfMemory | None = None
        self._paused_since: dict[str, float] = {}
        self._seen: set[str] = set()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bpe-memory-watch", daemon=True)

    def __enter__(self) -> MemoryWatch:
        self._thread.start()
        return self

    def __exit__(self, kind, error, traceback) -> None:
        self._done.set()
        self._thread.join(timeout=self.poll + 5)
        if kind is not None and self.stopped is not None:
            raise self.stopped from None  # the reason the run ended, not how closing the client showed

    def _run(self) -> None:
        import time

        while not self._done.wait(self.poll):
            try:
                workers = [WorkerMemory.of(a, w) for a, w in self.client.scheduler_info()["workers"].items()]
            except Exception:  # the client closing, the scheduler gone: the run says that itself
                return
            now = time.monotonic()
            if self._look(workers, now):
                return

    def _look(self, workers: list[WorkerMemory], now: float) -> bool:
        """Say what changed since the last look; True when the run is stopped."""
        from dask import config

        pause = config.get("distributed.worker.memory.pause", 0.8) or 0.8  # Dask's default
        here = {w.address for w in workers}
        for address in sorted(self._seen - here):
            self._say(f"dask worker {address} left the cluster (Dask restarts a worker past its memory limit)")
            self._paused_since.pop(address, None)
        self._seen = here
        for worker in workers:
            if worker.status == "paused" and worker.address not in self._paused_since:
                self._paused_since[worker.address] = now
                self._say(f"dask worker paused for memory: {worker.described()}; the run waits for it")
            elif worker.status != "paused" and self._paused_since.pop(worker.address, None) is not None:
                self._say(f"dask worker {worker.address} resumed")
        since = self._paused_since
        stuck = [w for w in workers if w.address in since and now - since[w.address] >= self.give_up]
        if not stuck or not self.may_stop or not self._tasks_blocked():
            return False
        worker = stuck[0]
        self.stopped = WorkersOutOfMemory(
            f"dask worker paused for memory for {self.give_up:.0f} s, so the run cannot go on: {worker.described()}; "
            f"give workers a memory limit above {enough_memory(worker, pause):,} MB (Dask pauses one at "
            f"{pause:.0%} of it), or use more workers"
        )
        self.client.close(timeout=5)
        return True

    def _tasks_blocked(self) -> bool:
        """Whether the cluster holds tasks it cannot run now: tasks no running worker may take, or
        any task while no worker runs. The merge loop talks to its holders over a channel of its
        own, which a pause does not stop: a worker paused then is said, and the run goes on."""

        def blocked(dask_scheduler) -> int:  # run in the scheduler (pickled by value)
            waiting = len(dask_scheduler.queued) + sum(len(w.processing) for w in dask_scheduler.workers.values())
            return len(dask_scheduler.unrunnable) + (0 if dask_scheduler.running else waiting)

        try:
            return self.client.run_on_scheduler(blocked) > 0
        except Exception:  # a scheduler that cannot be asked: the pause alone decides
            return True

    def _say(self, line: str) -> None:
        if self.log is not None:
            self.log(line)

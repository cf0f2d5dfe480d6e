"""Workers short of memory: said, and never waited on in silence.

Dask pauses a worker at a fraction of its memory limit (`distributed.worker.memory.pause`, 80%): it
runs no task until its memory falls, which a word bucket never does. The driver waits on its tasks
(counting text, reading counts) with `as_they_end`, which looks at the workers between waits: each
worker paused is said once, and when every worker has stayed paused for `GIVE_UP_SECONDS`, so that
no task can run, the run stops in one line with the way out. The merge loop talks to its holders
over a channel of its own, which a pause does not stop.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from bpe.errors import WorkersOutOfMemory

MB = 1 << 20
LOOK_SECONDS = 2.0  # how long with no task ending before the workers are looked at again
POLL_SECONDS = 0.02  # how often the tasks that ended are picked up
GIVE_UP_SECONDS = 20.0  # every worker paused this long: the run stops rather than wait for ever


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
        return cls(address, info.get("status", "running"), metrics.get("memory", 0), info.get("memory_limit") or 0)

    def described(self) -> str:
        """`tcp://127.0.0.1:40123: 270 MB of its 320 MB limit (84%)`: the process's memory, as Dask
        measures it (Python, Dask, the kernels and the words it holds)."""
        share = f" ({self.memory / self.limit:.0%})" if self.limit else ""
        limit = f" of its {self.limit / MB:,.0f} MB limit{share}" if self.limit else ""
        return f"{self.address}: {self.memory / MB:,.0f} MB{limit}"


def enough_memory(worker: WorkerMemory, pause: float) -> int:
    """The limit, in MB (rounded up to tens), under which `worker`'s memory now stays below `pause`."""
    return math.ceil(worker.memory / pause / MB / 10) * 10


class PausedWorkers:
    """Looks at a cluster's workers (`look`), at most every `LOOK_SECONDS`: says through `log` each
    worker Dask pauses for memory, once, and raises WorkersOutOfMemory when every worker has been
    paused `give_up` seconds."""

    def __init__(self, client, log: Callable[[str], None] | None = None, give_up: float = GIVE_UP_SECONDS) -> None:
        self.client = client
        self.log = log
        self.give_up = give_up
        self.said: set[str] = set()
        self.all_paused_since: float | None = None

    def look(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        workers = [WorkerMemory.of(a, w) for a, w in self.client.scheduler_info()["workers"].items()]
        self.see(workers, now)

    def see(self, workers: Sequence[WorkerMemory], now: float) -> None:
        """What `look` does with the workers it found."""
        from dask import config

        for worker in workers:
            if worker.status == "paused" and worker.address not in self.said:
                self.said.add(worker.address)
                if self.log is not None:
                    self.log(f"dask worker paused for memory: {worker.described()}; the run waits for it")
            elif worker.status != "paused":
                self.said.discard(worker.address)
        paused = [w for w in workers if w.status == "paused"]
        if not paused or len(paused) < len(workers):
            self.all_paused_since = None
            return
        self.all_paused_since = self.all_paused_since if self.all_paused_since is not None else now
        if now - self.all_paused_since < self.give_up:
            return
        pause = config.get("distributed.worker.memory.pause", 0.8) or 0.8  # Dask's default
        worker = max(paused, key=lambda w: w.memory)
        raise WorkersOutOfMemory(
            f"every Dask worker is paused for memory, so no task can run ({self.give_up:.0f} s): "
            f"{worker.described()}; give workers a memory limit above {enough_memory(worker, pause):,} MB "
            f"(Dask pauses one at {pause:.0%} of it), or use more workers"
        )


def as_they_end(client, futures: Sequence, log: Callable[[str], None] | None = None) -> Iterator:
    """`futures` as each ends (`distributed.as_completed`), looking at the workers whenever
    `LOOK_SECONDS` pass with none ending (`PausedWorkers`)."""
    from distributed import as_completed

    watch = PausedWorkers(client, log)
    ended = as_completed(futures)
    last = time.monotonic()  # when a future last ended, or the workers were last looked at
    while not ended.is_empty():
        batch = ended.next_batch(block=False)
        if batch:
            last = time.monotonic()
            yield from batch
        elif time.monotonic() - last >= LOOK_SECONDS:
            watch.look()
            last = time.monotonic()
        else:
            time.sleep(POLL_SECONDS)

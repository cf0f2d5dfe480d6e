"""Workers short of memory: said, and never waited on in silence.

Dask pauses a worker at a fraction of its memory limit (`distributed.worker.memory.pause`, 80%): it
runs no task until its memory falls, which a word bucket never does. The driver waits on its tasks
(counting text, reading counts) with `as_they_end`, which looks at the workers between waits: each
worker paused is said once, and when every worker has stayed paused for `GIVE_UP_SECONDS`, so that
no task can run, the run stops in one line with the way out. The merge loop talks to its holders
over a channel of its own, which a pause does not stop.

A worker's nanny restarts it when its memory passes 95% of its limit
(`distributed.worker.memory.terminate`), and logs a `worker-restart-memory` event on the scheduler.
Each restart is said once, naming the worker, its memory and its limit (`memory_restarts`); when
the run then fails (a task killed on every worker it tried, a holder lost too often, a worker gone
while the kernels loaded), it fails in one line saying the workers ran out of memory and what to
give them (`out_of_memory`), not with Dask's traceback or a lost connection.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from bpe.errors import BpeError, SchedulerLost, WorkersOutOfMemory

MB = 1_000_000  # as Dask reads `--memory-limit 800MB`
LOOK_SECONDS = 2.0  # how long with no task ending before the workers are looked at again
POLL_SECONDS = 0.02  # how often the tasks that ended are picked up
GIVE_UP_SECONDS = 20.0  # every worker paused this long: the run stops rather than wait for ever
EVENTS_SECONDS = 5.0  # how long asking the scheduler for its events may take
EVENT_TRIES, EVENT_WAIT_SECONDS = 10, 0.5  # a failed run: how often, how far apart, restarts are looked for
NO_EVENT_TRIES = 3  # and how many of those tries find none before the failure is taken as it is


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


@dataclass(frozen=True)
class MemoryRestart:
    """A worker its nanny restarted for memory: its address then, the memory it had (bytes) and its
    limit (0 when the scheduler no longer knows it)."""

    address: str
    memory: int
    limit: int
    time: float

    def described(self) -> str:
        """`tcp://127.0.0.1:40123 restarted for memory at 812 MB of its 838 MB limit`."""
        limit = f" of its {self.limit / MB:,.0f} MB limit" if self.limit else ""
        return f"{self.address} restarted for memory at {self.memory / MB:,.0f} MB{limit}"


_limits_seen: dict[str, int] = {}  # by scheduler address: the largest worker memory limit seen there


def remember_limits(client, workers: dict) -> int:
    """The largest memory limit of the scheduler's `workers`, or of those seen there before: a
    worker restarted for memory may have no successor yet to tell its nanny's limit."""
    address = str(getattr(client.scheduler, "address", ""))
    found = max((w.get("memory_limit") or 0 for w in workers.values()), default=0)
    _limits_seen[address] = max(found, _limits_seen.get(address, 0))
    return _limits_seen[address]


def memory_restarts(client, since: float = 0.0, workers: dict | None = None) -> list[MemoryRestart]:
    """The workers restarted for memory since `since` (a `time.time()`), oldest first; none when
    the scheduler does not answer within `EVENTS_SECONDS`. `workers`: the scheduler's workers, if
    the caller has just asked for them (their limits are the restarted worker's)."""
    try:
        events = client.sync(client.scheduler.events, topic="worker-restart-memory", callback_timeout=EVENTS_SECONDS)
        workers = client.scheduler_info()["workers"] if workers is None else workers
    except Exception:  # the scheduler gone or busy: no restart to tell of
        return []
    limit = remember_limits(client, workers)  # the restarted worker has a new address; its nanny keeps the limit
    return [
        MemoryRestart(str(event.get("worker", "?")), int(event.get("rss", 0)), limit, when)
        for when, event in events
        if when >= since and isinstance(event, dict)
    ]


def out_of_memory(client, since: float, during: str, tries: int = 1) -> WorkersOutOfMemory | None:
    """The one-line error for a run that failed `during` a phase after workers were restarted for
    memory (since `since`), or None when none was; asked `tries` times, `EVENT_WAIT_SECONDS`
    apart (a nanny reports the restart as it kills the worker, which the run may notice first)."""
    restarts = memory_restarts(client, since)
    for attempt in range(tries - 1):
        if restarts and restarts[-1].limit:  # no limit known: no worker back yet to tell it
            break
        if not restarts and attempt >= NO_EVENT_TRIES:  # none reported by now: the run failed otherwise
            break
        time.sleep(EVENT_WAIT_SECONDS)
        restarts = memory_restarts(client, since)
    if not restarts:
        return None
    last = restarts[-1]
    times = f"{len(restarts)} times" if len(restarts) > 1 else "once"
    return WorkersOutOfMemory(
        f"Dask workers ran out of memory {during}: restarted {times}, last {last.described()}; {way_out(last.limit)}"
    )


def restart_of(client, since: float, address: str) -> MemoryRestart | None:
    """The restart for memory of the worker at `address` since `since`, if its nanny reports one
    within `NO_EVENT_TRIES` looks (it reports as it kills the worker, which a driver may notice
    first)."""
    for attempt in range(NO_EVENT_TRIES + 1):
        found = [r for r in memory_restarts(client, since) if r.address == address]
        if found:
            return found[-1]
        if attempt < NO_EVENT_TRIES:
            time.sleep(EVENT_WAIT_SECONDS)
    return None


def way_out(limit: int) -> str:
    """What to do for workers that ran out of memory with `limit` bytes (0: unknown)."""
    more = f"a memory limit above {limit / MB:,.0f} MB" if limit else "more memory"
    return f"give workers {more}, or use more workers"


def failed_for_memory(client, since: float, during: str, error: BaseException) -> BaseException:
    """`error`, or the out-of-memory error it stands for (`out_of_memory`): a run's own one-line
    errors about its input or settings, and a lost scheduler, are kept as they are."""
    if isinstance(error, (SchedulerLost, WorkersOutOfMemory)) or (
        isinstance(error, BpeError) and not isinstance(error, RuntimeError)
    ):
        return error
    return out_of_memory(client, since, during, tries=EVENT_TRIES) or error


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
        self.since = time.time()  # restarts for memory said from here on
        self.restarts_said = 0

    def say_restarts(self, workers: dict | None = None) -> None:
        """Say, once each, the workers restarted for memory since the last look (`workers`: the
        scheduler's, if just asked for)."""
        if self.log is None:
            return
        restarts = memory_restarts(self.client, self.since, workers)
        for restart in restarts[self.restarts_said :]:
            self.log(f"dask worker {restart.described()}; its tasks run again on the workers left")
        self.restarts_said = max(self.restarts_said, len(restarts))

    def look(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        info = self.client.scheduler_info()["workers"]
        self.say_restarts(info)
        self.see([WorkerMemory.of(a, w) for a, w in info.items()], now)

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


def scatter(client, data: list, log: Callable[[str], None] | None = None) -> list:
    """`client.scatter(data)` (counts made here, placed on the workers), which waits while no
    worker is running: looking at the workers every `LOOK_SECONDS` meanwhile (`PausedWorkers`), so
    that workers all paused for memory are said, then stop the run, rather than time out in Dask's
    words."""
    watch = PausedWorkers(client, log)
    while True:
        try:
            return client.scatter(data, timeout=LOOK_SECONDS)
        except TimeoutError:
            watch.look()

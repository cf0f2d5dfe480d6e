"""Compiling the kernels ahead of a run, a group at a time, on every core, with progress.

Nothing is compiled when the package is installed. A run compiles, before it starts, the kernel
groups it needs that this machine's kernel cache lacks (`compile_ahead`): each group in a
process of its own, as many at once as there are cores, saying what it compiles at least every
few seconds. Later runs, Dask workers and containers on the machine load them from the cache
(`bpe.engine.kernel_cache`) in about a second. `bpe warm` compiles every group (an image's build,
a worker's start); a Dask worker loads its run's groups in its own process (`load`).

A group is what one path of the engine runs, by name ("count cl100k", "merge loop"); its kernels
compile in the seconds `bpe warm` prints for it, and a new kernel joins the group of the path
that calls it (`tests/engine/test_cold_start.py` fails if a run compiles a kernel its groups left out).

>>> groups_for(["gpt2"], engine="dask")
['word tables', 'pair queue', 'count gpt2']
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from bpe.engine.compilation import CompileWatch

SAMPLE = ["Warm up: the kernels, 1 2 3 and 45678!\n", "  naïve café — 東京 2024\t", "x" * 40]
PATTERNS = ("gpt2", "cl100k", "o200k", "whitespace", "superbpe")  # the named patterns' scanners
GROWN_WORDS = 20_000  # distinct words that fill a new counting table (`bpe.engine.count.Tally`)
HEARTBEAT = 5.0  # seconds between lines while a group compiles: no silence longer than this


def _counts():
    """Small word counts to run the merge kernels on (no counting kernel needed)."""
    from bpe.engine.count import WordCounts

    words = {b"warm": 3, b" up": 2, b" the": 5, b" kernels": 2, b"rarer": 1, b" 123": 1, b"x" * 40: 1}
    return WordCounts.from_dict(words)


def _many_pairs():
    """Word counts of more distinct pairs than a new word table holds (6,656 > 4,096): indexing
    them grows the table, as any real corpus does."""
    from bpe.engine.count import WordCounts

    return WordCounts.from_dict({bytes([a, b]): 1 for a in range(ord("a"), ord("z") + 1) for b in range(256)})


def _count(pattern: str) -> None:
    """Counting with `pattern`'s compiled scanner (held-out rows and special tokens too), summing counts."""
    from bpe.engine.count import WordCounts
    from bpe.pretokenize import Pretokenizer
    from bpe.training.counting import WordCounter

    counter = WordCounter(Pretokenizer(pattern, ["<|endoftext|>"]), holdout=0.5)
    counter.add_texts(SAMPLE)
    counts = counter.result()
    WordCounts.combine([counts, counts])
    grown = WordCounter(Pretokenizer(pattern))  # more distinct words than a new table holds: it grows
    grown.add_texts([" ".join("".join(chr(ord("a") + int(d)) for d in str(i)) for i in range(GROWN_WORDS))])
    grown.result()


def _word_tables() -> None:
    """A Dask holder's work: words split by hash, word tables and a group of them, deltas, merges applied."""
    import numpy as np

    from bpe.engine.table_group import TableGroup
    from bpe.engine.word_table import WordTable

    counts = _counts()
    counts.split_by_hash(2)
    merge = np.array([[ord("a"), ord("r"), 256]], dtype=np.int64)
    table = WordTable(counts)
    table.take_deltas()
    table.apply(merge)
    table.take_deltas()
    table.to_words()
    table.forget_below(np.zeros((16, 2), dtype=np.int64), 2)  # pairs below a floor (`tracked_pairs`)
    WordTable(_many_pairs())
    group = TableGroup([table, WordTable(counts)])  # a Dask holder of several buckets (languages)
    group.take_deltas()
    group.apply_and_take(merge)
    group.sync()


def _pair_queue() -> None:
    """The Dask driver's pair queue, with both tie-breaks, fed the deltas holders would send (no
    word table here: a group compiles its own kernels, not another group's)."""
    import numpy as np

    from bpe.engine.pair_keys import pack
    from bpe.engine.pair_queue import PairQueue

    pairs = [(ord(a), ord(b)) for a, b in ("wa", "ar", "rm", "th", "he", "ke")]
    keys = np.array([pack(a, b) for a, b in pairs], dtype=np.int64)
    for tie_break in ("bytes", "ids"):
        queue = PairQueue(_rules(tie_break, max_token_length=8))
        queue.add_tokens(np.array([[ord("a"), ord("b")]]))  # a base's merge made first
        queue.add(keys, np.array([5, 4, 3, 3, 2, 1], dtype=np.int64))
        for _ in range(2):
            batch = queue.next_round(2)  # the holders' answer: the merged pairs are gone
            merged = np.array([pack(a, b) for a, b in batch[:, :2].tolist()], dtype=np.int64)
            queue.add(merged, -batch[:, 3].astype(np.int64))
        queue.best_count()
        queue.any_pair_left()
        queue.forget_below(2)  # pairs below the local loop's floor (`tracked_pairs`)


def _rules(tie_break: str, max_token_length: int | None = None):
    """Merge rules for a tiny run that calls the kernels once (every count merges)."""
    from bpe.engine.rules import MergeRules

    return MergeRules(tie_break, 1, max_token_length, None)


def _merge_loop() -> None:
    """The local merge loop on one thread, with both tie-breaks, until no pair is left."""
    from bpe.engine.merge import learn_merges

    for tie_break in ("bytes", "ids"):
        learn_merges(_counts(), 8, _rules(tie_break), threads=1)
        learn_merges(_counts(), 10_000, _rules(tie_break), threads=1)  # until no pair is left
        learn_merges(_many_pairs(), 2, _rules(tie_break), threads=1)


def _merge_threads() -> None:
    """The local merge loop on threads: words split by hash into slices, spinning between rounds."""
    from bpe.engine.merge import learn_merges

    for tie_break in ("bytes", "ids"):
        learn_merges(_counts(), 8, _rules(tie_break), threads=2)
        learn_merges(_many_pairs(), 2, _rules(tie_break), threads=2)


def _replay() -> None:
    """A base tokenizer's merges replayed on the words (training from a tokenizer, superwords' second stage)."""
    from bpe.engine.merge import learn_merges
    from bpe.engine.replay import BaseMerges

    for tie_break in ("bytes", "ids"):
        for threads in (1, 2):
            base = BaseMerges(learn_merges(_counts(), 4, _rules(tie_break), threads=1).merges)
            learn_merges(_counts(), 4, _rules(tie_break), base=base, threads=threads)


def _parity() -> None:
    """Parity-aware merges over two languages: with a dev set, then ratios, the window and global merges."""
    from bpe.engine.count import WordCounts
    from bpe.engine.parity import ParityRule, learn_parity_merges

    two = [_counts(), WordCounts.from_dict({b"bar": 2, b"rab": 1})]
    for tie_break in ("bytes", "ids"):
        rule = ParityRule(variant="base", global_merges=0, window=100, alpha=2.0, ratio=None)
        learn_parity_merges(two, 6, rule, _rules(tie_break), dev=two)
        rule = ParityRule(variant="window", global_merges=1, window=4, alpha=2.0, ratio=(1.0, 2.0))
        learn_parity_merges(two, 6, rule, _rules(tie_break, max_token_length=4))


@dataclass(frozen=True)
class Group:
    """A path's kernels: `run` calls each once on a tiny input. `after`: groups whose kernels this
    one calls, compiled first where both are to be (the later one then loads them from the cache)."""

    run: Callable[[], None]
    after: tuple[str, ...] = ()


# In the order compiling hands them out (whatever order a run asks for them in): the groups others
# wait for first, then the longest, so that on two cores parity compiles while the rest do.
GROUPS: dict[str, Group] = {
    "word tables": Group(_word_tables),
    "pair queue": Group(_pair_queue),
    "parity": Group(_parity, after=("word tables", "pair queue")),
    **{f"count {pattern}": Group(lambda pattern=pattern: _count(pattern)) for pattern in PATTERNS},
    "merge loop": Group(_merge_loop, after=("word tables", "pair queue")),
    "merge loop on threads": Group(_merge_threads, after=("word tables", "pair queue", "merge loop")),
    "replay": Group(_replay, after=("word tables", "pair queue", "merge loop")),
}


def groups_for(
    patterns: Sequence[str] = ("cl100k",),
    engine: str = "local",
    threads: bool = False,
    replay: bool = False,
    parity_merges: bool = False,
) -> list[str]:
    """The groups a run needs, those others call first: the word tables and the pair queue (the
    Dask engine's holders and driver run them as they are), counting with each of its `patterns`
    that is named (a regex is counted by the `regex` module; a superword run counts with two),
    then, on the local engine, the merge loop (`threads`: on threads too); `parity_merges`: parity-aware merges;
    `replay`: a base's merges replayed (training from a tokenizer, a superword run's second stage)."""
    names = ["word tables", "pair queue"]  # what every engine's merges run on (parity's queue: its own)
    names += [f"count {pattern}" for pattern in dict.fromkeys(patterns) if pattern in PATTERNS]
    if parity_merges:
        names.append("parity")
    elif engine != "dask":
        names += ["merge loop", *(["merge loop on threads"] if threads else [])]
    if replay:
        names.append("replay")
    return names


# The groups the Dask engine's driver runs (its pair queue), and those its workers may run.
DRIVER_GROUPS = ("pair queue", "parity")
WORKER_GROUPS = (*(f"count {pattern}" for pattern in PATTERNS), "word tables", "replay")


def groups_of_run(settings, engine: str = "local", threads: int | None = None, base: bool = False,
                  parity_merges: bool = False) -> list[str]:  # fmt: skip
    """The groups a run with `settings` (`bpe.training.settings.Settings`) needs on `engine`: its patterns
    (a superword run's two), the merge loop on threads where it may run there (`threads` given
    above 1, or left to it on more than one core), a base's merges replayed, parity-aware merges."""
    from bpe.engine.cores import available_cores
    from bpe.pretokenize import resolve_pattern, superword_regex

    patterns = [resolve_pattern(settings.split_pattern)[0]]
    if settings.superwords:  # the second stage's too, compiled with the first's
        patterns.append(resolve_pattern(superword_regex(settings.superword_pattern))[0])
    on_threads = threads > 1 if threads is not None else available_cores() > 1
    return groups_for(patterns, engine, on_threads, base or settings.superwords, parity_merges)


@dataclass
class Compiled:
    """What compiling ahead did: the groups compiled (each its wall seconds) and the wall time of it
    all; nothing when the cache held every group asked for."""

    groups: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    processes: int = 0


def cache_dir() -> str:
    """This version's kernel cache (numba's CACHE_DIR, set up by `bpe.engine.kernel_cache`)."""
    import numba

    from bpe.engine import kernel_cache  # noqa: F401  (sets CACHE_DIR)

    return numba.config.CACHE_DIR


def _marker(name: str) -> str:
    """The file that says `name` is compiled in this cache for this machine's CPU: numba keys its
    cached kernels by CPU too, and an image built elsewhere holds kernels this CPU cannot load."""
    from numba.core.registry import cpu_target

    cpu = hashlib.sha256(repr(cpu_target.target_context.codegen().magic_tuple()).encode()).hexdigest()[:12]
    return os.path.join(cache_dir(), "groups", f"{name.replace(' ', '-')}.{cpu}")


def missing(names: Iterable[str]) -> list[str]:
    """Those of the groups `names` this machine's cache does not hold yet."""
    return [name for name in names if not os.path.exists(_marker(name))]


def load(names: Iterable[str]) -> float:
    """Run the groups `names` in this process: load their kernels from the cache, compiling those
    it lacks (a Dask worker of a cluster whose machines have no warm cache). Returns the seconds
    spent compiling."""
    with CompileWatch() as watch:
        for name in names:
            GROUPS[name].run()
            _mark(name)
    return watch.seconds


def _mark(name: str) -> None:
    path = _marker(name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(name + "\n")


def processes_for(groups: int) -> int:
    """Processes to compile `groups` on: one a core, at most one a group."""
    from bpe.engine.cores import available_cores

    return max(1, min(groups, available_cores()))


def ready(todo: Sequence[str], started: Iterable[str], done: Iterable[str]) -> str | None:
    """The next group to compile: the first of `todo` not started whose `after` groups among `todo`
    are done; None while each waits for one (compiling their kernels twice at once would take
    the core the first needs).

    >>> ready(["word tables", "pair queue", "merge loop"], ["word tables"], [])
    'pair queue'
    >>> ready(["word tables", "pair queue", "merge loop"], ["word tables", "pair queue"], ["pair queue"]) is None
    True
    """
    started, done = set(started), set(done)
    for name in todo:
        if name not in started and all(before in done or before not in todo for before in GROUPS[name].after):
            return name
    return None


def compile_ahead(
    names: Sequence[str], say: Callable[[str], None] | None = None, processes: int | None = None
) -> Compiled:
    """Compile those of the groups `names` the cache lacks, on `processes` processes at once (one
    a core), each taking the next group that is ready as it finishes one; `say(line)` is told when
    it starts, when each group is done, and at least every `HEARTBEAT` seconds between. A group
    that fails raises RuntimeError with its process's last lines (a bug, never the user's input)."""
    if not missing(dict.fromkeys(names)):
        return Compiled()
    say = say or (lambda line: None)
    with _compiling_here(say):  # another process compiling this cache: wait for it, then compile what is left
        return _compile(sorted(missing(dict.fromkeys(names)), key=list(GROUPS).index), say, processes)


@contextlib.contextmanager
def _compiling_here(say: Callable[[str], None]):
    """Hold the kernel cache's compile lock (two first runs at once, a run and `bpe warm`, compile a
    group once), saying every `HEARTBEAT` seconds that it waits for another process."""
    path = os.path.join(cache_dir(), "groups", ".compiling")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a") as lock:
        said = None
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if said is None or time.perf_counter() - said >= HEARTBEAT:
                    say("waiting for another process compiling the kernels (the same cache)...")
                    said = time.perf_counter()
                time.sleep(0.1)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _compile(todo: list[str], say: Callable[[str], None], processes: int | None) -> Compiled:
    if not todo:
        return Compiled()
    n = processes or processes_for(len(todo))
    started = time.perf_counter()
    plural = "s" if len(todo) > 1 else ""
    say(
        f"compiling {len(todo)} kernel group{plural} for this version of bpe on {n} process{'es' * (n > 1)}: "
        f"{', '.join(todo)} (once per machine; later runs load them in about a second)"
    )
    compilers = [_Compiler() for _ in range(n)]
    done: dict[str, float] = {}
    handed: list[str] = []
    last_said = time.perf_counter()
    try:
        while len(done) < len(todo):
            for compiler in compilers:
                finished = compiler.finished()
                if finished is not None:
                    name, seconds = finished
                    done[name] = seconds
                    busy = [c.group for c in compilers if c.group is not None]
                    still = f"; compiling {', '.join(busy)}" if busy else ""
                    say(f"compiled {name} in {seconds:.1f} s ({len(done)} of {len(todo)}{still})")
                    last_said = time.perf_counter()
                if compiler.group is None and (name := ready(todo, handed, done)) is not None:
                    compiler.start(name)
                    handed.append(name)
            if time.perf_counter() - last_said >= HEARTBEAT:
                busy = [c.group for c in compilers if c.group is not None]
                say(f"compiling {', '.join(busy)}... {time.perf_counter() - started:.0f} s")
                last_said = time.perf_counter()
            time.sleep(0.05)
    finally:
        for compiler in compilers:
            compiler.stop()
    seconds = time.perf_counter() - started
    say(f"compiled {len(todo)} kernel group{plural} in {seconds:.1f} s")
    return Compiled(done, seconds, n)


def compile_in_background(names: Sequence[str], say: Callable[[str], None] | None = None) -> Callable[[], Compiled]:
    """`compile_ahead(names, say)` on a thread of its own, so that compiling overlaps other work;
    returns the function that waits for it (and raises what it raised). The thread does not keep
    the process alive: a process that ends (Ctrl-C) ends its compiling processes with it."""
    # Checked here: on the thread, numba's import would share the interpreter with whatever this
    # thread runs meanwhile (the demo writing its corpus) and start compiling seconds late.
    if not missing(dict.fromkeys(names)):
        return Compiled  # nothing to wait for: calling it gives an empty Compiled
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["compiled"] = compile_ahead(names, say)
        except BaseException as exc:  # handed to the waiting thread
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="bpe-compile", daemon=True)
    thread.start()

    def wait() -> Compiled:
        thread.join()
        if "error" in outcome:
            raise outcome["error"]
        return outcome["compiled"]

    return wait


def _die_with_parent() -> None:
    """In a compiling process, before it runs: end when the thread that started it ends (Linux)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class _Compiler:
    """A process that compiles the groups it is handed, one at a time (`python -m bpe.training.warm`: a name
    a line on its stdin, a JSON line in its output file as each is done), keeping numba's own
    compiled helpers (array and list code) between groups. It runs in a session of its own: a
    terminal's Ctrl-C reaches the process that started it, which stops this one."""

    def __init__(self) -> None:
        self.output, self.errors = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bpe.training.warm"],
            stdin=subprocess.PIPE,
            stdout=self.output,
            stderr=self.errors,
            text=True,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        self.group: str | None = None
        self._since = 0.0
        self._lines = 0

    def start(self, name: str) -> None:
        self.group, self._since = name, time.perf_counter()
        self.process.stdin.write(name + "\n")
        self.process.stdin.flush()

    def finished(self) -> tuple[str, float] | None:
        """(group, wall seconds) once the group handed to it is done; RuntimeError with the
        process's last lines if it failed."""
        if self.group is None:
            return None
        ended = self.process.poll() is not None
        self.output.seek(0)
        lines = self.output.read().splitlines()
        if len(lines) <= self._lines:
            if ended:
                self.errors.seek(0)
                tail = "\n".join(self.errors.read().strip().splitlines()[-20:])
                raise RuntimeError(f"compiling the kernel group {self.group!r} failed:\n{tail}")
            return None
        name = json.loads(lines[self._lines])["group"]
        self._lines += 1
        self.group = None
        return name, time.perf_counter() - self._since

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=1.0 if self.group is None else 0.01)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.output.close()
        self.errors.close()


def main(argv: Sequence[str]) -> int:
    """`python -m bpe.training.warm [GROUP...]`: compile (or load) the groups named, or else those read from
    stdin a line at a time, one after another; a JSON line on stdout as each is done."""
    for name in argv or (line.strip() for line in sys.stdin):
        print(json.dumps({"group": name, "compile_seconds": round(load([name]), 3)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The pairs the local merge loop tracks: those that may be merged before it next looks.

Most distinct pairs of a large corpus are rare: 99% of the superword stage's at 125 MB count fewer
than its last merge, yet each one costs the word tables a slot and a node for every word holding
it, and the queue a slot, and each merge next to it a delta. The local loop therefore indexes only
the pairs that may reach a `floor`, merges while its best pair reaches the floor, and then indexes
the words as they stand again, with a lower floor, until the floor is `min_frequency`.

Which pairs may reach the floor: each pair's count is added to a counter of a sketch, an array of
counters shared by the pairs that hash to it (`pair_keys.bucket_of`), so no pair counts more than
its counter, and the pairs whose counter reaches the floor include every pair that does. The floor
is the counter of rank `TRACKED_PER_MERGE` times the merges still to make.

Exact: a pair's count grows only in the round that makes one of its two tokens (each token is
made once). A pair left out of an index, whose tokens both exist, therefore never counts more than
it did, which was under the floor; a pair that turns up later holds a token made later, and word
tables index every pair a merge makes. So while the best tracked pair reaches the floor no pair left
out ties or beats it, and a round's merges are those of a loop tracking every pair: a pair left
out that bounds what a merge makes is below the floor, so below every pair a round keeps (see
`pair_queue`).

>>> import numpy as np
>>> sketch = np.array([9, 0, 5, 7, 1, 1, 0, 2])
>>> floor_for(sketch, merges_left=1, min_frequency=1)  # 4 counters wanted: the fourth counts 2
2
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from bpe.engine.pair_queue import PairQueue
from bpe.engine.replay import BaseMerges
from bpe.engine.rules import MergeRules
from bpe.engine.word_table import WordTable

TRACKED_PER_MERGE = 4  # counters reaching the floor per merge still to make
FORGET_GROWTH = 2  # pairs below the floor are forgotten once the tables hold this many times what they kept
SKETCH_LEAST, SKETCH_MOST = 1 << 10, 1 << 22  # counters in a sketch (8 bytes each): 32 MB at most
_EVERY_PAIR = np.zeros(1, dtype=np.int64)  # the sketch of an index that takes every pair


def sketch_of(tables: list[WordTable]) -> np.ndarray:
    """A sketch of every pair count in the tables' words as they stand: about one counter a pair.
    Each table counts into a sketch of its own on a thread of its own (one more sketch a thread,
    32 MB at most), and the sketches are summed."""
    pairs = sum(table.n_tokens for table in tables)
    size = SKETCH_LEAST
    while size < pairs and size < SKETCH_MOST:
        size *= 2

    def counted(table: WordTable) -> np.ndarray:
        own = np.zeros(size, dtype=np.int64)
        table.add_to_sketch(own)
        return own

    with ThreadPoolExecutor(len(tables)) as pool:
        sketches = list(pool.map(counted, tables))
    sketch = sketches.pop()
    for other in sketches:
        sketch += other
    return sketch


def floor_for(counters: np.ndarray, merges_left: int, min_frequency: int) -> int:
    """The floor for `merges_left` more merges: the counter of rank `TRACKED_PER_MERGE` x
    `merges_left` (of a sketch, or exact counts), but no lower than `min_frequency` (or 1), below
    which no pair is merged."""
    wanted = TRACKED_PER_MERGE * max(merges_left, 1)
    least = max(int(min_frequency), 1)
    used = counters[counters > 0]  # (a partition of mostly zeros takes numpy a second)
    if wanted >= len(used):
        return least
    return max(int(np.partition(used, len(used) - wanted)[len(used) - wanted]), least)


class TrackedPairs:
    """A local run's word tables and the queue of the pairs they track, indexed again with a lower
    floor when the best tracked pair falls below it (`lower`). `floor` is what the queue's rounds
    take (`queue_next_round`'s least count)."""

    def __init__(
        self,
        tables: list[WordTable],
        rules: MergeRules,
        base: BaseMerges | None,
        n_merges: int,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self.tables, self.rules, self.base, self.n_merges = tables, rules, base, n_merges
        self.made: list[np.ndarray] = []  # the (a, b, new id, count) rows merged so far
        self.merged = 0
        self.least = max(int(rules.min_frequency), 1)  # below it no pair is merged
        tokens = 256 + (len(base) if base is not None else 0)
        if TRACKED_PER_MERGE * max(n_merges, 1) >= tokens * tokens:  # plain BPE: at most 65,536 byte pairs
            self.queue = self._indexed(_EVERY_PAIR, self.least, progress)  # no sketch could raise the floor
        else:
            sketch = sketch_of(tables)
            self.queue = self._indexed(sketch, floor_for(sketch, n_merges, self.least), progress)

    def due(self, batch: np.ndarray) -> Callable[[], object] | None:
        """Take the rows of the rounds the queue chose and the tables applied; then what the tables
        need before more rounds, with every delta taken (the threads that hold them stopped): `lower`
        when no pair reaches the floor and the floor can go lower, `forget` when the pairs merges
        made have grown the tables `FORGET_GROWTH` times; else None (None too once all merges are made,
        and in a loop that tracks every pair)."""
        if len(batch):
            self.made.append(batch)
            self.merged += len(batch)
        if self.merged >= self.n_merges:
            return None
        if self.floor <= self.least:
            return None  # every pair is tracked, and stays so (see `forget`)
        if not len(batch) or self.queue.best_count() < self.floor:
            return self.lower
        return self.forget if self._pairs() > FORGET_GROWTH * self._kept else None

    def forget(self) -> None:
        """Raise the floor to the count of rank `TRACKED_PER_MERGE` x the merges left among the
        queue's pairs (every pair at or above the floor is tracked, so every pair at or above a
        higher one is too), then forget, in the tables and the queue, the pairs counted below it:
        no merge can make one count more (its tokens exist), and the next index counts them again.
        Not in a loop that tracks every pair from the start (plain BPE, whose byte pairs are few):
        its pairs are listed for many words each, stale entries included, and freeing those lists
        cost more time than the memory was worth (3 s of a 500 MB run's 10 s loop)."""
        counts = self.queue.pair_table
        self.floor = max(self.floor, floor_for(counts[:, 1], self.n_merges - self.merged, self.least))
        if self.floor > self.least:  # at the least every pair stays (what `stop_reason` reads)
            with ThreadPoolExecutor(len(self.tables)) as pool:  # the tables read the queue's counts, on a thread each
                list(pool.map(lambda table: table.forget_below(counts, self.floor), self.tables))
            self.queue.forget_below(self.floor)
        self._kept = self._pairs()

    def _pairs(self) -> int:
        return sum(table.pair_count for table in self.tables)

    def lower(self) -> None:
        """Index the tables again with a lower floor, the queue having no pair at this one."""
        sketch = sketch_of(self.tables)
        wanted = floor_for(sketch, self.n_merges - self.merged, self.least)
        # Lower than the last floor, and by half when its index gave no merge (counters that
        # pairs share can keep a counter above every pair it holds).
        gave_none = self.merged == self._merged_at_index
        self.queue = self._indexed(sketch, min(wanted, self.floor // 2 if gave_none else self.floor - 1))

    def _indexed(self, sketch: np.ndarray, floor: int, progress: Callable[[int], None] | None = None) -> PairQueue:
        """Index every table for `floor` (on a thread each) and a new queue of their pairs' counts."""
        self.floor = max(floor, self.least)
        taken = self.floor if self.floor > self.least else 0  # at the least, every pair (what `stop_reason` reads)
        with ThreadPoolExecutor(len(self.tables)) as pool:
            list(pool.map(lambda table: table.index(sketch, taken, progress), self.tables))
        queue = PairQueue(self.rules)
        if self.base is not None:
            queue.add_tokens(self.base.merges)
        if self.made:
            queue.add_tokens(np.concatenate(self.made)[:, :2])
        for table in self.tables:
            queue.add(*table.take_deltas())
        self._merged_at_index = self.merged
        self._kept = self._pairs()
        return queue

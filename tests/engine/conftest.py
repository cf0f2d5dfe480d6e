"""Helpers the engine's tests share (the engine imported where used, as in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from bpe.engine.count import WordCounts
    from bpe.engine.word_slices import ThreadedWordTable
    from bpe.engine.word_table import WordTable


def summed(keys: np.ndarray, deltas: np.ndarray) -> dict[int, int]:
    """Deltas by pair key, added up (slices report a pair once each), zeros left out."""
    total: dict[int, int] = {}
    for key, delta in zip(keys.tolist(), deltas.tolist()):
        total[key] = total.get(key, 0) + delta
    return {k: v for k, v in total.items() if v}


def carries_on_across_a_checkpoint(
    counts: WordCounts,
    merges: np.ndarray,
    split: int,
    batches: tuple[int, int],
    restored: Callable[[ThreadedWordTable], None] = lambda slices: None,
) -> None:
    """Apply `merges` in batches to one word table and to slices on 3 threads up to merge `split`,
    write the slices out (`to_words`) and read them back on 2 threads (`from_words`, as a Dask
    bucket holder restores its checkpoint; `restored` looks at them then), then apply the rest:
    asserts the slices' deltas are the one table's at every batch, and so are their tokens and words."""
    from bpe.engine.word_slices import ThreadedWordTable
    from bpe.engine.word_table import WordTable

    rows = np.column_stack([merges, 256 + np.arange(len(merges))]).astype(np.int64)
    one = WordTable(counts)
    one.take_deltas()
    with ThreadedWordTable(counts, threads=3) as three:
        three.take_deltas()
        _apply_alike(one, three, np.array_split(rows[:split], batches[0]))
        saved = three.to_words()
    with ThreadedWordTable.from_words(*saved, threads=2) as two:
        restored(two)
        _apply_alike(one, two, np.array_split(rows[split:], batches[1]))
        assert two.token_count() == one.token_count() and two.n_words == one.n_words
    assert sorted(map(tuple, one.words())) == sorted(map(tuple, two.tables[0].words() + two.tables[1].words()))


def _apply_alike(one: WordTable, slices: ThreadedWordTable, batches: list[np.ndarray]) -> None:
    """Apply each batch to both; the same deltas after each."""
    for batch in batches:
        one.apply(batch)
        slices.apply(batch)
        assert summed(*one.take_deltas()) == summed(*slices.take_deltas())

"""Which documents are trained on: `--sample` keeps a row by a seeded hash of its text
(`sample_mask`), so the same row is kept in any file, format, order or engine; `--limit` is a budget
of rows or UTF-8 bytes spent in input order (`Budget`). Files (`bpe.inputs.read`) and in-memory
documents (`select_documents`) follow the same rules.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bpe.inputs.shard import Shard
from bpe.inputs.strings import booleans, large_strings

SAMPLE_BUCKETS = 1_000_000  # --sample keeps a row when a seeded hash of it, modulo this, is below fraction x this


def sample_mask(array: pa.LargeStringArray, fraction: float, seed: int = 0) -> np.ndarray:
    """Which rows `--sample fraction` keeps: FNV-1a of "bpe-sample:{seed}:" + the row's UTF-8 bytes,
    modulo a million, below fraction x a million (the held-out rows' rule, with a seed in front so
    that the sample does not coincide with them). Deterministic by seed, and independent of where
    the row sits: the same row is kept in any file, format, order or engine. Null rows are kept (the
    counter skips and reports them)."""
    from bpe.engine.hashing import hash_buckets  # here: the kernels load only when a sample is asked for

    array = array.cast(pa.large_string()) if array.type != pa.large_string() else array
    if len(array) == 0:
        return np.zeros(0, dtype=bool)
    keyed = pc.binary_join_element_wise(
        pa.scalar(f"bpe-sample:{seed}:", pa.large_string()), array, pa.scalar("", pa.large_string())
    )
    _, offsets_buf, data_buf = keyed.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)[keyed.offset : keyed.offset + len(keyed) + 1]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(1, np.uint8)
    keep = hash_buckets(data, offsets, SAMPLE_BUCKETS) < int(round(fraction * SAMPLE_BUCKETS))
    if array.null_count:
        keep |= array.is_null().to_numpy(zero_copy_only=False)
    return keep


def select_rows(shard: Shard, array: pa.Array) -> pa.LargeStringArray:
    """The rows of a batch of `shard` that its `sample` keeps (all, without one)."""
    array = array.cast(pa.large_string()) if array.type != pa.large_string() else array
    if shard.sample is None:
        return array
    return array.filter(booleans(sample_mask(array, shard.sample, shard.seed)))


def sampled_file(
    shard: Shard, batches: Iterator[tuple[pa.LargeStringArray, int]]
) -> Iterator[tuple[pa.LargeStringArray, int]]:
    """A text file read as one document is one row: kept or not whole, by the same rule applied to
    the SHA-256 of its content (its text may be too large to hold, the hash is not)."""
    digest = shard.fingerprint()["sha256"]
    if sample_mask(large_strings([digest]), shard.sample or 0.0, shard.seed)[0]:
        yield from batches
        return
    empty = large_strings([])
    for _, share in batches:  # read through for the progress shares; nothing is counted
        yield empty, share


class Budget:
    """What `--limit` leaves to read: `unit` "rows" (documents; null rows do not count) or "bytes"
    (UTF-8 bytes of text; the document that crosses the limit is cut at the last character that fits)."""

    def __init__(self, unit: str, amount: int) -> None:
        if unit not in ("rows", "bytes") or amount < 1:
            raise ValueError(f"a limit is ('rows' | 'bytes', amount >= 1), not ({unit!r}, {amount!r})")
        self.unit, self.left, self.exhausted = unit, amount, False

    def take(self, array: pa.LargeStringArray, counts_rows: bool = True) -> pa.LargeStringArray:
        """The part of `array` within the budget (spending it). A text read as one document comes in
        several arrays: its rows are counted once, by `end_document` (`counts_rows` False)."""
        if self.exhausted or len(array) == 0:
            return array.slice(0, 0)
        if self.unit == "rows":
            if not counts_rows:
                return array
            rows = np.cumsum(array.is_valid().to_numpy(zero_copy_only=False))
            if rows[-1] < self.left:
                self.left -= int(rows[-1])
                return array
            end = int(np.searchsorted(rows, self.left)) + 1  # through the row that spends the last one
            self.left, self.exhausted = 0, True
            return array.slice(0, end)
        sizes = np.cumsum(pc.fill_null(pc.binary_length(array), 0).to_numpy(zero_copy_only=False))
        reaching = int(np.searchsorted(sizes, self.left))  # the first row with which the text reaches the limit
        if reaching == len(sizes):
            self.left -= int(sizes[-1])
            return array
        before = int(sizes[reaching - 1]) if reaching else 0
        kept = array.slice(0, reaching + 1)
        if sizes[reaching] > self.left:  # it crosses the limit: cut it at the last character that fits
            cut = array[reaching].as_py().encode("utf-8")[: self.left - before].decode("utf-8", "ignore")
            kept = pa.concat_arrays([array.slice(0, reaching), large_strings([cut])])
        self.left, self.exhausted = 0, True
        return kept

    def end_document(self) -> None:
        """A text file read as one document has ended: it was one row."""
        if self.unit == "rows" and not self.exhausted:
            self.left -= 1
            self.exhausted = self.left == 0


def select_documents(
    batches: Iterable[pa.Array], sample: float | None = None, seed: int = 0, limit: tuple[str, int] | None = None
) -> Iterator[pa.LargeStringArray]:
    """In-memory documents in batches, sampled and limited by the rules files are (`sample_mask`,
    `Budget`)."""
    budget = Budget(*limit) if limit is not None else None
    for array in batches:
        array = array.cast(pa.large_string()) if array.type != pa.large_string() else array
        if sample is not None:
            array = array.filter(booleans(sample_mask(array, sample, seed)))
        if budget is not None:
            array = budget.take(array)
        yield array
        if budget is not None and budget.exhausted:
            return

"""A shard's documents as they are trained on: read in its format (`bpe.inputs.readers`), sampled,
and cut by what `--limit` leaves for it (`bpe.inputs.selection`).

The same `read_batches` serves both engines (the local one on threads, the Dask one on workers), so
they read the same documents from every format; `apply_limit` finds out once, before either reads,
where the limit runs out, for the same reason.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import pyarrow as pa

from bpe.inputs.readers import format_batches
from bpe.inputs.selection import Budget, sampled_file, select_rows
from bpe.inputs.shard import Shard

if TYPE_CHECKING:
    from bpe.pretokenize import Pretokenizer


def read_batches(
    shard: Shard,
    text_column: str = "text",
    pretokenizer: Pretokenizer | None = None,
    chunk_bytes: int | None = None,
    check_utf8: bool = True,
) -> Iterator[tuple[pa.LargeStringArray, int]]:
    """Documents of a shard in batches (nulls kept, for the caller to count and skip), each with
    its share of the file's size, so that progress can be shown in file bytes. The shard's
    `sample` and `budget` are applied: what is yielded is exactly what is trained on.

    Given the `pretokenizer` that will count them, a text file read as one document comes in pieces
    of about `chunk_bytes` (default `TXT_CHUNK_BYTES`) whose counts are exactly those of the whole
    file (see `txt_chunks`); without it, whole. Read as lines, it comes in blocks of that size.
    `check_utf8=False`: Parquet's strings come unchecked, for the compiled counting scanners, which
    check them (`format_batches`)."""
    budget = Budget(*shard.budget) if shard.budget is not None else None
    yield from _selected_batches(shard, text_column, pretokenizer, chunk_bytes, budget, check_utf8)


def _selected_batches(
    shard: Shard,
    text_column: str,
    pretokenizer: Pretokenizer | None,
    chunk_bytes: int | None,
    budget: Budget | None,
    check_utf8: bool = True,
) -> Iterator[tuple[pa.LargeStringArray, int]]:
    """`format_batches`, sampled, then cut by `budget` (whose state tells `apply_limit` where it ran out)."""
    one_document = shard.kind == "txt" and shard.text_format == "doc"
    batches = format_batches(shard, text_column, pretokenizer, chunk_bytes, check_utf8)
    if shard.sample is not None:
        if one_document:
            batches = sampled_file(shard, batches)
        else:
            batches = ((select_rows(shard, array), share) for array, share in batches)
    if budget is None:
        yield from batches
        return
    for array, share in batches:
        yield budget.take(array, counts_rows=not one_document), share
        if budget.exhausted:
            return
    if one_document:
        budget.end_document()


def apply_limit(
    shards: Sequence[Shard], limit: tuple[str, int], text_column: str = "text", pretokenizer: Pretokenizer | None = None
) -> list[Shard]:
    """The shards that hold the first `limit` of the input (("rows" | "bytes", amount): documents in
    the shards' order, within each in file order, after sampling): those read whole as they are,
    and the one where the limit runs out with the rest of the budget (`Shard.budget`); the shards
    after it are left out. It reads the input up to the limit to find out where that is, here,
    once, so that both engines, whose workers read shards independently, read exactly the same."""
    budget = Budget(*limit)
    planned = []
    for shard in shards:
        left = budget.left
        for _ in _selected_batches(shard, text_column, pretokenizer, None, budget):
            pass
        if budget.exhausted:
            planned.append(replace(shard, budget=(budget.unit, left)))
            break
        planned.append(shard)
    return planned

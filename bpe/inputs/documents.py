"""In-memory documents, what `train(texts)` is given: strings, dict rows, Arrow tables and arrays,
pandas frames, or Hugging Face datasets, read as they come (never converted whole), and sampled and
limited by the rules files are (`bpe.inputs.selection`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import partial

import pyarrow as pa

from bpe.engine.errors import Spelling
from bpe.errors import InputError, lone_surrogate
from bpe.inputs.selection import select_documents
from bpe.inputs.strings import large_strings


def iter_texts(
    texts: object,
    text_column: str = "text",
    sample: float | None = None,
    seed: int = 0,
    limit: tuple[str, int] | None = None,
    batch_rows: int = 8192,
) -> Iterator[str | None]:
    """The documents of what `train(texts)` was given: an iterable of strings (None: a null row), of
    dicts (rows: the text in their `text_column` field), or a Hugging Face `datasets.Dataset` /
    `IterableDataset` (duck-typed, read `batch_rows` at a time, never converted whole), sampled and
    limited as files are. A bare string is refused here, at once: iterating it would train on its
    characters (rows are checked as they are read)."""
    if isinstance(texts, (str, bytes, bytearray)):
        raise TypeError(
            f"texts: expected an iterable of documents, such as a list of str, got a {type(texts).__name__}; "
            "pass [text] to train on one document, or files=path to read a file"
        )
    if isinstance(texts, dict):
        raise TypeError("texts: expected an iterable of documents, got a dict; pass a list of dicts (one per row)")
    if _is_dataset(texts):
        documents = _dataset_texts(texts, text_column, batch_rows)
    elif isinstance(texts, pa.Table) or (hasattr(texts, "columns") and hasattr(texts, "iloc")):  # or pandas'
        names = texts.column_names if isinstance(texts, pa.Table) else list(texts.columns)
        if text_column not in names:  # iterating a table would give its column names
            raise missing_text_column(f"texts: the table has no column {text_column!r}")
        documents = _row_texts(
            texts[text_column].to_pylist() if isinstance(texts, pa.Table) else texts[text_column], text_column
        )
    elif isinstance(texts, (pa.Array, pa.ChunkedArray)):
        documents = iter(texts.to_pylist())
    elif not isinstance(texts, Iterable):
        raise TypeError(f"texts: expected an iterable of documents, such as a list of str, got {type(texts).__name__}")
    else:
        documents = _row_texts(texts, text_column)
    if sample is None and limit is None:
        return documents
    batches = (text_array(batch, k * batch_rows) for k, batch in enumerate(_batched(documents, batch_rows)))
    return (text for array in select_documents(batches, sample, seed, limit) for text in array.to_pylist())


def text_array(batch: list[str | None], first_row: int = 0) -> pa.LargeStringArray:
    """Documents as an Arrow array; a lone surrogate (no UTF-8 bytes) raises InvalidTextError naming
    its row, `first_row` being the row of `batch[0]` in `texts` (0-based, as the other row errors)."""
    try:
        return large_strings(batch)
    except UnicodeEncodeError:
        for row, text in enumerate(batch, start=first_row):
            error = lone_surrogate(text, f"texts: row {row} (0-based)") if isinstance(text, str) else None
            if error is not None:
                raise error from None
        raise


def _is_dataset(texts: object) -> bool:
    """A Hugging Face `datasets.Dataset` or `IterableDataset` (or anything shaped like one)."""
    return all(hasattr(texts, name) for name in ("iter", "select_columns", "column_names"))


def _dataset_texts(dataset, text_column: str, batch_rows: int) -> Iterator[str | None]:
    columns = dataset.column_names
    if columns is not None and text_column not in columns:
        raise missing_text_column(
            f"texts: the dataset has no column {text_column!r} (columns: {', '.join(columns) or 'none'})"
        )
    row = 0
    for batch in dataset.select_columns([text_column]).iter(batch_size=batch_rows):
        for value in batch[text_column]:
            if value is not None and not isinstance(value, str):
                raise InputError(f"texts: row {row}: column {text_column!r} holds {type(value).__name__}, not a string")
            row += 1
            yield value


def _row_texts(rows: Iterable, text_column: str) -> Iterator[str | None]:
    """Strings as they are; dicts (any mapping) by their `text_column` field; anything else refused."""
    from collections.abc import Mapping

    for row, value in enumerate(rows):
        if isinstance(value, Mapping):
            if text_column not in value:
                raise missing_text_column(
                    f"texts: row {row} has no field {text_column!r} (fields: {', '.join(map(str, value)) or 'none'})"
                )
            value = value[text_column]
            if value is not None and not isinstance(value, str):
                raise InputError(f"texts: row {row}: field {text_column!r} holds {type(value).__name__}, not a string")
        elif value is not None and not isinstance(value, str):
            raise TypeError(f"texts: row {row} is a {type(value).__name__}, not a str or a dict")
        yield value


def _batched(items: Iterator, n: int) -> Iterator[list]:
    batch = []
    for item in items:
        batch.append(item)
        if len(batch) >= n:
            yield batch
            batch = []
    if batch:
        yield batch


def missing_text_column(where: str) -> InputError:
    """`<where>; choose one with text_column`: input without the text column, naming the setting
    that chooses it as the caller spells it (`--text-column` on the command line), also when a
    Dask worker read the input."""
    return InputError(partial(_choose_text_column, where), parameter="text_column")


def _choose_text_column(where: str, s: Spelling) -> str:
    return f"{where}; choose one with {s.text_column}"

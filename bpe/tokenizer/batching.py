"""Encoding many texts at once: a batch's texts checked, and split into runs of consecutive rows
that threads encode in order (`Tokenizer.encode_batch` and its kin).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from bpe.errors import SettingsError

T = TypeVar("T")


def text_list(texts: Sequence[str]) -> list[str]:
    """`texts` as a list of strings; a bare string (a common slip) raises SettingsError."""
    if isinstance(texts, str):
        raise SettingsError(
            "texts: expected a list of strings, got one str (wrap it in a list: [text])", parameter="texts"
        )
    return list(texts)


def in_runs(rows: list[str], encode_run: Callable[[list[str]], T], num_threads: int) -> list[T]:
    """`encode_run` of consecutive runs of the rows, on `num_threads` threads, in order. A thread
    takes a run at a time (about 8 runs per thread, for balance), not one row at a time as tiktoken's
    `encode_batch` does: a future per row costs about as much as encoding a short row, and its
    threads then mostly wait for the GIL. tiktoken encodes without holding the GIL."""
    if num_threads == 1 or len(rows) < 2:
        return [encode_run(rows)]
    step = -(-len(rows) // min(len(rows), num_threads * 8))
    with ThreadPoolExecutor(num_threads) as pool:
        return list(pool.map(lambda start: encode_run(rows[start : start + step]), range(0, len(rows), step)))


def check_num_threads(num_threads: int) -> None:
    if not isinstance(num_threads, int) or isinstance(num_threads, bool) or num_threads < 1:
        raise SettingsError(f"num_threads: expected an integer >= 1, got {num_threads!r}", parameter="num_threads")

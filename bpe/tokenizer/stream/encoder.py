"""The encoding stage of `encode_inputs`: each batch of texts encoded on the tokenizer's threads
(`Tokenizer.encode_batch_to_numpy`), a document's pieces joined, the end-of-text id appended; and
`ahead`, which runs a stage on a thread of its own so that reading, encoding and writing overlap.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from bpe.engine.errors import Spelling
from bpe.errors import SpecialTokenError
from bpe.tokenizer.stream.reader import Batch

if TYPE_CHECKING:
    from bpe.tokenizer import Tokenizer

AHEAD = 2  # batches each stage may run ahead of the next

T = TypeVar("T")


@dataclass
class Encoded:
    """A batch's ids, and the positions in them where documents end (after the end-of-text token,
    with `eot`); ids after the last end belong to a document that goes on in the next batch."""

    ids: np.ndarray
    ends: np.ndarray
    text_bytes: int
    read: int
    nulls: int
    tokens: int  # ids of the text, less the end-of-text tokens added


def encode_texts(
    batches: Iterable[Batch],
    tokenizer: Tokenizer,
    num_threads: int,
    special_as_text: bool,
    eot: int | None,
    allow_special: bool = False,
    names: Spelling = Spelling(),
) -> Iterator[Encoded]:
    """Each batch encoded on `num_threads` threads, its pieces of one document joined, and `eot`
    (an id, or None) appended after each document that ends in it. A special token's text in a
    document is an error naming the document (so that no document can forge a boundary), unless
    `allow_special` encodes it as the special token or `special_as_text` as ordinary text."""
    allowed = "all" if allow_special else ()
    for batch in batches:
        try:
            ids, offsets = tokenizer.encode_batch_to_numpy(
                batch.texts, num_threads=num_threads, allowed_special=allowed, special_as_text=special_as_text
            )
        except SpecialTokenError as exc:
            raise SpecialTokenError(
                f"{batch.origin_of(exc.row or 0)}: holds the special token {exc.token!r} as text; pass "
                f"{names.on('allow_special')} to encode it as the special token, or {names.on('special_as_text')} "
                "as ordinary text"
            ) from None
        tokens = len(ids)
        ends = offsets[1:][np.asarray(batch.ends, dtype=bool)] if batch.texts else np.zeros(0, np.int64)
        if eot is not None and len(ends):
            ids = np.insert(ids, ends, np.asarray(eot, dtype=ids.dtype))
            ends = ends + np.arange(1, len(ends) + 1)
        yield Encoded(ids, ends, batch.text_bytes, batch.read, batch.nulls, tokens)


def ahead(items: Iterator[T], depth: int = AHEAD) -> Iterator[T]:
    """The items, produced by a thread of their own up to `depth` ahead of the consumer; an error
    there is raised here. Stopping early (an error, Ctrl-C) stops the thread at its next item."""
    slots: queue.Queue = queue.Queue(depth)
    stop = threading.Event()
    done = object()

    def put(entry: tuple[bool, object]) -> bool:
        while not stop.is_set():
            try:
                slots.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put((True, item)):
                    break
            else:
                put((True, done))
        except BaseException as exc:  # raised again in the consumer
            put((False, exc))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=produce, name="bpe-encode-ahead", daemon=True)
    thread.start()
    try:
        while True:
            ok, item = slots.get()
            if not ok:
                raise item  # type: ignore[misc]
            if item is done:
                return
            yield item  # type: ignore[misc]
    finally:
        stop.set()

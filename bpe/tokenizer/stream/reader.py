"""The reading stage of `encode_inputs`: the documents of the inputs, in batches of about
`BATCH_BYTES` of text, read by the training readers (`bpe.inputs`: every format, compression,
`text_column`, `text_format`).

A text file read as one document comes in pieces cut where the split pattern cannot join text
across the cut (`bpe.inputs.readers.txt_chunks`): encoding the pieces gives exactly the ids of the
whole text, and a batch marks where each document ends.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from bpe.errors import InputError
from bpe.inputs.discover import STDIN, Skipped, discover, stdin_shard
from bpe.inputs.read import read_batches
from bpe.inputs.readers import check_parquet
from bpe.inputs.shard import Shard, with_options

if TYPE_CHECKING:
    from bpe.tokenizer import Tokenizer

BATCH_BYTES = 2 << 20  # text encoded at a time; a few batches are in memory at once
# A text file read as one document comes in pieces of about this size, several to a batch (encoded
# on as many threads). As a Python str a piece may take 4 bytes per character (one emoji does it).
PIECE_BYTES = 1 << 18


@dataclass(frozen=True)
class Inputs:
    """What to encode: `text` (as bytes), or the `specs` (files, directories, globs, URLs, `-` for
    stdin) in the order given; `implicit_stdin` when stdin is read because nothing was named."""

    specs: tuple[str, ...] = ()
    text: bytes | None = None
    implicit_stdin: bool = False


def find_shards(inputs: Inputs, text_format: str, text_column: str) -> tuple[list[Shard], Skipped]:
    """The shards to encode, in the order of the inputs (a directory's or glob's files sorted by
    path), each with `text_format`; Parquet files are checked before anything is read."""
    skipped = Skipped()
    if inputs.text is not None:
        shards = [Shard("arguments", "txt", len(inputs.text), data=inputs.text)]
    else:
        if inputs.specs.count("-") > 1:
            raise InputError("-: stdin is given twice; it can be read once")
        shards = []
        for spec in inputs.specs:
            shards += [stdin_shard(streamed=True)] if spec == "-" else discover([spec], skipped)
    shards = with_options(shards, text_format)
    for shard in shards:
        if shard.kind == "parquet":
            check_parquet(shard, text_column)
    return shards, skipped


@dataclass
class Batch:
    """Texts to encode at once. `ends[i]` is False where the document goes on in the next text (a
    text file read as one document comes in pieces); `read` counts bytes of the input files."""

    texts: list[str] = field(default_factory=list)
    ends: list[bool] = field(default_factory=list)
    text_bytes: int = 0
    read: int = 0
    nulls: int = 0
    origins: list[Origin] = field(default_factory=list)

    def origin_of(self, index: int) -> str:
        """Where text `index` of the batch comes from: `data.parquet: document 12` (counting the
        file's documents from 0), or the file alone for a text file read as one document."""
        origin = next(o for o in reversed(self.origins) if o.start <= index)
        if origin.document is None:
            return origin.path
        return f"{origin.path}: document {origin.document + index - origin.start}"


@dataclass
class Origin:
    """Texts `start`, `start + 1`, ... of a batch are documents `document`, `document + 1`, ... of
    the file `path` (None: pieces of a file read as one document)."""

    start: int
    path: str
    document: int | None


def read_texts(
    shards: Iterable[Shard],
    text_column: str,
    tokenizer: Tokenizer,
    batch_bytes: int = BATCH_BYTES,
    drop_final_newline: bool = False,
) -> Iterator[Batch]:
    """The documents of the shards, in batches of about `batch_bytes` of text. Null rows are
    skipped (and counted). `drop_final_newline`: stdin read as one document loses one final
    newline, as `bpe encode` always did (`echo` adds one)."""
    batch = Batch()
    for shard in shards:
        strip = drop_final_newline and shard.path == STDIN
        whole = shard.kind == "txt" and shard.text_format == "doc"
        documents = 0
        for texts, ends, text_bytes, read, nulls in _documents(shard, text_column, tokenizer, strip):
            if texts:
                batch.origins.append(Origin(len(batch.texts), shard.path, None if whole else documents))
                documents += len(texts)
            batch.texts += texts
            batch.ends += ends
            batch.text_bytes += text_bytes
            batch.read += read
            batch.nulls += nulls
            if batch.text_bytes >= batch_bytes:
                yield batch
                batch = Batch()
    if batch.texts or batch.read or batch.nulls:
        yield batch


def _documents(
    shard: Shard, text_column: str, tokenizer: Tokenizer, drop_final_newline: bool
) -> Iterator[tuple[list[str], list[bool], int, int, int]]:
    """(texts, ends, text bytes, file bytes read, null rows) of each batch the shard's reader gives.
    A text file read as one document comes in pieces: each is held back until the next one shows
    that it was not the last."""
    batches = read_batches(shard, text_column, pretokenizer=tokenizer.pretokenizer, chunk_bytes=PIECE_BYTES)
    if not (shard.kind == "txt" and shard.text_format == "doc"):
        for array, read in batches:
            nulls = array.null_count
            if nulls:
                array = array.drop_null()
            texts = array.to_pylist()
            yield texts, [True] * len(texts), _utf8_bytes(array), read, nulls
        return
    held: tuple[str, int] = ("", 0)  # an empty file is one empty document
    first = True
    for array, read in batches:
        if len(array) == 0:  # the rest of a compressed file's bytes, for progress
            yield [], [], 0, read, 0
            continue
        if not first:
            yield [held[0]], [False], held[1], 0, 0
        held, first = (array[0].as_py(), _utf8_bytes(array)), False
        yield [], [], 0, read, 0
    text, size = held
    if drop_final_newline and text.endswith("\n"):
        text, size = text[:-1], size - 1
    yield [text], [True], size, 0, 0


def _utf8_bytes(array: pa.Array) -> int:
    return int(pc.sum(pc.binary_length(array)).as_py() or 0) if len(array) else 0

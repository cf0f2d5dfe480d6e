"""Token ids of files, stdin or text, streamed in bounded memory: `encode_inputs`, what `bpe encode`
runs.

Three stages overlap: a reader thread reads the inputs in batches of about `BATCH_BYTES` of text
(`reader`), an encoder thread encodes each batch on the tokenizer's threads (`encoder`), and the
calling thread writes (`writers`), so memory holds a few batches whatever the size of the input.

Outputs (`OUTPUT_FORMATS`): `txt`, `jsonl`, `npy` and `bin` (see `writers`). `eot` appends the
tokenizer's end-of-text token after each document; `offsets` writes where each document starts in
the flat sequence. A file is written under a temporary name beside it and renamed into place when
complete; an existing one is kept unless `force`.

A special token's text inside a document (`<|endoftext|>` typed into a web page) is an error naming
the file and document, as in `Tokenizer.encode`: it would otherwise become a document boundary
that no one put there. `allow_special` encodes it as the special token, `special_as_text` as text.
Errors name the options as parameters (`format`), or as `names` spells them (`--format`).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from bpe.engine.errors import Spelling
from bpe.errors import SettingsError
from bpe.tokenizer.stream.encoder import Encoded, ahead, encode_texts
from bpe.tokenizer.stream.reader import BATCH_BYTES, Inputs, find_shards, read_texts
from bpe.tokenizer.stream.writers import (
    OUTPUT_FORMATS,
    BinaryWriter,
    OffsetsWriter,
    Target,
    TextWriter,
    check_distinct,
    close_abandoned,
    ids_writer,
    output_format,
)

if TYPE_CHECKING:
    from bpe.tokenizer import Tokenizer

__all__ = ["OUTPUT_FORMATS", "Inputs", "Summary", "encode_inputs"]


@dataclass
class Summary:
    """What an encode run did, for its last line on stderr (and for scripts and benchmarks)."""

    files: int = 0
    input_bytes: int = 0
    documents: int = 0
    nulls: int = 0
    text_bytes: int = 0
    tokens: int = 0
    ids_written: int = 0
    seconds: float = 0.0
    dtype: str = ""
    out: str = "stdout"
    format: str = "txt"
    skipped: str | None = None

    def line(self) -> str:
        """`encoded 292,218 documents from 8 input(s) (30.7 MB read): 49.0 MB of text -> 12,705,101
        tokens (3.854 bytes per token) in 5.2 s: 9.4 MB of text/s, 2,443,289 tokens/s; npy (uint16)
        -> ids.npy`. What was read is the inputs' bytes (compressed, Parquet: as stored; none said
        for stdin and text given as arguments), the text the UTF-8 bytes encoded. The tokens are the
        ids written; with end-of-text ids among them, `(12,412,883 of text + 292,218 end-of-text;
        3.948 bytes per text token)`."""
        s = max(self.seconds, 1e-9)
        nulls = f" ({self.nulls:,} null rows skipped)" if self.nulls else ""
        read = f" ({self.input_bytes / 1e6:,.1f} MB read)" if self.input_bytes else ""
        kind = f"{self.format} ({self.dtype})" if self.format in ("npy", "bin") else self.format
        return (
            f"encoded {self.documents:,} document(s){nulls} from {self.files} input(s){read}: "
            f"{self.text_bytes / 1e6:,.1f} MB of text -> {self.ids_written:,} tokens{self._breakdown()} in "
            f"{self.seconds:.1f} s: {self.text_bytes / 1e6 / s:,.1f} MB of text/s, "
            f"{self.ids_written / s:,.0f} tokens/s; {kind} -> {self.out}"
        )

    def _breakdown(self) -> str:
        """` (3.854 bytes per token)`, or with end-of-text ids written, how many, and the bytes per
        token of the text alone."""
        end_of_text = self.ids_written - self.tokens
        parts = [f"{self.tokens:,} of text + {end_of_text:,} end-of-text"] if end_of_text else []
        if self.tokens:
            parts.append(f"{self.text_bytes / self.tokens:.3f} bytes per {'text ' if end_of_text else ''}token")
        return f" ({'; '.join(parts)})" if parts else ""


class _Progress:
    """One line on stderr, drawn at the first batch and redrawn at most 4 times a second after it,
    when stderr is a terminal: the share of the inputs' bytes read (as stored: compressed, Parquet),
    then the text encoded, in the summary's units: `encoding: 98% of 30.7 MB read, 48.0 MB of text,
    12,440,108 tokens, 9.4 MB of text/s`."""

    def __init__(self, total_read: int, enabled: bool) -> None:
        self.total, self.enabled = total_read, enabled and sys.stderr.isatty()
        self.started, self.last = time.perf_counter(), None
        self.read = self.text_bytes = self.tokens = 0

    def update(self, batch: Encoded) -> None:
        self.read += batch.read
        self.text_bytes += batch.text_bytes
        self.tokens += len(batch.ids)  # as the summary counts them: the ids written
        now = time.perf_counter()
        if not self.enabled or (self.last is not None and now - self.last < 0.25):
            return
        self.last = now
        rate = self.text_bytes / 1e6 / max(now - self.started, 1e-9)
        share = ""
        if self.total:  # the files' bytes as stored (compressed, Parquet); not the text's
            share = f"{100 * min(self.read / self.total, 1):.0f}% of {self.total / 1e6:,.1f} MB read, "
        sys.stderr.write(
            f"\rencoding: {share}{self.text_bytes / 1e6:,.1f} MB of text, {self.tokens:,} tokens, "
            f"{rate:,.1f} MB of text/s\x1b[K"
        )
        sys.stderr.flush()

    def finish(self) -> None:
        if self.last is not None:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


def encode_inputs(
    tokenizer: Tokenizer,
    inputs: Inputs,
    *,
    out: str | None = None,
    format: str | None = None,
    force: bool = False,
    eot: bool = False,
    offsets: str | None = None,
    text_column: str = "text",
    text_format: str = "doc",
    num_threads: int | None = None,
    allow_special: bool = False,
    special_as_text: bool = False,
    progress: bool = True,
    batch_bytes: int | None = None,
    names: Spelling = Spelling(),
) -> Summary:
    """Encode the inputs into `out` (stdout when None) as `format` (one of OUTPUT_FORMATS; by
    default the one `out`'s suffix names, else txt); see the module's docstring. Errors name the
    options as `names` spells them (by default as these parameters)."""
    pa.set_memory_pool(pa.system_memory_pool())  # jemalloc, Arrow's default, keeps freed batches
    fmt = output_format(format, out, names)
    if out == "-":
        out = None
    if fmt == "npy" and out is None:
        raise SettingsError(
            f"{names('format')} npy needs {names('out')}: the length, in the header, is known only at the end",
            parameter="format",
        )
    if fmt in ("npy", "bin") and out is None and sys.stdout.isatty():
        raise SettingsError(
            f"{names('format')} {fmt}: binary ids are not written to a terminal; give {names('out')} or redirect",
            parameter="format",
        )
    eot_id = None
    if eot:
        eot_id = tokenizer.eot_token
        if eot_id is None:
            raise SettingsError(
                f"{names('eot')}: this tokenizer has no end-of-text token (<|endoftext|> or an eos role)",
                parameter="eot",
            )
    threads = num_threads or _cores()
    check_distinct(out, offsets, names)
    replace_hint = f"use {names.on('force')} to replace it"
    target = Target(out, fmt in ("npy", "bin"), force, f"{names('out')} {out}", replace_hint)
    offsets_target = Target(offsets, True, force, f"{names('offsets')} {offsets}", replace_hint) if offsets else None
    shards, skipped = find_shards(inputs, text_format, text_column)
    summary = Summary(
        files=len(shards), dtype=tokenizer.ids_dtype.name, out=out or "stdout", format=fmt, skipped=skipped.summary()
    )
    started = time.perf_counter()
    meter = _Progress(sum(s.size for s in shards) if inputs.text is None else 0, progress)  # files' bytes
    targets = [t for t in (target, offsets_target) if t is not None]
    stream = offsets_stream = None
    try:
        stream = target.open()
        writer: TextWriter | BinaryWriter = ids_writer(stream, fmt, tokenizer.ids_dtype, tokenizer.n_vocab)
        offsets_stream = offsets_target.open() if offsets_target is not None else None
        offsets_writer = OffsetsWriter(offsets_stream) if offsets_stream is not None else None
        batches = read_texts(shards, text_column, tokenizer, batch_bytes or BATCH_BYTES, drop_final_newline=True)
        encoded = ahead(encode_texts(ahead(batches), tokenizer, threads, special_as_text, eot_id, allow_special, names))
        try:
            for batch in encoded:
                writer.write(batch.ids, batch.ends)
                if offsets_writer is not None:
                    offsets_writer.write(batch.ids, batch.ends)
                summary.documents += len(batch.ends)
                summary.nulls += batch.nulls
                summary.text_bytes += batch.text_bytes
                summary.tokens += batch.tokens
                summary.ids_written += len(batch.ids)
                meter.update(batch)
        finally:
            encoded.close()  # type: ignore[attr-defined]
            meter.finish()
        writer.close()
        if offsets_writer is not None:
            offsets_writer.close()
        for stream_ in (stream, offsets_stream):
            if stream_ is not None:
                stream_.flush()
                if stream_ not in (sys.stdout, sys.stdout.buffer):
                    stream_.close()
        for t in targets:
            t.commit()
    except BaseException:
        for stream_ in (stream, offsets_stream):
            if stream_ is not None and stream_ not in (sys.stdout, sys.stdout.buffer):
                close_abandoned(stream_)
        for t in targets:
            t.abort()
        raise
    summary.seconds = time.perf_counter() - started
    summary.input_bytes = meter.read if meter.total else 0
    return summary


def _cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return max(len(os.sched_getaffinity(0)), 1)
    return os.cpu_count() or 1

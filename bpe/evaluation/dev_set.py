"""A multi-parallel dev set: the same sentences in several languages, line i of every language the
translation of line i of the others (NTREX-128, FLORES-200), which is what makes token counts
comparable across languages. Read from a directory of `<code>.txt` (one sentence per line) or
`<code>.parquet` (one sentence per row), or given as a mapping of code -> sentences; languages
are always held in the sorted order of their codes.

The one reader of dev sets: `bpe eval --dev`, the pipeline's `evaluation: {dev: DIR}` and
parity-aware training's `--parity-dev` all find the files with `language_files` and read them
with `sentence_batches`, a batch of sentences at a time, so a large set is never held whole. A
file that is not a regular file (a FIFO, a device) is refused without being opened for reading.

>>> dev = dev_set({"hin": ["नमस्ते"], "eng": ["Hello"]})
>>> dev.codes, dev.sentences
(('eng', 'hin'), 1)
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from bpe import storage
from bpe.errors import InputError, SettingsError
from bpe.inputs.plain_text import BOM
from bpe.languages.codes import CODE, entries, language_of

SUFFIXES = (".txt", ".parquet")
# How a dev set's file is opened: a regular file (or a link to one), of any size, read in blocks.
DEV_FILE = storage.Checked(InputError, ", so not a dev set's file")
BLOCK_BYTES = 1 << 22  # text read at a time: a batch of sentences is the whole lines of a block
PARQUET_ROWS = 16_384  # rows read at a time from a Parquet file


@dataclass(frozen=True)
class DevSet:
    """A checked dev set: its languages (codes in sorted order) and where each is read from
    (`sources`: its file; None for texts given in Python, held in `given`), every language the
    same number of sentences. A directory's files are read again, a batch at a time, each time
    their sentences are wanted (`batches`); `texts` reads them whole, for small sets."""

    sources: dict[str, str | None]
    sentences: int  # per language (the same in every language)
    bytes: dict[str, int]  # UTF-8 bytes of each language's sentences
    digest: str  # see `fingerprint`
    location: str | None = None
    text_column: str = "text"
    given: dict[str, list[str]] | None = None

    @property
    def codes(self) -> tuple[str, ...]:
        return tuple(self.sources)

    def batches(self, code: str) -> Iterator[list[str]]:
        """The sentences of one language, in order, a batch at a time."""
        if self.given is not None:
            yield self.given[code]
        else:
            yield from sentence_batches(str(self.sources[code]), self.text_column)

    @property
    def texts(self) -> dict[str, list[str]]:
        """Every language's sentences, read whole."""
        return {code: [text for batch in self.batches(code) for text in batch] for code in self.codes}

    def fingerprint(self) -> str:
        """SHA-256 of the codes and their sentences in order, each length-prefixed: two dev sets
        have the same fingerprint only if they hold the same sentences in the same languages."""
        return self.digest

    def describe(self) -> dict:
        """Where the set came from, what it holds, and its fingerprint (for a manifest or a JSON report)."""
        return {
            "location": self.location,
            "languages": list(self.codes),
            "sentences": self.sentences,
            "bytes": dict(self.bytes),
            "fingerprint": self.digest,
        }


def dev_set(
    dev: DevSet | Mapping[str, Sequence[str]] | str | os.PathLike,
    languages: Iterable[str] | None = None,
    text_column: str = "text",
) -> DevSet:
    """A checked DevSet from `dev`: a DevSet, a mapping of language code -> sentences, or a
    directory (path or URL) of `<code>.txt` / `<code>.parquet` files. `languages` keeps only those
    codes (each must be in the set). Every language must hold as many sentences as the others:
    unequal counts are one line naming the two files (or languages) that differ."""
    if isinstance(dev, DevSet):
        found = dev
    elif isinstance(dev, Mapping):
        found = _given(dev)
    elif isinstance(dev, (str, os.PathLike)):
        return read_dev_set(dev, languages, text_column)
    else:
        raise SettingsError(
            lambda s: (
                f"{s.dev}: expected a directory of <code>.txt or <code>.parquet files, or a mapping of language code "
                f"-> sentences, got {type(dev).__name__}"
            ),
            parameter="dev",
        )
    if languages is None:
        return found
    wanted = _wanted(languages, found.sources, found.location)
    if list(wanted) == list(found.codes):
        return found
    given = {code: found.given[code] for code in wanted} if found.given is not None else None
    return _scanned(
        {code: found.sources[code] for code in wanted}, found.batches, found.location, found.text_column, given
    )


def _given(dev: Mapping[str, Sequence[str]]) -> DevSet:
    """A DevSet of texts given in Python, checked as a directory's files are."""
    texts: dict[str, list[str]] = {}
    for code in sorted(dev, key=str):
        if not isinstance(code, str) or not CODE.fullmatch(code):
            raise SettingsError(
                lambda s, code=code: (
                    f"{s.dev}: {code!r} is not a language code (lowercase letters, digits, '_' or '-', starting "
                    "with a letter: 'eng')"
                ),
                parameter="dev",
            )
        sentences = dev[code]
        if isinstance(sentences, str) or not all(isinstance(t, str) for t in sentences):
            raise SettingsError(
                lambda s, code=code: f"{s.dev}: {code!r}: expected a list of sentences (strings)", parameter="dev"
            )
        texts[code] = list(sentences)
    if not texts:
        raise SettingsError(lambda s: f"{s.dev}: no language in the dev set", parameter="dev")
    return _scanned(dict.fromkeys(texts), lambda code: iter([texts[code]]), None, "text", texts)


def read_dev_set(
    directory: str | os.PathLike, languages: Iterable[str] | None = None, text_column: str = "text"
) -> DevSet:
    """The dev set in `directory` (a local path or an object store URL): one `<code>.txt` file
    (UTF-8, a sentence per line) or `<code>.parquet` file (a sentence per row of `text_column`)
    per language; a file not named by a language code (`README.txt`) is not part of it. With
    `languages`, only those files are read (each must be there)."""
    location = str(directory)
    files = language_files(location)
    wanted = _wanted(languages, files, location)
    return read_files({code: files[code] for code in wanted}, location, text_column)


def read_files(files: Mapping[str, str], location: str | None = None, text_column: str = "text") -> DevSet:
    """The dev set of these files (code -> path, codes sorted), read through once to check them:
    each a regular file of sentences, every language as many as the others."""
    return _scanned(dict(files), lambda code: sentence_batches(files[code], text_column), location, text_column)


def _scanned(
    sources: dict[str, str | None],
    batches: Callable[[str], Iterable[list[str]]],
    location: str | None,
    text_column: str,
    given: dict[str, list[str]] | None = None,
) -> DevSet:
    """A DevSet of `sources`, whose sentences `batches` gives a language at a time, read through
    once for their count, bytes and fingerprint; unequal counts are refused (`check_parallel`)."""
    digest = hashlib.sha256()
    counts, sizes = {}, {}
    for code in sources:
        count = size = 0
        data = code.encode("utf-8")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
        for batch in batches(code):
            for text in batch:
                data = text.encode("utf-8")
                digest.update(len(data).to_bytes(8, "little"))
                digest.update(data)
                size += len(data)
            count += len(batch)
        digest.update(b"\xff" * 8)  # the end of a language: no code's length prefix is this
        counts[code], sizes[code] = count, size
    check_parallel(counts, sources)
    sentences = next(iter(counts.values()), 0)
    return DevSet(sources, sentences, sizes, digest.hexdigest(), location, text_column, given)


def language_files(location: str, setting: str | None = None) -> dict[str, str]:
    """code -> file of each language in the dev set's directory (a path or URL), codes sorted:
    `<code>.txt` or `<code>.parquet`; a name that is not a language code (README.md, a hidden
    file) is not part of the set. With `setting`, what is not a dev set's directory is a
    SettingsError naming it (`parity_dev`); an InputError naming the directory otherwise."""

    def refuse(what: str) -> Exception:
        if setting is None:
            return InputError(f"{location}: {what}")
        return SettingsError(lambda s: f"{s(setting)}: {location}: {what}", parameter=setting)

    names = entries(
        location, lambda what: refuse(f"{what} (a dev set is a directory of <code>.txt or <code>.parquet files)")
    )
    files: dict[str, str] = {}
    for name in names:
        stem, suffix = os.path.splitext(name)
        if suffix not in SUFFIXES or language_of(name) != stem:  # README.txt, .hidden.txt: not a language's
            continue
        if stem in files:
            raise refuse(f"both {stem}.txt and {stem}.parquet: keep one file per language")
        files[stem] = storage.join(location, name)
    if not files:
        raise refuse("holds no <code>.txt or <code>.parquet file (one per language, named by its code: eng.txt)")
    return dict(sorted(files.items()))


def _wanted(languages: Iterable[str] | None, available: Mapping[str, object], location: str | None) -> list[str]:
    """The codes to keep, sorted: `languages` (each must be available), or every available one."""
    if languages is None:
        return list(available)
    if isinstance(languages, str):
        languages = [languages]
    wanted = sorted(set(languages))
    if not wanted:
        raise SettingsError(lambda s: f"{s.languages}: expected at least one language code", parameter="languages")
    where = f" {location}" if location else ""
    for code in wanted:
        if code not in available:
            raise SettingsError(
                lambda s, code=code: (
                    f"{s.languages}: {code!r} is not in the dev set{where} (it has {', '.join(available)})"
                ),
                parameter="languages",
            )
    return wanted


def sentence_batches(path: str, text_column: str = "text") -> Iterator[list[str]]:
    """The sentences of one dev set file, in order, a batch at a time: a `.parquet` file's
    `text_column`, a row each; a text file's lines (split on newlines: a final newline ends the
    last line, a CR before a newline is dropped, a byte-order mark at the start is not text).
    A FIFO or a device is refused before it is read, a URL that cannot be read is one line."""
    with storage.naming_url(path):
        if path.endswith(".parquet"):
            yield from _parquet_batches(path, text_column)
        else:
            yield from _line_batches(path)


def _line_batches(path: str) -> Iterator[list[str]]:
    """A text file's lines, the whole lines of a block at a time (never cut inside a character:
    no byte of one is a newline)."""
    with storage.open_regular(path, DEV_FILE) as f:
        head = f.read(len(BOM))
        pending, offset = (b"", len(BOM)) if head == BOM else (head, 0)  # `pending` starts at `offset`
        while True:
            block = f.read(BLOCK_BYTES)
            data = pending + block
            end = len(data) if not block else data.rfind(b"\n") + 1
            if block and end == 0:  # no newline yet: a line longer than a block
                pending = data
                continue
            try:
                text = data[:end].decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(
                    f"{path}: not UTF-8 text (invalid byte 0x{data[exc.start]:02x} at offset {offset + exc.start})"
                ) from None
            lines = text.split("\n")
            if text.endswith("\n") or not text:
                lines.pop()  # after the last newline: nothing
            if lines:
                yield [line.removesuffix("\r") for line in lines]
            pending, offset = data[end:], offset + end
            if not block:
                return


def _parquet_batches(path: str, column: str) -> Iterator[list[str]]:
    """A Parquet file's `column`, a batch of rows at a time; each row must hold a sentence."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    storage.open_regular(path, DEV_FILE).close()  # a FIFO or a device: refused before Parquet opens it
    row = 0
    try:
        with storage.open_read(path) as f:
            parquet = pq.ParquetFile(f)
            names = parquet.schema_arrow.names
            if column not in names:
                raise InputError(f"{path}: no column {column!r} (it has {', '.join(names)})")
            for batch in parquet.iter_batches(batch_size=PARQUET_ROWS, columns=[column]):
                values = batch.column(0).to_pylist()
                for i, value in enumerate(values):
                    if not isinstance(value, str):
                        raise InputError(f"{path}: row {row + i}: expected a sentence (text), got {value!r}")
                row += len(values)
                yield values
    except pa.ArrowException as exc:
        raise InputError(f"{path}: not a Parquet file this can read ({str(exc).splitlines()[0]})") from None


def file_record(path: str) -> dict:
    """A dev set file's path, size and SHA-256 as stored (what makes it the same file, for a
    manifest and the data's fingerprint), read in blocks."""
    digest, size = hashlib.sha256(), 0
    with storage.naming_url(path), storage.open_regular(path, DEV_FILE) as f:
        while block := f.read(BLOCK_BYTES):
            digest.update(block)
            size += len(block)
    return {"path": path, "size": size, "sha256": digest.hexdigest()}


def check_parallel(counts: Mapping[str, int], sources: Mapping[str, str | None]) -> None:
    """Every language of a parallel dev set holds the same number of sentences (`counts`, by
    code): otherwise one line naming the first language (in code order) and the first whose count
    differs from it, by its file (`sources`) or its code."""
    first = next(iter(counts), None)
    for code, count in counts.items():
        if count != counts[first]:
            unit = "line" if (sources[code] or "").endswith(".txt") else "sentence"

            def named(c: str) -> str:
                return sources[c] or repr(c)

            raise InputError(
                f"{named(code)} has {count:,} {unit}{'s' if count != 1 else ''} but {named(first)} has "
                f"{counts[first]:,}: a parallel dev set "
                "holds the same sentences, line for line, in every language"
            )

"""A multi-parallel dev set: the same sentences in several languages, line i of every language the
translation of line i of the others (NTREX-128, FLORES-200), which is what makes token counts
comparable across languages. Read from a directory of `<code>.txt` (one sentence per line) or
`<code>.parquet` (one sentence per row), or given as a mapping of code -> sentences; languages
are always held in the sorted order of their codes.

>>> dev = dev_set({"hin": ["नमस्ते"], "eng": ["Hello"]})
>>> dev.codes, dev.sentences
(('eng', 'hin'), 1)
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bpe import storage
from bpe.errors import InputError, SettingsError

CODE = re.compile(r"[a-z][a-z0-9_-]*")
SUFFIXES = (".txt", ".parquet")


@dataclass(frozen=True)
class DevSet:
    """Sentences by language, codes in sorted order, every language the same number of sentences.
    `sources` names where each language was read from (its file; None for texts given in Python)."""

    texts: dict[str, list[str]]
    sources: dict[str, str | None]
    location: str | None = None

    @property
    def codes(self) -> tuple[str, ...]:
        return tuple(self.texts)

    @property
    def sentences(self) -> int:
        """Sentences per language (the same in every language)."""
        return len(next(iter(self.texts.values()), []))

    def fingerprint(self) -> str:
        """SHA-256 of the codes and their sentences in order, each length-prefixed: two dev sets
        have the same fingerprint only if they hold the same sentences in the same languages."""
        digest = hashlib.sha256()
        for code, texts in self.texts.items():
            for part in (code, *texts):
                data = part.encode("utf-8")
                digest.update(len(data).to_bytes(8, "little"))
                digest.update(data)
            digest.update(b"\xff" * 8)  # the end of a language: no code's length prefix is this
        return digest.hexdigest()

    def describe(self) -> dict:
        """Where the set came from, what it holds, and its fingerprint (for a manifest or a JSON report)."""
        return {
            "location": self.location,
            "languages": list(self.codes),
            "sentences": self.sentences,
            "bytes": {code: sum(len(t.encode("utf-8")) for t in texts) for code, texts in self.texts.items()},
            "fingerprint": self.fingerprint(),
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
    return _kept(found, languages)


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
    found = DevSet(texts, dict.fromkeys(texts))
    check_parallel(found)
    return found


def read_dev_set(
    directory: str | os.PathLike, languages: Iterable[str] | None = None, text_column: str = "text"
) -> DevSet:
    """The dev set in `directory` (a local path or an object store URL): one `<code>.txt` file
    (UTF-8, a sentence per line) or `<code>.parquet` file (a sentence per row of `text_column`)
    per language; a file not named by a language code (`README.txt`) is not part of it. With
    `languages`, only those files are read."""
    location = str(directory)
    files = _language_files(location)
    wanted = _wanted(languages, files, location)
    texts, sources = {}, {}
    for code in wanted:
        path = files[code]
        texts[code] = _read_parquet(path, text_column) if path.endswith(".parquet") else _read_lines(path)
        sources[code] = path
    found = DevSet(texts, sources, location)
    check_parallel(found)
    return found


def _language_files(location: str) -> dict[str, str]:
    """code -> file of each language in the directory, codes sorted."""
    remote = storage.is_remote(location)
    if remote:
        names = storage.listing(location)
    else:
        local = Path(storage.local_path(location))
        if not local.is_dir():
            what = "not a directory" if local.exists() else "no such directory"
            raise InputError(f"{location}: {what} (a dev set is a directory of <code>.txt or <code>.parquet files)")
        names = sorted(p.name for p in local.iterdir())
    files: dict[str, str] = {}
    for name in names:
        stem, suffix = os.path.splitext(name)
        if suffix not in SUFFIXES or not CODE.fullmatch(stem):  # README.txt, .hidden.txt: not a language's
            continue
        path = storage.join(location, name) if remote else str(Path(storage.local_path(location)) / name)
        if stem in files:
            raise InputError(f"{location}: both {stem}.txt and {stem}.parquet: keep one file per language")
        files[stem] = path
    if not files:
        raise InputError(
            f"{location}: holds no <code>.txt or <code>.parquet file (one per language, named by its code: eng.txt)"
        )
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


def _kept(found: DevSet, languages: Iterable[str] | None) -> DevSet:
    if languages is None:
        return found
    wanted = _wanted(languages, found.texts, found.location)
    return DevSet({c: found.texts[c] for c in wanted}, {c: found.sources[c] for c in wanted}, found.location)


def _read_lines(path: str) -> list[str]:
    """A text file's lines: split on newlines (a final newline ends the last line, and a CR before a
    newline is dropped); a byte-order mark at the start is not text."""
    try:
        data = storage.read_bytes(path)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{path}: not UTF-8 text (invalid byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None
    text = text.removeprefix("\ufeff")
    if not text:
        return []
    lines = text.removesuffix("\n").split("\n")
    return [line.removesuffix("\r") for line in lines]


def _read_parquet(path: str, column: str) -> list[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with storage.open_read(path) as f:
            schema = pq.read_schema(f)
            if column not in schema.names:
                raise InputError(f"{path}: no column {column!r} (it has {', '.join(schema.names)})")
            f.seek(0)
            values = pq.read_table(f, columns=[column]).column(column).to_pylist()
    except pa.ArrowException as exc:
        raise InputError(f"{path}: not a Parquet file this can read ({str(exc).splitlines()[0]})") from None
    for row, value in enumerate(values):
        if not isinstance(value, str):
            raise InputError(f"{path}: row {row}: expected a sentence (text), got {value!r}")
    return values


def check_parallel(dev: DevSet) -> None:
    """Every language of a parallel dev set holds the same number of sentences: otherwise one line
    naming the first language (in code order) and the first whose count differs from it."""
    counts = {code: len(texts) for code, texts in dev.texts.items()}
    first = next(iter(counts))
    for code, count in counts.items():
        if count != counts[first]:
            unit = "line" if (dev.sources[code] or "").endswith(".txt") else "sentence"

            def named(c: str) -> str:
                return dev.sources[c] or repr(c)

            raise InputError(
                f"{named(code)} has {count:,} {unit}{'s' if count != 1 else ''} but {named(first)} has "
                f"{counts[first]:,}: a parallel dev set "
                "holds the same sentences, line for line, in every language"
            )

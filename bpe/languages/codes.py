"""Language codes, and inputs given by language: `--lang eng=data/en/`, a mapping of code ->
inputs (`languages:`, `train(files={...})`) and a directory holding a file or folder per language.

Languages are named by codes (`eng`, `hin`) and always held in the sorted order of their codes,
whatever order they were given in, so that a configuration's key order never changes the merges.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from bpe.engine.errors import SettingsError, Spelling

# A language code: ISO 639-3 (`eng`, `hin`) or any other lower-case name of letters, digits, _ and -.
CODE = re.compile(r"[a-z][a-z0-9_-]*")


def check_code(code: object, name: str) -> str:
    """`code` if it is a language code; SettingsError naming the setting (`name`, spelt by the
    surface that shows it) otherwise."""
    if not isinstance(code, str) or CODE.fullmatch(code) is None:
        raise language_error(
            name,
            f"{code!r} is not a language code (lower-case letters, digits, _ or -, starting with a letter: eng, hin)",
        )
    return code


def parse_by_language(text: str, name: str, value: Callable[[str, str], Any]) -> list[tuple[str, Any]]:
    """`eng=1,hin=2.5` as [(code, value(code, "1")), ...] in the order given, each code checked and
    given once; errors name the setting `name`."""
    found: list[tuple[str, Any]] = []
    for part in text.split(","):
        code, equals, given = part.partition("=")
        if not equals:
            raise language_error(name, f"expected code=value pairs separated by commas (eng=1,hin=2), got {part!r}")
        code = check_code(code.strip(), name)
        if code in dict(found):
            raise language_error(name, f"{code} is given twice")
        found.append((code, value(code, given)))
    return found


def language_of(name: str) -> str | None:
    """The language code a directory entry is named by: `eng.txt`, `eng.jsonl.gz` and `eng` (a
    folder) are eng's; a name that does not start with a code (`README.md`, `.eng.txt`) is no
    language's (None).

    >>> [language_of(n) for n in ("eng.txt", "hin", "zho.jsonl.gz", "README.md", ".eng.txt")]
    ['eng', 'hin', 'zho', None, None]
    """
    code = name.split(".", 1)[0]
    return code if CODE.fullmatch(code) else None


def language_error(name: str, message: str) -> SettingsError:
    """`<setting>: <message>`, the setting spelt as the surface that shows it spells it."""
    return SettingsError(partial(_named, name, message), parameter=name)


def _named(name: str, message: str, spelling: Spelling) -> str:
    return f"{spelling(name)}: {message}"  # a module's function: it pickles (to a Dask client)


def by_language(value: Mapping, name: str) -> dict[str, Any]:
    """A mapping of language code -> inputs (paths, or documents), its codes checked, sorted by code."""
    if not value:
        raise language_error(name, "expected at least one language (a mapping of language code -> inputs)")
    for code in value:
        check_code(code, name)
    return {code: value[code] for code in sorted(value)}


def parse_languages(given: Sequence[str], name: str = "languages") -> dict[str, list[str]]:
    """`--lang eng=data/en/ --lang hin=data/hi/*.parquet` as {code: [input]}, sorted by code: each
    `code=input`, each language once."""
    found: dict[str, list[str]] = {}
    for item in given:
        code, equals, where = item.partition("=")
        if not equals or not where:
            raise language_error(name, f"expected CODE=INPUT (eng=data/en/), got {item!r}")
        code = check_code(code, name)
        if code in found:
            raise language_error(name, f"{code} is given twice (give it one directory or glob)")
        found[code] = [where]
    return {code: found[code] for code in sorted(found)}


def languages_in(directory: str, name: str = "lang_dir") -> dict[str, list[str]]:
    """The text by language in one directory (a path or URL), as {code: [input]} sorted by code:
    each entry named by a language code, a file `<code>.<ext>` (eng.txt, hin.parquet) or a folder
    `<code>/`; other names (README.md, hidden files) are skipped, as a dev set's directory's are.
    Errors name the setting `name`, spelt as the caller spells it."""
    from bpe import storage

    def refuse(what: str) -> Exception:
        return language_error(name, f"{directory}: {what} (expected a directory holding a file or folder per language)")

    names = entries(directory, refuse)
    found: dict[str, str] = {}
    for entry in names:
        code = language_of(entry)
        if code is None:
            continue
        if code in found:
            raise language_error(
                name, f"{directory}: both {found[code]} and {entry} are {code}'s: keep one entry per language"
            )
        found[code] = entry
    if not found:
        raise language_error(
            name, f"{directory}: holds no file or folder named by a language code (eng.txt, hin.parquet, tel/)"
        )
    return {code: [storage.join(directory, entry)] for code, entry in sorted(found.items())}


def entries(location: str, refuse: Callable[[str], Exception]) -> list[str]:
    """The names directly in a directory of text by language (a path or an object store URL),
    sorted; what is not a directory raises `refuse("not a directory")` (or "no such directory").
    The one scanner of training text by language (`languages_in`) and of dev sets."""
    from bpe import storage

    if storage.is_remote(location):
        with storage.naming_url(location):
            return sorted(storage.listing(location))
    local = storage.local_path(location)
    if not os.path.isdir(local):
        raise refuse("not a directory" if os.path.exists(local) else "no such directory")
    return sorted(os.listdir(local))

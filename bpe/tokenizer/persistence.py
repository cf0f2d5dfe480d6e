"""A tokenizer saved and loaded: every format written into a directory (or under an object store
URL), and any format read back (`bpe.formats`), through the plain record the formats share.

A directory is published whole (written into a temporary directory renamed into place; under a
URL uploaded, then marked complete), its manifest.json last; a URL is read only once its upload is
marked complete.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from bpe import storage
from bpe.errors import ExportError, SettingsError
from bpe.formats import load as formats_load
from bpe.formats import saved
from bpe.formats.files import check_size
from bpe.formats.manifest_json import MANIFEST_FILE, TOKENIZER_FILES
from bpe.formats.record import TokenizerRecord
from bpe.manifest import Manifest, TokenizerSection
from bpe.pretokenize import Pretokenizer
from bpe.tokenizer.vocabulary import Vocabulary

T = TypeVar("T")


def record(
    vocabulary: Vocabulary,
    pretokenizer: Pretokenizer,
    special_token_roles: Mapping[str, str],
    model_max_length: int | None,
) -> TokenizerRecord:
    """A tokenizer as the plain record the file formats write."""
    return TokenizerRecord(
        list(vocabulary.merges),
        pretokenizer.pattern_setting,
        dict(vocabulary.special_tokens),
        ids=vocabulary.given_ids() if vocabulary.foreign_ids else None,
        special_token_roles=dict(special_token_roles),
        model_max_length=model_max_length,
    )


def describe(
    vocabulary: Vocabulary,
    pretokenizer: Pretokenizer,
    special_token_roles: Mapping[str, str],
    model_max_length: int | None,
) -> dict:
    """The manifest's `tokenizer` section; `special_token_roles` only when a role is set (a
    manifest without it means none)."""
    described = {
        "pattern": pretokenizer.name,
        "regex": pretokenizer.regex,
        "special_tokens": vocabulary.special_tokens,
        "vocab_size": vocabulary.size,
        "merges": len(vocabulary.merges),
    }
    if special_token_roles:
        described["special_token_roles"] = dict(special_token_roles)
    if model_max_length is not None:
        described["model_max_length"] = model_max_length
    if vocabulary.foreign_ids:  # ids are a base tokenizer's (GPT-2's), not bytes, merges, specials
        described["ids"] = "kept"
    return described


def write_files(directory: Path, record: TokenizerRecord, described: dict, manifest: Manifest | None) -> None:
    """Every format of `record` into an existing directory; `manifest`, given the tokenizer's
    description (`describe`), last."""
    if manifest is not None:
        manifest.tokenizer = TokenizerSection.from_json(described)
    saved.write(directory, record, manifest)


def publish(directory: str | Path, write: Callable[[Path], None], force: bool) -> Path | str:
    """Have `write` fill a temporary directory, then publish it as `directory` (a path or URL),
    replacing tokenizer files there only with `force`."""
    storage.publish_directory(directory, write, owned=TOKENIZER_FILES, last=MANIFEST_FILE, force=force)
    return directory if storage.is_remote(directory) else Path(directory)


def load(
    make: Callable[[TokenizerRecord], T],
    path: str | Path,
    pattern: str | None,
    special_tokens: Sequence[str] | dict[str, int] | None,
) -> T:
    """The tokenizer `make` builds from the record of the files at `path`, a local path or an
    object store URL."""
    if storage.is_remote(path):
        return _load_remote(make, str(path), pattern)
    return make(formats_load.read(Path(storage.local_path(path)), pattern, special_tokens))


def _load_remote(make: Callable[[TokenizerRecord], T], url: str, pattern: str | None) -> T:
    """Download the tokenizer files under `url` and load them; errors name the URL."""
    present = storage.sizes(url)
    for name in TOKENIZER_FILES:
        if name in present:  # before downloading it
            check_size(f"{url.rstrip('/')}/{name}", present[name])
    if MANIFEST_FILE in present and storage.COMPLETE not in present:
        raise ExportError(
            f"{url}: incomplete (no {storage.COMPLETE} marker: its upload was interrupted or is still going on)"
        )
    with storage.downloaded(url, list(TOKENIZER_FILES)) as local:
        try:
            return load(make, local, pattern, None)
        except (ExportError, FileNotFoundError) as exc:
            message = str(exc).replace(str(local), url.rstrip("/"))
            raise type(exc)(message) from None


def from_record(make: Callable[..., T], record: TokenizerRecord) -> T:
    """`make(merges, pattern, special_tokens, ids=..., ...)` of a file's record; a setting it
    refuses is an ExportError naming the file (`record.source`), if the record has one."""
    try:
        return make(
            record.merges,
            record.pattern,
            record.special_tokens,
            ids=record.ids,
            special_token_roles=record.special_token_roles,
            model_max_length=record.model_max_length,
            manifest=record.manifest,
        )
    except SettingsError as exc:
        if record.source is None:
            raise
        raise ExportError(f"{record.source}: {exc}") from None

"""Our `manifest.json`: how a tokenizer was trained, its `tokenizer` section (pattern, special tokens,
roles, sizes) and each other file's size and SHA-256, so that `load` can tell a changed file."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from bpe.errors import ExportError, SettingsError
from bpe.formats.files import open_checked, read_json
from bpe.formats.gpt2 import MERGES_FILE, VOCAB_FILE
from bpe.formats.hf_json import HF_FILE
from bpe.formats.roles import check_roles
from bpe.formats.tiktoken_ranks import TIKTOKEN_FILE
from bpe.formats.transformers_config import CONFIG_FILE, SPECIAL_MAP_FILE
from bpe.manifest import Manifest, TokenizerSection
from bpe.pretokenize import NAMED_PATTERNS, too_many_special_tokens

MANIFEST_FILE = "manifest.json"
# The files of a saved tokenizer, the manifest last: it records the others' sizes and SHA-256.
TOKENIZER_FILES = (MERGES_FILE, VOCAB_FILE, HF_FILE, TIKTOKEN_FILE, CONFIG_FILE, SPECIAL_MAP_FILE, MANIFEST_FILE)


def file_digest(path: Path) -> dict:
    """{"size", "sha256"} of a file, as the manifest records each tokenizer file."""
    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    return {"size": path.stat().st_size, "sha256": digest}


def file_digests(directory: Path) -> dict[str, dict]:
    """Size and SHA-256 of each tokenizer file in `directory` but the manifest (which records them)."""
    names = [name for name in TOKENIZER_FILES if name != MANIFEST_FILE and (directory / name).is_file()]
    return {name: file_digest(directory / name) for name in names}


def check_digests(directory: Path, recorded: object) -> None:
    """Raise ExportError naming the first tokenizer file whose SHA-256 differs from the one the
    manifest records: the file changed after it was written. A missing file is not checked here
    (vocab.json and merges.txt are required when read; the other formats are optional)."""
    manifest = directory / MANIFEST_FILE
    if not isinstance(recorded, dict) or not all(
        isinstance(entry, dict) and isinstance(entry.get("sha256"), str) for entry in recorded.values()
    ):
        raise ExportError(f"{manifest}: 'files' is not a mapping of file name -> size and sha256")
    for name, entry in recorded.items():
        if name not in TOKENIZER_FILES or name == MANIFEST_FILE:
            raise ExportError(f"{manifest}: records a checksum for {name!r}, which is not a tokenizer file")
        path = directory / name
        if not path.is_file():
            continue
        size = path.stat().st_size
        if entry.get("size") not in (None, size):  # changed, without reading it
            changed = f"; it holds {size:,} bytes, {MANIFEST_FILE} records {entry['size']:,}"
        else:
            with open_checked(path) as f:
                if hashlib.file_digest(f, "sha256").hexdigest() == entry["sha256"]:
                    continue
            changed = ""
        raise ExportError(
            f"{path}: its SHA-256 is not the one {MANIFEST_FILE} records (the file changed after it was "
            f"written{changed})"
        )


def write(directory: Path, manifest: Manifest) -> None:
    """Write manifest.json, recording in `manifest.files` the size and SHA-256 of each tokenizer
    file already in `directory` (so `load` can tell a changed file). Write it after the others."""
    manifest.files = file_digests(Path(directory))
    (Path(directory) / MANIFEST_FILE).write_text(json.dumps(manifest.to_json(), indent=2) + "\n", encoding="utf-8")


def read(path: Path) -> Manifest:
    """The manifest in manifest.json (which `read_tokenizer_section` then checks); a file that holds
    no JSON object reads as an empty manifest, which has no `tokenizer` section."""
    described = read_json(path)
    return Manifest.from_json(described) if isinstance(described, dict) else Manifest()


def read_tokenizer_section(path: Path, manifest: Manifest) -> tuple[dict[str, int], str, dict[str, str]]:
    """(special tokens, pattern, roles) that a manifest records for its tokenizer, or ExportError.
    A manifest without `special_token_roles` (a tokenizer with no roles set) gives no roles."""
    info = manifest.tokenizer
    if info is None:
        raise ExportError(f"{path}: has no 'tokenizer' section")
    special_tokens = info.special_tokens
    if not isinstance(special_tokens, dict) or not all(
        isinstance(token, str) and type(token_id) is int for token, token_id in special_tokens.items()
    ):
        raise ExportError(f"{path}: tokenizer.special_tokens is not a mapping of token -> id")
    if (problem := too_many_special_tokens(len(special_tokens))) is not None:
        raise ExportError(f"{path}: tokenizer.special_tokens: {problem}")
    if "" in special_tokens:
        raise ExportError(
            f"{path}: tokenizer.special_tokens holds an empty token (id {special_tokens['']}), which no text can hold"
        )
    name, regex = info.pattern, info.regex
    if name not in (*NAMED_PATTERNS, "custom") or not isinstance(regex, str):
        raise ExportError(f"{path}: tokenizer.pattern {name!r} is not a known pattern name nor 'custom' with a regex")
    roles = info.special_token_roles if info.present("special_token_roles") else {}
    if not isinstance(roles, dict):
        raise ExportError(f"{path}: tokenizer.special_token_roles is not a mapping of role -> token")
    try:
        roles = check_roles(roles, special_tokens)
    except SettingsError as exc:
        raise ExportError(f"{path}: tokenizer.special_token_roles: {exc}") from None
    return special_tokens, regex if name == "custom" else name, roles


def check_counts(
    path: Path,
    info: TokenizerSection,
    vocab: list[bytes],
    special_tokens: dict[str, int],
    kept_ids: dict[int, int] | None = None,
) -> None:
    """The manifest's counts and special token ids must fit the vocabulary the files hold (whose
    ordinary tokens have ids 0 to n - 1, or `kept_ids`)."""
    n = len(vocab)
    with_ids = n if kept_ids is None else len(kept_ids)  # kept ids: a byte the base lacked has none
    checks = (("merges", info.merges, n - 256), ("vocab_size", info.vocab_size, with_ids + len(special_tokens)))
    for key, recorded, found in checks:
        if info.present(key) and recorded != found:
            raise ExportError(f"{path}: records {key} {recorded!r}, the tokenizer files hold {found}")
    ids = sorted(special_tokens.values())
    ordinary = set(kept_ids.values()) if kept_ids is not None else range(n)
    if len(set(ids)) != len(ids) or any(i in ordinary for i in ids):
        raise ExportError(f"{path}: special token ids {ids} collide with each other or with the {n} ordinary tokens")

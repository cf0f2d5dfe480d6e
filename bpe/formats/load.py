"""Which format a path holds, read with that format's reader: what `Tokenizer.load` reads."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bpe.errors import ExportError, SettingsError
from bpe.formats import gpt2, hf_json, saved, tiktoken_ranks
from bpe.formats.files import check_regular
from bpe.formats.gpt2 import MERGES_FILE, VOCAB_FILE
from bpe.formats.hf_json import HF_FILE
from bpe.formats.manifest_json import MANIFEST_FILE
from bpe.formats.record import TokenizerRecord


def read(
    path: Path, pattern: str | None = None, special_tokens: Sequence[str] | dict[str, int] | None = None
) -> TokenizerRecord:
    """The tokenizer at a local `path`: a directory `save` wrote (its manifest.json is read
    first), a Hugging Face tokenizer.json or a directory holding one, a directory of GPT-2's
    vocab.json + merges.txt (pattern `gpt2` unless `pattern` says otherwise), or a tiktoken ranks
    file or a directory holding one (`pattern` and `special_tokens` given, as it records neither)."""
    if path.exists() and not path.is_dir():
        check_regular(path, path.stat())  # not a device or a FIFO, which would never end or never start
        return read_file(path, pattern, special_tokens)
    directory = path
    if (directory / MANIFEST_FILE).exists():
        only_for_tiktoken(special_tokens, directory / MANIFEST_FILE)
        return saved.read(directory, pattern)
    if (directory / HF_FILE).exists():
        return read_file(directory / HF_FILE, pattern, special_tokens)
    if (directory / VOCAB_FILE).exists() and (directory / MERGES_FILE).exists():
        only_for_tiktoken(special_tokens, directory / VOCAB_FILE)
        return gpt2.read(directory, pattern or "gpt2")
    ranks_files = sorted(directory.glob("*.tiktoken")) if directory.is_dir() else []
    if len(ranks_files) == 1:
        return read_file(ranks_files[0], pattern, special_tokens)
    raise FileNotFoundError(
        f"{directory}: holds no tokenizer (expected manifest.json, tokenizer.json, vocab.json and merges.txt, "
        "or one .tiktoken file)"
    )


def read_file(
    path: Path, pattern: str | None, special_tokens: Sequence[str] | dict[str, int] | None
) -> TokenizerRecord:
    """A tokenizer file made elsewhere: a Hugging Face tokenizer.json or tiktoken ranks."""
    if path.suffix == ".tiktoken":
        return tiktoken_ranks.read(path, pattern, special_tokens)
    if path.suffix == ".json":
        only_for_tiktoken(special_tokens, path)
        if pattern is not None:
            raise SettingsError(
                lambda s: (
                    f"{s.pattern}: {path} records its own split regex; give {s.pattern} only for vocab.json + "
                    "merges.txt or a .tiktoken file"
                ),
                parameter="pattern",
            )
        return hf_json.read(path)
    raise ExportError(
        f"{path}: not a tokenizer file this can read (a tokenizer.json, a .tiktoken file, or a directory)"
    )


def only_for_tiktoken(special_tokens: object, path: Path) -> None:
    """Refuse `special_tokens` for a file that records its own: only a tiktoken ranks file does not."""
    if special_tokens is not None:
        raise SettingsError(
            lambda s: (
                f"{s.special_tokens}: {path} records its special tokens; {s.special_tokens} is only for a "
                ".tiktoken file"
            ),
            parameter="special_tokens",
        )

"""A trained tokenizer: merges + pattern + special tokens, with encode/decode, save and load.

Encoding runs on tiktoken (ranks = merge order), the fast and widely trusted encoder. Where
tiktoken cannot take the tokenizer (a user regex it cannot compile, or a vocabulary holding two
tokens with the same bytes) a plain Python encoder applies the merges in order instead.

>>> tok = Tokenizer([(104, 105)], pattern="gpt2")   # one merge: b"h" + b"i" -> 256
>>> tok.encode("hi hi")
[256, 32, 256]
>>> tok.decode([256, 32, 256])
'hi hi'
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from bpe import export, storage
from bpe.errors import ExportError, InputError, InvalidTextError, SettingsError, SpecialTokenError
from bpe.pretokenize import NAMED_PATTERNS, Pretokenizer

_SURROGATE = re.compile("[\ud800-\udfff]")


class Tokenizer:
    """Byte-level BPE: token i < 256 is byte i; merge k makes token 256 + k; special tokens follow."""

    def __init__(
        self,
        merges: Sequence[tuple[int, int]] | np.ndarray,
        pattern: str = "gpt2",
        special_tokens: Sequence[str] | dict[str, int] = (),
        *,
        manifest: dict | None = None,
        ids: dict[int, int] | None = None,
    ) -> None:
        self.merges: list[tuple[int, int]] = [(int(a), int(b)) for a, b in np.asarray(merges).reshape(-1, 2)]
        self.vocab: list[bytes] = [bytes([b]) for b in range(256)]
        for a, b in self.merges:
            if not (a < len(self.vocab) and b < len(self.vocab)):
                raise ValueError(f"merge {len(self.vocab) - 256} uses token {max(a, b)} before it exists")
            self.vocab.append(self.vocab[a] + self.vocab[b])
        if isinstance(special_tokens, dict):
            self.special_tokens = dict(special_tokens)
        else:
            self.special_tokens = {t: len(self.vocab) + i for i, t in enumerate(special_tokens)}
        self.pretokenizer = Pretokenizer(pattern, list(self.special_tokens))
        self.manifest = manifest or {}
        # Internally special token i is len(vocab) + i. `ids` renumbers the other tokens for
        # vocabularies made elsewhere (GPT-2's files): our id -> the file's id.
        n = len(self.vocab)
        table = np.arange(n + len(self.special_tokens), dtype=np.int64)
        if ids is not None:
            table[:n] = [ids[i] for i in range(n)]
        table[n:] = list(self.special_tokens.values())
        self._foreign_ids = ids is not None
        self._to_ids = table
        self._from_ids = {int(external): internal for internal, external in enumerate(table)}
        self._encoding = None
        self._python_ranks: dict[tuple[int, int], int] | None = None

    # -- sizes and names ---------------------------------------------------------------------

    @property
    def pattern(self) -> str:
        return self.pretokenizer.name if self.pretokenizer.name != "custom" else self.pretokenizer.regex

    @property
    def vocab_size(self) -> int:
        return len(self.vocab) + len(self.special_tokens)

    def token_bytes(self, token_id: int) -> bytes:
        internal = self._from_ids.get(token_id)
        if internal is None:
            raise InputError(f"token id {token_id} is not in this tokenizer's vocabulary")
        if internal >= len(self.vocab):
            return list(self.special_tokens)[internal - len(self.vocab)].encode("utf-8")
        return self.vocab[internal]

    # -- encode / decode ---------------------------------------------------------------------

    def encode(
        self,
        text: str,
        *,
        allowed_special: Collection[str] | Literal["all"] = "all",
        special_as_text: bool = False,
        errors: Literal["strict", "replace"] = "strict",
    ) -> list[int]:
        """Token ids of `text`. Special tokens in `allowed_special` become their ids; any other
        special token in the text raises SpecialTokenError, unless `special_as_text` encodes it as text.
        A lone surrogate raises InvalidTextError, unless `errors="replace"` encodes it as U+FFFD."""
        text = _unicode_text(text, errors)
        allowed = set(self.special_tokens) if allowed_special == "all" else set(allowed_special)
        unknown = allowed - set(self.special_tokens)
        if unknown:
            raise SettingsError(f"not special tokens of this tokenizer: {', '.join(sorted(unknown))}")
        if not special_as_text:
            for token in self.special_tokens:
                if token not in allowed and token in text:
                    raise SpecialTokenError(
                        f"text holds special token {token!r}, which is not allowed here; allow it, or pass "
                        "special_as_text=True to encode it as ordinary text"
                    )
        encoding = self._tiktoken()
        if encoding is not None:
            ids = encoding.encode(text, allowed_special=allowed, disallowed_special=())
        else:
            ids = self._encode_python(text, allowed)
        return self._to_external(ids)

    def encode_ordinary(self, text: str, errors: Literal["strict", "replace"] = "strict") -> list[int]:
        """Token ids of `text`, treating special tokens as ordinary text."""
        return self.encode(text, allowed_special=(), special_as_text=True, errors=errors)

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        return b"".join(self.token_bytes(int(i)) for i in ids)

    def decode(self, ids: Iterable[int], errors: str = "replace") -> str:
        """Text of token ids; byte sequences that are not UTF-8 become U+FFFD unless `errors` says otherwise."""
        return self.decode_bytes(ids).decode("utf-8", errors=errors)

    # -- encoders ----------------------------------------------------------------------------

    def _to_external(self, ids: list[int]) -> list[int]:
        if not self._foreign_ids and self.special_tokens == self._natural_special_ids():
            return ids
        return self._to_ids[np.asarray(ids, dtype=np.int64)].tolist()

    def _natural_special_ids(self) -> dict[str, int]:
        return {t: len(self.vocab) + i for i, t in enumerate(self.special_tokens)}

    def _tiktoken(self):
        if self._encoding is None:
            self._encoding = _build_tiktoken(self) or False
        return self._encoding or None

    def _encode_python(self, text: str, allowed: set[str]) -> list[int]:
        """Apply the merges in order to each piece (the plain algorithm; slow but always available)."""
        if self._python_ranks is None:
            self._python_ranks = {pair: rank for rank, pair in enumerate(self.merges)}
        ranks = self._python_ranks
        cache: dict[str, list[int]] = {}
        ids: list[int] = []
        for segment, is_special in self.pretokenizer.segments(text):
            if is_special and segment in allowed:
                ids.append(self._internal_special(segment))
                continue
            for piece in self.pretokenizer.split_ordinary(segment):
                if piece not in cache:
                    cache[piece] = _bpe(list(piece.encode("utf-8")), ranks)
                ids.extend(cache[piece])
        return ids

    def _internal_special(self, token: str) -> int:
        return len(self.vocab) + list(self.special_tokens).index(token)

    # -- files -------------------------------------------------------------------------------

    def save(self, directory: str | Path, *, force: bool = False, manifest: dict | None = None) -> Path | str:
        """Write all formats into `directory` (via a temporary directory renamed into place), or
        under an object store URL (`s3://bucket/tok/`: uploaded, then marked complete)."""
        record = json.loads(json.dumps(manifest or self.manifest))
        if storage.is_remote(directory):  # s3://bucket/tok/: uploaded, then marked COMPLETE
            export.write_remote_dir(str(directory), lambda tmp: self.write_files(tmp, record), force=force)
            self.manifest = record
            return directory
        export.atomic_write_dir(Path(directory), lambda tmp: self.write_files(tmp, record), force=force)
        self.manifest = record
        return Path(directory)

    def write_files(self, directory: Path, manifest: dict | None = None) -> None:
        """Write every format into an existing directory; `manifest` (updated with this tokenizer's
        description and the export time) is written last. Used by `save` and the artifact store."""
        if self._foreign_ids:
            raise ValueError("this tokenizer was loaded from another tool's files; save is for tokenizers trained here")
        export.check_unique(self.vocab)
        started = time.perf_counter()
        export.write_merges(directory / export.MERGES_FILE, self.vocab, self.merges)
        export.write_vocab(directory / export.VOCAB_FILE, self.vocab, self.special_tokens)
        export.write_tokenizer_json(
            directory / export.HF_FILE,
            self.vocab,
            self.merges,
            self.special_tokens,
            self.pretokenizer.name,
            self.pretokenizer.regex,
        )
        export.write_tiktoken(directory / export.TIKTOKEN_FILE, self.vocab)
        if manifest is None:
            return
        manifest["tokenizer"] = self.describe()
        if "seconds" in manifest:
            manifest["seconds"]["export"] = round(time.perf_counter() - started, 3)
            manifest["seconds"]["total"] = round(manifest["seconds"].get("total", 0) + manifest["seconds"]["export"], 3)
        write_manifest(directory, manifest)

    def describe(self) -> dict:
        return {
            "pattern": self.pretokenizer.name,
            "regex": self.pretokenizer.regex,
            "special_tokens": self.special_tokens,
            "vocab_size": self.vocab_size,
            "merges": len(self.merges),
        }

    @classmethod
    def load(cls, directory: str | Path, pattern: str | None = None) -> Tokenizer:
        """Load a directory written by `save`, or one holding only GPT-2-style vocab.json + merges.txt
        (pattern `gpt2` unless `pattern` says otherwise). A saved directory is checked first: each
        file against the SHA-256 the manifest records (if it records them), and the files against
        each other; tampered or damaged files raise ExportError naming the file, rather than loading
        as a different tokenizer. `directory` may be an object store URL (`s3://bucket/tok/`); a
        tokenizer there is read only once its upload is marked complete."""
        if storage.is_remote(directory):
            return cls._load_remote(str(directory), pattern)
        directory = Path(storage.local_path(directory))
        manifest_path = directory / export.MANIFEST_FILE
        if manifest_path.exists():
            manifest = export.read_json(manifest_path)
            special_tokens, stored_pattern = _tokenizer_section(manifest_path, manifest)
            if "files" in manifest:
                export.check_digests(directory, manifest["files"])
            vocab, merge_ids = export.read_checked(directory, special_tokens)
            _check_counts(manifest_path, manifest["tokenizer"], vocab, special_tokens)
            try:
                return cls(merge_ids, pattern or stored_pattern, special_tokens, manifest=manifest)
            except SettingsError as exc:
                if pattern is not None and exc.parameter == "pattern":
                    raise  # the caller's pattern, not the file's
                raise ExportError(f"{manifest_path}: {exc}") from None
        if not (directory / export.VOCAB_FILE).exists() or not (directory / export.MERGES_FILE).exists():
            raise FileNotFoundError(
                f"{directory}: holds no tokenizer (expected manifest.json, or vocab.json and merges.txt)"
            )
        return cls._from_gpt2_files(directory, pattern or "gpt2")

    @classmethod
    def _load_remote(cls, url: str, pattern: str | None) -> Tokenizer:
        """Download the tokenizer files under `url` and load them; errors name the URL."""
        present = storage.listing(url)
        if export.MANIFEST_FILE in present and storage.COMPLETE not in present:
            raise ExportError(f"{url}: incomplete (no {storage.COMPLETE} marker: its upload was interrupted or is "
                              "still going on)")  # fmt: skip
        with storage.downloaded(url, list(export.TOKENIZER_FILES)) as local:
            try:
                return cls.load(local, pattern)
            except (ExportError, FileNotFoundError) as exc:
                message = str(exc).replace(str(local), url.rstrip("/"))
                raise type(exc)(message) from None

    @classmethod
    def _from_gpt2_files(cls, directory: Path, pattern: str) -> Tokenizer:
        """GPT-2-style files from another tool: ids are the file's; tokens no merge makes are special."""
        vocab_path, merges_path = directory / export.VOCAB_FILE, directory / export.MERGES_FILE
        vocab = export.read_vocab_json(vocab_path)
        merges, line_numbers = export.read_merges(merges_path)
        file_id_of_bytes = {}
        specials = {}
        for spelling, file_id in vocab.items():
            try:
                file_id_of_bytes[export.unspell(spelling)] = file_id
            except export.ExportError:
                specials[spelling] = file_id
        missing = [b for b in range(256) if bytes([b]) not in file_id_of_bytes]
        if missing:
            raise ExportError(f"{vocab_path}: lacks the byte token {export.spell(bytes([missing[0]]))!r}")
        vocab_bytes, merge_ids = export.merge_ids(merges, lambda k: f"{merges_path}:{line_numbers[k]}", unique=False)
        ours: dict[int, int] = {}
        for internal, token in enumerate(vocab_bytes):
            if token not in file_id_of_bytes:
                line = line_numbers[internal - 256]
                raise ExportError(f"{merges_path}:{line}: makes {export.spell(token)!r}, which {vocab_path.name} lacks")
            ours[internal] = file_id_of_bytes[token]
        made = set(vocab_bytes)
        for token, file_id in file_id_of_bytes.items():
            if token not in made:
                specials[token.decode("utf-8", errors="replace")] = file_id
        return cls(merge_ids, pattern, specials, ids=ours)


def _tokenizer_section(path: Path, manifest: object) -> tuple[dict[str, int], str]:
    """(special tokens, pattern) that a manifest records for its tokenizer, or ExportError."""
    info = manifest.get("tokenizer") if isinstance(manifest, dict) else None
    if not isinstance(info, dict):
        raise ExportError(f"{path}: has no 'tokenizer' section")
    special_tokens = info.get("special_tokens")
    if not isinstance(special_tokens, dict) or not all(
        isinstance(token, str) and type(token_id) is int for token, token_id in special_tokens.items()
    ):
        raise ExportError(f"{path}: tokenizer.special_tokens is not a mapping of token -> id")
    name, regex = info.get("pattern"), info.get("regex")
    if name not in (*NAMED_PATTERNS, "custom") or not isinstance(regex, str):
        raise ExportError(f"{path}: tokenizer.pattern {name!r} is not a known pattern name nor 'custom' with a regex")
    return special_tokens, regex if name == "custom" else name


def _check_counts(path: Path, info: dict, vocab: list[bytes], special_tokens: dict[str, int]) -> None:
    """The manifest's counts and special token ids must fit the vocabulary the files hold."""
    n = len(vocab)
    for key, found in (("merges", n - 256), ("vocab_size", n + len(special_tokens))):
        if key in info and info[key] != found:
            raise ExportError(f"{path}: records {key} {info[key]!r}, the tokenizer files hold {found}")
    ids = sorted(special_tokens.values())
    if len(set(ids)) != len(ids) or (ids and ids[0] < n):
        raise ExportError(f"{path}: special token ids {ids} collide with each other or with the {n} ordinary tokens")


def write_manifest(directory: Path, manifest: dict) -> None:
    """Write manifest.json, recording in `manifest["files"]` the size and SHA-256 of each tokenizer
    file already in `directory` (so `load` can tell a changed file). Write it after the others."""
    manifest["files"] = export.file_digests(Path(directory))
    (Path(directory) / export.MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")


def _unicode_text(text: str, errors: str) -> str:
    """`text`, checked to have UTF-8 bytes: a lone surrogate raises InvalidTextError, or with
    `errors="replace"` becomes U+FFFD (tiktoken would otherwise replace it silently)."""
    if errors not in ("strict", "replace"):
        raise SettingsError(f"errors: expected 'strict' or 'replace', got {errors!r}", parameter="errors")
    if text.isascii():
        return text
    found = _SURROGATE.search(text)
    if found is None:
        return text
    if errors == "replace":
        return _SURROGATE.sub("\ufffd", text)
    raise InvalidTextError(
        f"text: lone surrogate U+{ord(found.group()):04X} at character {found.start()} is not Unicode text and has "
        "no UTF-8 bytes; pass errors='replace' to encode it as U+FFFD"
    )


def _bpe(ids: list[int], ranks: dict[tuple[int, int], int]) -> list[int]:
    """Merge the lowest-ranked adjacent pair until none is left: [1, 2, 3] with (1, 2) ranked 0 gives [256, 3]."""
    while len(ids) > 1:
        best = min(zip(ids, ids[1:]), key=lambda p: ranks.get(p, 1 << 62))
        rank = ranks.get(best)
        if rank is None:
            break
        out, i = [], 0
        while i < len(ids):
            if i + 1 < len(ids) and (ids[i], ids[i + 1]) == best:
                out.append(256 + rank)
                i += 2
            else:
                out.append(ids[i])
                i += 1
        ids = out
    return ids


def _build_tiktoken(tok: Tokenizer):
    """A tiktoken Encoding for the tokenizer, or None when tiktoken cannot represent it."""
    if len(set(tok.vocab)) != len(tok.vocab):
        return None
    try:
        import tiktoken
    except ImportError:
        return None
    pattern = export.WHITESPACE_WORD if tok.pretokenizer.name == "whitespace" else tok.pretokenizer.regex
    ranks = {token: rank for rank, token in enumerate(tok.vocab)}
    specials = {text: len(tok.vocab) + i for i, text in enumerate(tok.special_tokens)}
    try:
        return tiktoken.Encoding(name="bpe", pat_str=pattern, mergeable_ranks=ranks, special_tokens=specials)
    except Exception:
        return None

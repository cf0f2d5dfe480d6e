"""A trained tokenizer: merges + pattern + special tokens, with encode/decode, save and load.

Encoding runs on tiktoken (ranks = merge order), the fast and widely trusted encoder. A user's
regex cuts text as Hugging Face's `Split` does (`bpe.pretokenize.split_isolated`), and tiktoken
encodes the pieces; where tiktoken cannot take the vocabulary (two tokens with the same bytes) a
plain Python encoder applies the merges in order instead.

>>> tok = Tokenizer([(104, 105)], pattern="gpt2")   # one merge: b"h" + b"i" -> 256
>>> tok.encode("hi hi")
[256, 32, 256]
>>> tok.decode([256, 32, 256])
'hi hi'

`Tokenizer.load` also reads what other tools make (see `bpe.formats`): GPT-2's vocab.json +
merges.txt, a Hugging Face byte-level BPE tokenizer.json, a tiktoken ranks file (with its split
pattern); `from_tiktoken` and `to_tiktoken` convert from and to a `tiktoken.Encoding`. The names of
the methods are tiktoken's (`encode_batch`, `n_vocab`, `eot_token`, ...) or Hugging Face's
(`token_to_id`, `get_vocab`, ...).
"""

from __future__ import annotations

import string
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
import regex

from bpe import storage
from bpe.batching import check_num_threads, in_runs, text_list
from bpe.errors import (
    LONE_SURROGATE,
    ExportError,
    InputError,
    InvalidTextError,
    SettingsError,
    SpecialTokenError,
    lone_surrogate,
)
from bpe.formats import load as formats_load
from bpe.formats import saved
from bpe.formats.files import check_size, id_problem, max_id
from bpe.formats.manifest import MANIFEST_FILE, TOKENIZER_FILES
from bpe.formats.record import TokenizerRecord
from bpe.formats.spelling import NEVER_IN_TEXT, spell, unspell
from bpe.formats.tiktoken_ranks import from_ranks
from bpe.manifest import Manifest, TokenizerSection, Truncation, as_manifest
from bpe.pretokenize import (
    DEFAULT_PATTERN,
    NAMED_PATTERNS,
    WHITESPACE_WORD,
    Pretokenizer,
    can_match_empty,
    isolated,
    oniguruma_regex,
)
from bpe.reference import encode_word
from bpe.roles import check_roles
from bpe.schema import check

if TYPE_CHECKING:
    import tiktoken

# Pieces whose ids a tokenizer with a user's regex keeps between calls (a piece and its ids take
# about 200 bytes: some 20 MB at most), so that a batch encodes each common word once.
PIECE_CACHE_SIZE = 100_000


class Tokenizer:
    """Byte-level BPE: token i < 256 is byte i; merge k makes token 256 + k; special tokens follow.

    The split pattern is `cl100k` unless named, as in `train`. `special_token_roles` says which
    special token transformers uses as bos, eos, pad or unk (`{"eos": "<|endoftext|>", "pad":
    "<|pad|>"}`; keys `eos_token` etc. are taken too); each must be one of `special_tokens`.
    `model_max_length` is the longest input, in tokens, of the model the tokenizer is for (what
    transformers truncates to; unset, transformers truncates nothing). `save` writes both into
    tokenizer_config.json. `manifest` (a `bpe.manifest.Manifest`, or its JSON) says how it was
    trained; `save` writes it to manifest.json.

    >>> tok = Tokenizer([(104, 105)], "gpt2", ["<|endoftext|>"], special_token_roles={"eos": "<|endoftext|>"})
    >>> tok
    Tokenizer(vocab_size=258, pattern='gpt2', special_tokens={'<|endoftext|>': 257}, roles={'eos': '<|endoftext|>'})
    >>> len(tok), tok.eot_token, tok.token_to_id("hi"), tok.id_to_token(257)
    (258, 257, 256, '<|endoftext|>')
    """

    def __init__(
        self,
        merges: Sequence[tuple[int, int]] | np.ndarray,
        pattern: str = DEFAULT_PATTERN,
        special_tokens: Sequence[str] | dict[str, int] = (),
        *,
        special_token_roles: Mapping[str, str] | None = None,
        model_max_length: int | None = None,
        manifest: Manifest | Mapping | None = None,
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
        self.manifest: Manifest = as_manifest(manifest)
        self._roles = check_roles(special_token_roles, self.special_tokens)
        self.model_max_length = check_model_max_length(model_max_length)
        # Internally special token i is len(vocab) + i. `ids` renumbers the other tokens for
        # vocabularies made elsewhere (GPT-2's files): our id -> the file's id. A byte that valid
        # UTF-8 never holds may have none (the file lacks it): -1 in the table, never encoded.
        n = len(self.vocab)
        self._absent = check_token_ids(self.vocab, ids, self.special_tokens)
        table = np.arange(n + len(self.special_tokens), dtype=np.int64)
        if ids is not None:
            table[:n] = [ids.get(i, -1) for i in range(n)]
        table[n:] = list(self.special_tokens.values())
        self._foreign_ids = ids is not None
        self._to_ids = table
        self._from_ids = {int(external): internal for internal, external in enumerate(table) if external >= 0}
        self._encoding = None
        self._python_ranks: dict[tuple[int, int], int] | None = None
        self._internal_of_bytes: dict[bytes, int] | None = None
        self._piece_ids: dict[str, list[int]] = {}  # the ids of pieces a user's regex cut, as encoded

    # -- sizes and names ---------------------------------------------------------------------

    @property
    def pattern(self) -> str:
        return self.pretokenizer.name if self.pretokenizer.name != "custom" else self.pretokenizer.regex

    @property
    def vocab_size(self) -> int:
        """Tokens in all: 256 bytes (fewer for a vocabulary that lacks bytes valid UTF-8 never holds),
        one per merge, and the special tokens (HF's `get_vocab_size()`)."""
        return len(self.vocab) + len(self.special_tokens) - len(self._absent)

    def __len__(self) -> int:
        """The vocabulary size, special tokens included, as `len()` of a transformers tokenizer."""
        return self.vocab_size

    @property
    def max_token_value(self) -> int:
        """The largest token id (tiktoken's name)."""
        return int(self._to_ids.max())

    @property
    def n_vocab(self) -> int:
        """tiktoken's vocabulary size: the largest id + 1 (equal to `vocab_size` unless ids have gaps)."""
        return self.max_token_value + 1

    @property
    def special_token_roles(self) -> dict[str, str]:
        """The roles transformers gives special tokens: role (bos, eos, pad, unk) -> token."""
        return dict(self._roles)

    def _role_id(self, role: str) -> int | None:
        token = self._roles.get(role)
        return None if token is None else self.special_tokens[token]

    @property
    def bos_token_id(self) -> int | None:
        return self._role_id("bos")

    @property
    def eos_token_id(self) -> int | None:
        return self._role_id("eos")

    @property
    def pad_token_id(self) -> int | None:
        return self._role_id("pad")

    @property
    def unk_token_id(self) -> int | None:
        return self._role_id("unk")

    @property
    def eot_token(self) -> int | None:
        """Id of the end-of-text token (tiktoken's name): the eos role's token if one is set, else
        `<|endoftext|>` if it is a special token, else None (where tiktoken would raise KeyError)."""
        if "eos" in self._roles:
            return self.eos_token_id
        return self.special_tokens.get("<|endoftext|>")

    @property
    def special_tokens_set(self) -> set[str]:
        """The special tokens' texts (tiktoken's name); `special_tokens` maps each to its id."""
        return set(self.special_tokens)

    def token_bytes(self, token_id: int) -> bytes:
        internal = self._from_ids.get(token_id)
        if internal is None:
            raise InputError(f"token id {token_id} is not in this tokenizer's vocabulary")
        if internal >= len(self.vocab):
            return list(self.special_tokens)[internal - len(self.vocab)].encode("utf-8")
        return self.vocab[internal]

    def decode_single_token_bytes(self, token_id: int) -> bytes:
        """The bytes of one token (tiktoken's name for `token_bytes`)."""
        return self.token_bytes(token_id)

    def encode_single_token(self, text_or_bytes: str | bytes) -> int:
        """The id of a text or bytes that is exactly one token (a special token's text included), as
        tiktoken's method; KeyError otherwise. `encode_single_token(" the")` -> the id of b" the"."""
        if isinstance(text_or_bytes, str):
            if text_or_bytes in self.special_tokens:
                return self.special_tokens[text_or_bytes]
            text_or_bytes = text_or_bytes.encode("utf-8")
        internal = self._internal_bytes_index().get(bytes(text_or_bytes))
        if internal is None:
            raise KeyError(text_or_bytes)
        return int(self._to_ids[internal])

    def token_to_id(self, token: str) -> int | None:
        """Id of a token as Hugging Face spells it (`"Ġthe"` for b" the", a special token as its text),
        or None, as `tokenizers.Tokenizer.token_to_id`."""
        if token in self.special_tokens:
            return self.special_tokens[token]
        try:
            data = unspell(token)
        except ExportError:
            return None
        internal = self._internal_bytes_index().get(data)
        return None if internal is None else int(self._to_ids[internal])

    def id_to_token(self, token_id: int) -> str | None:
        """Hugging Face's spelling of a token id (`"Ġthe"`; a special token's text), or None for an
        id outside the vocabulary, as `tokenizers.Tokenizer.id_to_token`."""
        internal = self._from_ids.get(int(token_id))
        if internal is None:
            return None
        if internal >= len(self.vocab):
            return list(self.special_tokens)[internal - len(self.vocab)]
        return spell(self.vocab[internal])

    def get_vocab(self, with_added_tokens: bool = True) -> dict[str, int]:
        """Hugging Face's spelling of every token -> its id (`{"Ġthe": 262, ...}`), special tokens
        included, as `tokenizers.Tokenizer.get_vocab`. `with_added_tokens=False` leaves the special
        tokens out (Hugging Face keeps those that its model's vocab lists, as ours does)."""
        entries = {spell(token): int(self._to_ids[i]) for i, token in enumerate(self.vocab) if i not in self._absent}
        if with_added_tokens:
            entries.update(self.special_tokens)
        return entries

    def _internal_bytes_index(self) -> dict[bytes, int]:
        if self._internal_of_bytes is None:
            index: dict[bytes, int] = {}
            for internal, token in enumerate(self.vocab):
                if internal not in self._absent:
                    index.setdefault(token, internal)
            self._internal_of_bytes = index
        return self._internal_of_bytes

    # -- smaller vocabularies ------------------------------------------------------------------

    def truncated(self, vocab_size: int) -> Tokenizer:
        """This tokenizer with `vocab_size` tokens in all: its first `vocab_size - 256 -
        len(special_tokens)` merges, the same pattern, roles and `model_max_length`, and the special
        tokens renumbered right after the kept merges (a tokenizer trained from a base keeps every id
        instead, as its base's did). BPE's merges are learnt in order, so this is
        exactly what training on the same data with that `vocab_size` gives: one run, every size.
        The manifest (if any) is the run's, with a `truncation` section saying what was cut.

        >>> tok = Tokenizer([(104, 105), (256, 33)], "gpt2", ["<|endoftext|>"])
        >>> small = tok.truncated(258)
        >>> small.merges, small.special_tokens
        ([(104, 105)], {'<|endoftext|>': 257})
        """
        n_bytes, n_special = 256 - len(self._absent), len(self.special_tokens)
        smallest = n_bytes + n_special
        if type(vocab_size) is not int or not smallest <= vocab_size <= self.vocab_size:
            raise SettingsError(
                lambda s: (
                    f"{s.vocab_size}: expected an integer from {smallest} ({n_bytes} bytes + {n_special} "
                    f"special token(s)) to this tokenizer's {self.vocab_size}, got {vocab_size!r}"
                ),
                parameter="vocab_size",
            )
        kept = vocab_size - smallest
        n = 256 + kept
        with_ids = [i for i in range(n) if i not in self._absent]
        ids = None
        special_tokens: list[str] | dict[str, int] = list(self.special_tokens)
        if self.manifest.base is not None:  # trained from a base (bpe.extend): every id stays
            ids = {i: int(self._to_ids[i]) for i in with_ids}
            special_tokens = dict(self.special_tokens)
        elif self._foreign_ids:  # another tool's ids (GPT-2's vocab.json): kept if they still number 0..n-1
            ids = {i: int(self._to_ids[i]) for i in with_ids}
            if sorted(ids.values()) != list(range(len(ids))):
                raise SettingsError(
                    lambda s: (
                        f"{s.vocab_size}: this tokenizer's ids (from another tool's files) do not number its "
                        f"first {len(ids)} tokens 0..{len(ids) - 1}, so it cannot be cut to {vocab_size}"
                    ),
                    parameter="vocab_size",
                )
            special_tokens = {text: len(ids) + i for i, text in enumerate(self.special_tokens)}
        manifest = None
        if self.manifest:
            manifest = self.manifest.copy(without=("tokenizer", "files"))  # written again by save, for this size
            if manifest.result is not None:  # the training text's token count was with every merge
                result = manifest.result
                result.merges, result.vocab_size, result.tokens, result.bytes_per_token = kept, vocab_size, None, None
            manifest.truncation = Truncation(
                vocab_size=vocab_size, merges=kept, of_vocab_size=self.vocab_size, of_merges=len(self.merges)
            )
        return Tokenizer(
            self.merges[:kept],
            self.pattern,
            special_tokens,
            special_token_roles=self._roles,
            model_max_length=self.model_max_length,
            manifest=manifest,
            ids=ids,
        )

    # -- comparison and display ----------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        """Equal tokenizers encode and decode alike and save the same files: the same merges, split
        pattern, special tokens with their ids, token ids and roles. The manifest is not compared."""
        if not isinstance(other, Tokenizer):
            return NotImplemented
        return (
            self.merges == other.merges
            and self.pretokenizer.regex == other.pretokenizer.regex
            and self.special_tokens == other.special_tokens
            and list(self.special_tokens) == list(other.special_tokens)
            and np.array_equal(self._to_ids, other._to_ids)
            and self._roles == other._roles
            and self.model_max_length == other.model_max_length
        )

    __hash__ = None  # type: ignore[assignment]  # mutable (manifest), compared by value

    def __repr__(self) -> str:
        """`Tokenizer(vocab_size=..., pattern=..., special_tokens={...})`, abridged for long ones."""
        pattern = self.pattern if len(self.pattern) <= 60 else self.pattern[:57] + "..."
        specials = list(self.special_tokens.items())
        shown = "{" + ", ".join(f"{t!r}: {i}" for t, i in specials[:6])
        shown += f", ... ({len(specials)} in all)}}" if len(specials) > 6 else "}"
        roles = f", roles={self._roles!r}" if self._roles else ""
        return f"Tokenizer(vocab_size={self.vocab_size}, pattern={pattern!r}, special_tokens={shown}{roles})"

    # -- encode / decode ---------------------------------------------------------------------

    def encode(
        self,
        text: str,
        *,
        allowed_special: Collection[str] | Literal["all"] = (),
        special_as_text: bool = False,
        errors: Literal["strict", "replace"] = "strict",
    ) -> list[int]:
        """Token ids of `text`. As in tiktoken, a special token's text in `text` raises
        SpecialTokenError (text from users cannot forge a document boundary or a role) unless it is
        in `allowed_special` (a set of tokens, or "all"), which encodes it as the special token, or
        `special_as_text` is set, which encodes it as ordinary text. A lone surrogate raises
        InvalidTextError, unless `errors="replace"` encodes it as U+FFFD.

        >>> tok = Tokenizer([], special_tokens=["<|endoftext|>"])   # no merges: a token per byte
        >>> tok.encode("a<|endoftext|>", allowed_special="all"), len(tok.encode("a<|endoftext|>", special_as_text=True))
        ([97, 256], 14)
        """
        allowed = self._allowed(allowed_special)
        text = self._checked_text(text, allowed, special_as_text, errors)
        encoding = self._splitting_tiktoken()
        if encoding is not None:
            ids = encoding.encode(text, allowed_special=allowed, disallowed_special=())
        else:
            ids = self._encode_pieces(text, allowed)
        return self._to_external(ids)

    def encode_ordinary(self, text: str, errors: Literal["strict", "replace"] = "strict") -> list[int]:
        """Token ids of `text`, treating special tokens as ordinary text."""
        return self.encode(text, allowed_special=(), special_as_text=True, errors=errors)

    def encode_batch(
        self,
        texts: Sequence[str],
        *,
        num_threads: int = 8,
        allowed_special: Collection[str] | Literal["all"] = (),
        special_as_text: bool = False,
        errors: Literal["strict", "replace"] = "strict",
    ) -> list[list[int]]:
        """`encode` of each text, on `num_threads` threads: tiktoken's `encode_batch` (which encodes
        without holding the GIL), or a thread pool over the plain encoder where tiktoken cannot take
        this tokenizer. The options are `encode`'s.

        >>> Tokenizer([(104, 105)]).encode_batch(["hi", "hi hi"])
        [[256], [256, 32, 256]]
        """
        rows = text_list(texts)
        check_num_threads(num_threads)
        allowed = self._allowed(allowed_special)
        rows = [self._checked_text(text, allowed, special_as_text, errors, row) for row, text in enumerate(rows)]
        encoding = self._splitting_tiktoken()
        if encoding is not None:
            encode_one = partial(encoding.encode, allowed_special=allowed, disallowed_special=())
        else:
            encode_one = partial(self._encode_pieces, allowed=allowed)

        def encode_run(run: list[str]) -> list[list[int]]:
            return [encode_one(text) for text in run]

        batch = [ids for run in in_runs(rows, encode_run, num_threads) for ids in run]
        if not self._renumbers():
            return batch
        return [self._to_ids[np.asarray(ids, dtype=np.int64)].tolist() for ids in batch]

    def encode_batch_to_numpy(
        self,
        texts: Sequence[str],
        *,
        num_threads: int = 8,
        allowed_special: Collection[str] | Literal["all"] = (),
        special_as_text: bool = False,
        errors: Literal["strict", "replace"] = "strict",
    ) -> tuple[np.ndarray, np.ndarray]:
        """`encode_batch` as one flat array of ids and the offsets of the texts in it (tiktoken's
        `encode_to_numpy`, for a batch): text i is `ids[offsets[i]:offsets[i + 1]]`. The ids are
        uint16 when every id fits (`n_vocab` <= 65,536), else uint32; `offsets` is int64, one longer
        than `texts`. No Python list of ids is built: tiktoken hands each text's ids over as a buffer.

        >>> ids, offsets = Tokenizer([(104, 105)]).encode_batch_to_numpy(["hi", "hi hi"])
        >>> ids.tolist(), offsets.tolist(), ids.dtype.name
        ([256, 256, 32, 256], [0, 1, 4], 'uint16')
        """
        rows = text_list(texts)
        check_num_threads(num_threads)
        allowed = self._allowed(allowed_special)
        rows = [self._checked_text(text, allowed, special_as_text, errors, row) for row, text in enumerate(rows)]
        encode_run = self._numpy_runs(allowed)
        runs = in_runs(rows, encode_run, num_threads)
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        if rows:
            np.cumsum(np.concatenate([lengths for _, lengths in runs]), out=offsets[1:])
        ids = np.empty(int(offsets[-1]), dtype=self.ids_dtype)
        if ids.size:  # every id is below n_vocab: narrowing cuts none
            np.concatenate([run_ids for run_ids, _ in runs], out=ids, casting="unsafe")
        if self._renumbers():
            ids = self._to_ids[ids].astype(ids.dtype)
        return ids, offsets

    def _numpy_runs(self, allowed: set[str]) -> Callable[[list[str]], tuple[np.ndarray, np.ndarray]]:
        """A function encoding a run of texts into (their internal ids as one uint32 array, the number
        of ids of each). With tiktoken, each text's ids come as a buffer (what its `encode_to_numpy`
        reads), joined once per run."""
        encoding = self._splitting_tiktoken()
        to_buffer = getattr(getattr(encoding, "_core_bpe", None), "encode_to_tiktoken_buffer", None)

        def encode_run(run: list[str]) -> tuple[np.ndarray, np.ndarray]:
            if to_buffer is not None:
                buffers = [to_buffer(text, allowed) for text in run]
                lengths = np.fromiter((memoryview(b).nbytes // 4 for b in buffers), np.int64, len(buffers))
                return np.frombuffer(b"".join(buffers), dtype=np.uint32), lengths
            if encoding is not None:  # a tiktoken without that buffer
                parts = [encoding.encode_to_numpy(text, allowed_special=allowed, disallowed_special=()) for text in run]
            else:
                parts = [np.asarray(self._encode_pieces(text, allowed), dtype=np.uint32) for text in run]
            lengths = np.fromiter(map(len, parts), np.int64, len(parts))
            return (np.concatenate(parts) if parts else np.zeros(0, np.uint32)), lengths

        return encode_run

    @property
    def ids_dtype(self) -> np.dtype:
        """The smallest unsigned integer type holding every id: uint16 up to 65,536 ids, else uint32."""
        return np.dtype(np.uint16 if self.max_token_value < 1 << 16 else np.uint32)

    def encode_ordinary_batch(
        self, texts: Sequence[str], *, num_threads: int = 8, errors: Literal["strict", "replace"] = "strict"
    ) -> list[list[int]]:
        """`encode_ordinary` of each text, on `num_threads` threads (tiktoken's name and signature).

        >>> Tokenizer([(104, 105)], special_tokens=["<|x|>"]).encode_ordinary_batch(["hi<|x|>"])[0][:2]
        [256, 60]
        """
        return self.encode_batch(
            texts, num_threads=num_threads, allowed_special=(), special_as_text=True, errors=errors
        )

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        return b"".join(self.token_bytes(int(i)) for i in ids)

    def decode(self, ids: Iterable[int], errors: str = "replace") -> str:
        """Text of token ids; byte sequences that are not UTF-8 become U+FFFD unless `errors` says otherwise."""
        return self.decode_bytes(ids).decode("utf-8", errors=errors)

    def decode_batch(
        self, batch: Sequence[Sequence[int]], *, num_threads: int = 8, errors: str = "replace"
    ) -> list[str]:
        """`decode` of each list of ids, on `num_threads` threads (tiktoken's `decode_batch` where
        tiktoken takes this tokenizer). An id outside the vocabulary raises InputError.

        >>> Tokenizer([(104, 105)]).decode_batch([[256], [256, 32, 256]])
        ['hi', 'hi hi']
        """
        check_num_threads(num_threads)
        rows = [np.asarray(ids, dtype=np.int64).reshape(-1) for ids in batch]
        encoding = self._tiktoken()
        if encoding is None:
            with ThreadPoolExecutor(num_threads) as pool:
                return list(pool.map(lambda ids: self.decode(ids.tolist(), errors=errors), rows))
        internal = self._internal_ids()
        converted = []
        for ids in rows:
            inside = (ids >= 0) & (ids < len(internal))
            found = np.where(inside, internal[np.where(inside, ids, 0)], -1)
            if ids.size and found.min() < 0:
                bad = int(ids[np.argmax(found < 0)])
                raise InputError(f"token id {bad} is not in this tokenizer's vocabulary")
            converted.append(found.tolist())
        return encoding.decode_batch(converted, errors=errors, num_threads=num_threads)

    # -- encoders ----------------------------------------------------------------------------

    def _allowed(self, allowed_special: Collection[str] | Literal["all"]) -> set[str]:
        allowed = set(self.special_tokens) if allowed_special == "all" else set(allowed_special)
        unknown = allowed - set(self.special_tokens)
        if unknown:
            raise SettingsError(f"not special tokens of this tokenizer: {', '.join(sorted(unknown))}")
        return allowed

    def _checked_text(
        self, text: str, allowed: set[str], special_as_text: bool, errors: str, row: int | None = None
    ) -> str:
        """`text` ready to encode: checked to be Unicode and to hold no special token not allowed.
        `row` is the text's index in a batch, named in the error (and kept on it as `.row`)."""
        text = _unicode_text(text, errors, row)
        if not special_as_text:
            for token in self.special_tokens:
                if token not in allowed and token in text:
                    where = "text" if row is None else f"texts[{row}]"
                    error = SpecialTokenError(
                        f"{where} holds the special token {token!r} as text; pass allowed_special={{{token!r}}} "
                        "(or 'all') to encode it as the special token, or special_as_text=True to encode it as "
                        "ordinary text"
                    )
                    error.row, error.token = row, token
                    raise error
        return text

    def _to_external(self, ids: list[int]) -> list[int]:
        if not self._renumbers():
            return ids
        return self._to_ids[np.asarray(ids, dtype=np.int64)].tolist()

    def _renumbers(self) -> bool:
        """Whether ids differ from the encoder's (internal) ids: a foreign vocabulary's, or special
        tokens with ids of their own."""
        return self._foreign_ids or self.special_tokens != self._natural_special_ids()

    def _internal_ids(self) -> np.ndarray:
        """External id -> internal id (-1 where no token has that id), as an array."""
        table = np.full(self.max_token_value + 1, -1, dtype=np.int64)
        has_id = self._to_ids >= 0
        table[self._to_ids[has_id]] = np.arange(len(self._to_ids))[has_id]
        return table

    def _natural_special_ids(self) -> dict[str, int]:
        return {t: len(self.vocab) + i for i, t in enumerate(self.special_tokens)}

    def _tiktoken(self):
        """tiktoken's Encoding of this vocabulary, or None where tiktoken cannot hold it."""
        if self._encoding is None:
            self._encoding = _build_tiktoken(self) or False
        return self._encoding or None

    def _splitting_tiktoken(self):
        """The Encoding where tiktoken also splits text as this tokenizer does (the named patterns);
        None for a user's regex, whose pieces `_encode_pieces` cuts."""
        return self._tiktoken() if self.pretokenizer.name != "custom" else None

    def _encode_pieces(self, text: str, allowed: set[str]) -> list[int]:
        """Cut the text into pieces with the pretokenizer and encode each with tiktoken's encoder of
        one piece, or with `_encode_python` where tiktoken cannot take the vocabulary."""
        encoding = self._tiktoken()
        encode_piece = getattr(getattr(encoding, "_core_bpe", None), "encode_single_piece", None)
        if encode_piece is None:
            return self._encode_python(text, allowed)
        if len(self._piece_ids) > PIECE_CACHE_SIZE:
            self._piece_ids = {}
        return self._encode_cut(text, allowed, encode_piece, self._piece_ids)

    def _encode_python(self, text: str, allowed: set[str]) -> list[int]:
        """Apply the merges in order to each piece (the plain algorithm; slow but always available)."""
        if self._python_ranks is None:
            self._python_ranks = {pair: rank for rank, pair in enumerate(self.merges)}
        return self._encode_cut(text, allowed, partial(_encode_bytes, ranks=self._python_ranks), {})

    def _encode_cut(
        self, text: str, allowed: set[str], encode_piece: Callable[[bytes], list[int]], cache: dict[str, list[int]]
    ) -> list[int]:
        """The ids of the text cut by the pretokenizer, each piece not in `cache` encoded once."""
        ids: list[int] = []
        for segment, is_special in self.pretokenizer.segments(text):
            if is_special and segment in allowed:
                ids.append(self._internal_special(segment))
                continue
            for piece in self.pretokenizer.split_ordinary(segment):
                piece_ids = cache.get(piece)
                if piece_ids is None:
                    piece_ids = cache[piece] = encode_piece(piece.encode("utf-8"))
                ids.extend(piece_ids)
        return ids

    def _internal_special(self, token: str) -> int:
        return len(self.vocab) + list(self.special_tokens).index(token)

    # -- tiktoken ------------------------------------------------------------------------------

    def to_tiktoken(self, name: str = "bpe") -> tiktoken.Encoding:
        """A `tiktoken.Encoding` giving exactly this tokenizer's ids: ranks are the token ids, the
        split pattern and special tokens are this tokenizer's. What tiktoken has no place for, the
        special tokens' roles and `model_max_length`, ride along as attributes of the same names,
        which `from_tiktoken` reads back. ExportError when tiktoken cannot hold it (two tokens with
        the same bytes, ids that do not follow the merge order, a pattern tiktoken's regex engine
        cannot compile, or a user's regex that can match the empty string).

        >>> Tokenizer([(104, 105)], "gpt2").to_tiktoken().encode("hi hi")
        [256, 32, 256]
        """
        import tiktoken

        if len(set(self.vocab)) != len(self.vocab):
            raise ExportError("this tokenizer holds two tokens with the same bytes, which tiktoken's ranks cannot")
        made = self._to_ids[256 : len(self.vocab)]
        if made.size > 1 and np.any(np.diff(made) <= 0):
            raise ExportError(
                "the ids of this tokenizer's merged tokens do not follow the merge order, so they "
                "cannot serve as tiktoken's ranks"
            )
        pattern = tiktoken_pattern(self.pretokenizer)
        ranks = {token: int(self._to_ids[i]) for i, token in enumerate(self.vocab) if i not in self._absent}
        try:
            encoding = tiktoken.Encoding(
                name=name, pat_str=pattern, mergeable_ranks=ranks, special_tokens=dict(self.special_tokens)
            )
        except Exception as exc:  # tiktoken's regex engine refuses the pattern
            raise ExportError(f"tiktoken cannot take this tokenizer's split pattern: {exc}") from None
        encoding.special_token_roles = dict(self._roles)
        encoding.model_max_length = self.model_max_length
        encoding.split_pattern = self.pattern
        return encoding

    @classmethod
    def from_tiktoken(
        cls,
        encoding: tiktoken.Encoding,
        *,
        special_token_roles: Mapping[str, str] | None = None,
        model_max_length: int | None = None,
    ) -> Tokenizer:
        """The tokenizer of a `tiktoken.Encoding` (its ranks, split pattern and special tokens), giving
        exactly its ids: `Tokenizer.from_tiktoken(tiktoken.get_encoding("cl100k_base"))`. The merges
        are recovered from the ranks as tiktoken merges: token r is the two tokens of lower rank that
        its bytes merge into. The roles, `model_max_length` and split pattern are the arguments', else
        those that `to_tiktoken` attached, so `Tokenizer.from_tiktoken(tok.to_tiktoken()) == tok`.
        tiktoken drops text its pattern does not match, which a tokenizer here never does (see
        `bpe.pretokenize`): an ExportError says so for such a pattern."""
        source = f"tiktoken encoding {encoding.name!r}"
        ranks, specials = encoding._mergeable_ranks, dict(encoding._special_tokens)
        pattern = getattr(encoding, "split_pattern", None)
        if not (isinstance(pattern, str) and _spelled_for_tiktoken(pattern) == encoding._pat_str):
            pattern = encoding._pat_str
            check_covers(pattern, source)
        record = from_ranks(ranks, pattern, specials, source)
        if special_token_roles is None:
            special_token_roles = getattr(encoding, "special_token_roles", None)
        if model_max_length is None:
            model_max_length = getattr(encoding, "model_max_length", None)
        tok = cls._from_record(record)
        tok._roles = check_roles(special_token_roles, tok.special_tokens)  # the caller's: a SettingsError
        tok.model_max_length = check_model_max_length(model_max_length)
        return tok

    @classmethod
    def _from_record(cls, record: TokenizerRecord) -> Tokenizer:
        """The tokenizer a file's record describes."""
        try:
            tok = cls(
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
        return tok

    # -- files -------------------------------------------------------------------------------

    def save(
        self, directory: str | Path, *, force: bool = False, manifest: Manifest | Mapping | None = None
    ) -> Path | str:
        """Write all formats into `directory` (via a temporary directory renamed into place), or
        under an object store URL (`s3://bucket/tok/`: uploaded, then marked complete): merges.txt
        and vocab.json (GPT-2's), tokenizer.json with tokenizer_config.json and
        special_tokens_map.json (for `transformers.AutoTokenizer.from_pretrained(directory)`), the
        tiktoken ranks, and manifest.json (how it was trained, the roles, each file's SHA-256); the
        tokenizer's manifest is then the one written."""
        described = as_manifest(manifest or self.manifest).copy()
        storage.publish_directory(
            directory,
            lambda tmp: self.write_files(tmp, described),
            owned=TOKENIZER_FILES,
            last=MANIFEST_FILE,
            force=force,
        )
        self.manifest = described
        return directory if storage.is_remote(directory) else Path(directory)

    def write_files(self, directory: Path, manifest: Manifest | None = None) -> None:
        """Write every format into an existing directory; `manifest` (updated with this tokenizer's
        description and the export time) is written last. Used by `save` and the artifact store."""
        if manifest is not None:
            manifest.tokenizer = TokenizerSection.from_json(self.describe())
        saved.write(directory, self.record(), manifest)

    def record(self) -> TokenizerRecord:
        """This tokenizer as the plain record the file formats write (`bpe.formats`)."""
        n = len(self.vocab)
        return TokenizerRecord(
            list(self.merges),
            self.pretokenizer.name if self.pretokenizer.name in NAMED_PATTERNS else self.pretokenizer.regex,
            dict(self.special_tokens),
            ids={i: int(self._to_ids[i]) for i in range(n) if i not in self._absent} if self._foreign_ids else None,
            special_token_roles=dict(self._roles),
            model_max_length=self.model_max_length,
        )

    def describe(self) -> dict:
        """The manifest's `tokenizer` section; `special_token_roles` only when a role is set (a
        manifest without it means none)."""
        described = {
            "pattern": self.pretokenizer.name,
            "regex": self.pretokenizer.regex,
            "special_tokens": self.special_tokens,
            "vocab_size": self.vocab_size,
            "merges": len(self.merges),
        }
        if self._roles:
            described["special_token_roles"] = dict(self._roles)
        if self.model_max_length is not None:
            described["model_max_length"] = self.model_max_length
        if self._foreign_ids:  # ids are a base tokenizer's (GPT-2's), not bytes, merges, specials
            described["ids"] = "kept"
        return described

    @classmethod
    def load(
        cls,
        path: str | Path,
        pattern: str | None = None,
        *,
        special_tokens: Sequence[str] | dict[str, int] | None = None,
    ) -> Tokenizer:
        """Load a tokenizer from `path`, which may be:

        - a directory written by `save` (its manifest.json is read first);
        - a Hugging Face byte-level BPE `tokenizer.json`, or a directory holding one (roles are read
          from a tokenizer_config.json beside it);
        - a directory holding GPT-2-style vocab.json + merges.txt (pattern `gpt2` unless `pattern`
          says otherwise);
        - a tiktoken ranks file (`*.tiktoken`, or a directory holding one), which records no split
          pattern: give `pattern` (a name or a regex), and `special_tokens` (texts, numbered after
          the largest rank, or text -> id) if it has any.

        A saved directory is checked first: each file against the SHA-256 the manifest records (if
        it records them), and the files against each other; tampered or damaged files raise
        ExportError naming the file, rather than loading as a different tokenizer. So does a file
        that another tool made in a form this tokenizer cannot reproduce exactly (a WordPiece
        tokenizer.json, a normalizer, ...). `path` may be an object store URL (`s3://bucket/tok/`);
        a tokenizer there is read only once its upload is marked complete."""
        if storage.is_remote(path):
            return cls._load_remote(str(path), pattern)
        return cls._from_record(formats_load.read(Path(storage.local_path(path)), pattern, special_tokens))

    @classmethod
    def _load_remote(cls, url: str, pattern: str | None) -> Tokenizer:
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
                return cls.load(local, pattern)
            except (ExportError, FileNotFoundError) as exc:
                message = str(exc).replace(str(local), url.rstrip("/"))
                raise type(exc)(message) from None


def check_token_ids(
    vocab: Sequence[bytes], ids: Mapping[int, int] | None, special_tokens: dict[str, int]
) -> frozenset[int]:
    """The tokens of `vocab` that `ids` (our id -> id) gives no id: only bytes valid UTF-8 never
    holds may lack one (`NEVER_IN_TEXT`; a vocabulary trained without them). Refuse, with
    SettingsError naming the token, any other token without an id, and an id outside uint32 or too
    sparse to index (`bpe.formats.files.id_problem`), a special token's included."""
    absent = frozenset() if ids is None else frozenset(i for i in range(len(vocab)) if i not in ids)
    wrong = sorted(i for i in absent if i >= 256 or i not in NEVER_IN_TEXT)
    if wrong:
        raise SettingsError(
            f"ids: token {spell(vocab[wrong[0]])!r} has no id (only bytes that UTF-8 text never holds, C0, C1 "
            "and F5-FF, may lack one)",
            parameter="ids",
        )
    tokens = len(vocab) + len(special_tokens) - len(absent)
    named = {text: token_id for text, token_id in special_tokens.items()}
    given = {} if ids is None else {i: ids[i] for i in range(len(vocab)) if i not in absent}
    values = [*named.values(), *given.values()]
    if not values or (min(values) >= 0 and max(values) <= max_id(tokens)):
        return absent
    for text, token_id in named.items():
        if problem := id_problem(text, token_id, tokens):
            raise SettingsError(lambda s, problem=problem: f"{s.special_tokens}: {problem}", parameter="special_tokens")
    for internal, token_id in given.items():
        if problem := id_problem(spell(vocab[internal]), token_id, tokens):
            raise SettingsError(f"ids: {problem}", parameter="ids")
    return absent


def check_model_max_length(value: object) -> int | None:
    """`model_max_length` as a positive int, or None (unset); anything else raises SettingsError."""
    check("model_max_length", value)
    return value


def _unicode_text(text: str, errors: str, row: int | None = None) -> str:
    """`text`, checked to have UTF-8 bytes: a lone surrogate raises InvalidTextError, or with
    `errors="replace"` becomes U+FFFD (tiktoken would otherwise replace it silently)."""
    if errors not in ("strict", "replace"):
        raise SettingsError(f"errors: expected 'strict' or 'replace', got {errors!r}", parameter="errors")
    if text.isascii():
        return text
    error = lone_surrogate(text, "text" if row is None else f"texts[{row}]")
    if error is None:
        return text
    if errors == "replace":
        return LONE_SURROGATE.sub("\ufffd", text)
    raise InvalidTextError(f"{error}; pass errors='replace' to encode it as U+FFFD")


def tiktoken_pattern(pretokenizer: Pretokenizer) -> str:
    """The `pat_str` whose matches (all tiktoken keeps) are the pretokenizer's pieces: a named
    pattern as it is; a user's regex as Hugging Face's Split cuts it, `isolated`, in the spelling
    that reads as Oniguruma reads it. ExportError for a regex that can match the empty string: where
    a search goes on after an empty match, tiktoken's engine and Oniguruma go separate ways."""
    if pretokenizer.name == "whitespace":
        return WHITESPACE_WORD
    if pretokenizer.name != "custom":
        return pretokenizer.regex
    if can_match_empty(pretokenizer.regex):
        shown = pretokenizer.regex if len(pretokenizer.regex) <= 60 else pretokenizer.regex[:57] + "..."
        raise ExportError(
            f"tiktoken cannot split as this tokenizer does: its pattern {shown!r} can match the empty string, "
            "which tiktoken's regex engine steps over otherwise than Hugging Face's"
        )
    return isolated(oniguruma_regex(pretokenizer.regex))


def _spelled_for_tiktoken(pattern: str) -> str | None:
    """`tiktoken_pattern` of a pattern, or None where there is none."""
    try:
        return tiktoken_pattern(Pretokenizer(pattern))
    except (SettingsError, ExportError):
        return None


# Text with a character of every common kind, to find what a tiktoken pattern leaves unmatched.
COVERAGE_PROBE = string.printable + "é ÀßДж中🙂\u00a0\u3000\u0301¹\u200d"


def check_covers(pat_str: str, source: str) -> None:
    """ExportError naming `source` if a tiktoken pattern leaves text between its matches on the
    probe: tiktoken drops that text, while our tokenizers (as Hugging Face's Split) keep it."""
    if pat_str == WHITESPACE_WORD or pat_str in NAMED_PATTERNS.values():
        return
    try:
        compiled = regex.compile(pat_str)
    except regex.error:
        return  # refused, naming the pattern, where it is resolved
    covered, gap_end = 0, len(COVERAGE_PROBE)
    for match in compiled.finditer(COVERAGE_PROBE):
        if match.start() > covered:
            gap_end = match.start()
            break
        covered = match.end()
    if covered < len(COVERAGE_PROBE):
        gap = COVERAGE_PROBE[covered:gap_end]
        raise ExportError(
            f"{source}: its split pattern leaves text unmatched ({gap[:20]!r}), which tiktoken drops and a "
            "Tokenizer keeps as pieces (as Hugging Face's Split does): the ids would not be tiktoken's"
        )


def _encode_bytes(data: bytes, ranks: dict[tuple[int, int], int]) -> list[int]:
    """The plain encoder of one piece: the merges applied in order."""
    return encode_word(list(data), ranks)


def _build_tiktoken(tok: Tokenizer):
    """A tiktoken Encoding for the tokenizer's vocabulary, or None when tiktoken cannot represent it.
    For a user's regex, tiktoken encodes the pieces that the pretokenizer cuts, and its own pattern
    (which splits nothing) is never used."""
    if len(set(tok.vocab)) != len(tok.vocab):
        return None
    try:
        import tiktoken
    except ImportError:
        return None
    pattern = tiktoken_pattern(tok.pretokenizer) if tok.pretokenizer.name != "custom" else r"[\s\S]+"
    ranks = {token: rank for rank, token in enumerate(tok.vocab)}
    specials = {text: len(tok.vocab) + i for i, text in enumerate(tok.special_tokens)}
    try:
        return tiktoken.Encoding(name="bpe", pat_str=pattern, mergeable_ranks=ranks, special_tokens=specials)
    except Exception:
        return None

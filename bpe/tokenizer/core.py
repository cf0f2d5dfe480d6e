"""The `Tokenizer`: merges + pattern + special tokens, with encode/decode, save and load.

It holds what makes it (the merges, the split pattern, the special tokens and their roles, the
manifest) and hands each concern to a room of its own: `vocabulary` (the tokens' bytes and ids),
`encoding` (text to ids and back, on tiktoken), `conversions` (to and from tiktoken),
`persistence` (save and load) and `truncation` (smaller vocabularies). The methods are named as
tiktoken's (`encode_batch`, `n_vocab`, `eot_token`, ...) or Hugging Face's (`token_to_id`,
`get_vocab`, ...).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

import bpe.tokenizer.conversions as conversions
import bpe.tokenizer.persistence as persistence
from bpe.formats.record import TokenizerRecord
from bpe.formats.roles import check_roles
from bpe.manifest import Manifest, as_manifest
from bpe.pretokenize import DEFAULT_PATTERN, Pretokenizer
from bpe.schema import check
from bpe.tokenizer.encoding import Encoder
from bpe.tokenizer.truncation import cut
from bpe.tokenizer.vocabulary import Vocabulary, merged_tokens, numbered_special_tokens

if TYPE_CHECKING:
    import tiktoken


def _role_token_id(role: str) -> property:
    """The read-only property `<role>_token_id` of transformers: the id of the special token with that role, or None."""

    def token_id(tok: Tokenizer) -> int | None:
        return tok._role_id(role)

    return property(token_id, doc=f"The id of the {role} token (transformers' `{role}_token_id`), or None.")


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
        merges, tokens = merged_tokens(merges)
        special = numbered_special_tokens(special_tokens, len(tokens))
        self.pretokenizer = Pretokenizer(pattern, list(special))
        self.manifest: Manifest = as_manifest(manifest)
        self._roles = check_roles(special_token_roles, special)
        self.model_max_length = check_model_max_length(model_max_length)
        # `ids` renumbers the tokens of vocabularies made elsewhere (GPT-2's files): our id -> the file's id
        self._vocabulary = Vocabulary(merges, tokens, special, ids)
        self._encoder = Encoder(self._vocabulary, self.pretokenizer)

    # -- what it is made of --------------------------------------------------------------------

    @property
    def merges(self) -> list[tuple[int, int]]:
        """The merges in order, as pairs of token ids: merge k makes token 256 + k."""
        return self._vocabulary.merges

    @property
    def vocab(self) -> list[bytes]:
        """The bytes of each token by internal id: the 256 bytes, then one token per merge."""
        return self._vocabulary.tokens

    @property
    def special_tokens(self) -> dict[str, int]:
        """Each special token's text -> its id."""
        return self._vocabulary.special_tokens

    @property
    def pattern(self) -> str:
        return self.pretokenizer.pattern_setting

    # -- sizes and names ---------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        """Tokens in all: 256 bytes (fewer for a vocabulary that lacks bytes valid UTF-8 never holds),
        one per merge, and the special tokens (HF's `get_vocab_size()`)."""
        return self._vocabulary.size

    def __len__(self) -> int:
        """The vocabulary size, special tokens included, as `len()` of a transformers tokenizer."""
        return self.vocab_size

    @property
    def max_token_value(self) -> int:
        """The largest token id (tiktoken's name)."""
        return self._vocabulary.max_token_value

    @property
    def n_vocab(self) -> int:
        """tiktoken's vocabulary size: the largest id + 1 (equal to `vocab_size` unless ids have gaps)."""
        return self.max_token_value + 1

    @property
    def ids_dtype(self) -> np.dtype:
        """The smallest unsigned integer type holding every id: uint16 up to 65,536 ids, else uint32."""
        return self._vocabulary.ids_dtype

    @property
    def special_token_roles(self) -> dict[str, str]:
        """The roles transformers gives special tokens: role (bos, eos, pad, unk) -> token."""
        return dict(self._roles)

    def _role_id(self, role: str) -> int | None:
        token = self._roles.get(role)
        return None if token is None else self.special_tokens[token]

    bos_token_id = _role_token_id("bos")
    eos_token_id = _role_token_id("eos")
    pad_token_id = _role_token_id("pad")
    unk_token_id = _role_token_id("unk")

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

    # -- one token -----------------------------------------------------------------------------

    def token_bytes(self, token_id: int) -> bytes:
        return self._vocabulary.token_bytes(token_id)

    def decode_single_token_bytes(self, token_id: int) -> bytes:
        """The bytes of one token (tiktoken's name for `token_bytes`)."""
        return self.token_bytes(token_id)

    def encode_single_token(self, text_or_bytes: str | bytes) -> int:
        """The id of a text or bytes that is exactly one token (a special token's text included), as
        tiktoken's method; KeyError otherwise. `encode_single_token(" the")` -> the id of b" the"."""
        return self._vocabulary.encode_single_token(text_or_bytes)

    def token_to_id(self, token: str) -> int | None:
        """Id of a token as Hugging Face spells it (`"Ġthe"` for b" the", a special token as its text),
        or None, as `tokenizers.Tokenizer.token_to_id`."""
        return self._vocabulary.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        """Hugging Face's spelling of a token id (`"Ġthe"`; a special token's text), or None for an
        id outside the vocabulary, as `tokenizers.Tokenizer.id_to_token`."""
        return self._vocabulary.id_to_token(token_id)

    def get_vocab(self, with_added_tokens: bool = True) -> dict[str, int]:
        """Hugging Face's spelling of every token -> its id (`{"Ġthe": 262, ...}`), special tokens
        included, as `tokenizers.Tokenizer.get_vocab`. `with_added_tokens=False` leaves the special
        tokens out (Hugging Face keeps those that its model's vocab lists, as ours does)."""
        return self._vocabulary.get_vocab(with_added_tokens)

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
        smaller = cut(self._vocabulary, self.manifest, vocab_size)
        # The cut's merges, special tokens, ids and manifest, with this one's pattern, roles and model_max_length.
        return Tokenizer._from_record(replace(self.record(), **vars(smaller)))

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
            and np.array_equal(self._vocabulary.to_ids, other._vocabulary.to_ids)
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
        return self._encoder.encode(text, allowed_special, special_as_text, errors)

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
        return self._encoder.encode_batch(texts, num_threads, allowed_special, special_as_text, errors)

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
        return self._encoder.encode_batch_to_numpy(texts, num_threads, allowed_special, special_as_text, errors)

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
        return self._vocabulary.decode_bytes(ids)

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
        return self._encoder.decode_batch(batch, num_threads, errors)

    # -- tiktoken ------------------------------------------------------------------------------

    def to_tiktoken(self, name: str = "bpe") -> tiktoken.Encoding:
        """A `tiktoken.Encoding` giving exactly this tokenizer's ids: ranks are the token ids, the
        split pattern and special tokens are this tokenizer's. What tiktoken has no place for, the
        special tokens' roles and `model_max_length`, ride along as attributes of the same names,
        which `from_tiktoken` reads back. ExportError when tiktoken cannot hold it (two tokens with
        the same bytes, ids that do not follow the merge order, merges that tiktoken's merging by
        rank would not follow (`bpe.formats.rank_order`), a pattern tiktoken's regex engine cannot
        compile, or a user's regex that can match the empty string).

        >>> Tokenizer([(104, 105)], "gpt2").to_tiktoken().encode("hi hi")
        [256, 32, 256]
        """
        return conversions.to_tiktoken(self._vocabulary, self.pretokenizer, self._roles, self.model_max_length, name)

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
        record, roles, max_length = conversions.tiktoken_record(encoding, special_token_roles, model_max_length)
        tok = cls._from_record(record)
        tok._roles = check_roles(roles, tok.special_tokens)  # the caller's: a SettingsError
        tok.model_max_length = check_model_max_length(max_length)
        return tok

    # -- files -------------------------------------------------------------------------------

    def save(
        self, directory: str | Path, *, force: bool = False, manifest: Manifest | Mapping | None = None
    ) -> Path | str:
        """Write all formats into `directory` (via a temporary directory renamed into place), or
        under an object store URL (`s3://bucket/tok/`: uploaded, then marked complete): merges.txt
        and vocab.json (GPT-2's), tokenizer.json with tokenizer_config.json and
        special_tokens_map.json (for `transformers.AutoTokenizer.from_pretrained(directory)`), the
        tiktoken ranks (where tiktoken encodes as the merges do, as it always does for trained
        ones), and manifest.json (how it was trained, the roles, each file's SHA-256); the
        tokenizer's manifest is then the one written."""
        described = as_manifest(manifest or self.manifest).copy()
        path = persistence.publish(directory, lambda tmp: self.write_files(tmp, described), force)
        self.manifest = described
        return path

    def write_files(self, directory: Path, manifest: Manifest | None = None) -> None:
        """Write every format into an existing directory; `manifest` (updated with this tokenizer's
        description and the export time) is written last. Used by `save` and the artifact store."""
        persistence.write_files(directory, self.record(), self.describe(), manifest)

    def record(self) -> TokenizerRecord:
        """This tokenizer as the plain record the file formats write (`bpe.formats`)."""
        return persistence.record(self._vocabulary, self.pretokenizer, self._roles, self.model_max_length)

    def describe(self) -> dict:
        """The manifest's `tokenizer` section; `special_token_roles` only when a role is set (a
        manifest without it means none)."""
        return persistence.describe(self._vocabulary, self.pretokenizer, self._roles, self.model_max_length)

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
        return persistence.load(cls._from_record, path, pattern, special_tokens)

    @classmethod
    def _from_record(cls, record: TokenizerRecord) -> Tokenizer:
        """The tokenizer a file's record describes."""
        return persistence.from_record(cls, record)


def check_model_max_length(value: object) -> int | None:
    """`model_max_length` as a positive int, or None (unset); anything else raises SettingsError."""
    check("model_max_length", value)
    return value

"""A tokenizer's vocabulary and its id table: the bytes of each token, the special tokens, and the
ids the outside world knows them by.

Internally token i < 256 is byte i, merge k makes token 256 + k, and special token j comes after
the merged tokens. A vocabulary made elsewhere (GPT-2's files) numbers its tokens otherwise: `ids`
maps our id to that file's id, and a byte that valid UTF-8 never holds may have none (the file
lacks it): -1 in the table, never encoded.

>>> merges, tokens = merged_tokens([(104, 105)])
>>> vocabulary = Vocabulary(merges, tokens, numbered_special_tokens(["<|endoftext|>"], len(tokens)))
>>> vocabulary.token_bytes(256), vocabulary.id_to_token(257), vocabulary.size
(b'hi', '<|endoftext|>', 258)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import cached_property

import numpy as np

from bpe.errors import ExportError, InputError, SettingsError
from bpe.formats.files import id_problem, max_id
from bpe.formats.rank_order import rank_order_problem
from bpe.formats.spelling import NEVER_IN_TEXT, spell, unspell


def merged_tokens(merges: Sequence[tuple[int, int]] | np.ndarray) -> tuple[list[tuple[int, int]], list[bytes]]:
    """The merges as pairs of ints, and the bytes of every token they make after the 256 bytes;
    ValueError for a merge that uses a token before it exists."""
    pairs = list(map(tuple, np.asarray(merges).reshape(-1, 2).astype(np.int64, copy=False).tolist()))
    tokens = [bytes([b]) for b in range(256)]
    for a, b in pairs:
        if not (a < len(tokens) and b < len(tokens)):
            raise ValueError(f"merge {len(tokens) - 256} uses token {max(a, b)} before it exists")
        tokens.append(tokens[a] + tokens[b])
    return pairs, tokens


def numbered_special_tokens(special_tokens: Sequence[str] | dict[str, int], first_id: int) -> dict[str, int]:
    """Special token -> id: as given (a dict), or numbered from `first_id` in order."""
    if isinstance(special_tokens, dict):
        return dict(special_tokens)
    return {t: first_id + i for i, t in enumerate(special_tokens)}


class Vocabulary:
    """The tokens (`tokens`: bytes by internal id, then `special_tokens`) and their ids: `to_ids`
    (internal id -> id, -1 where a byte has none) and `from_ids` (id -> internal id)."""

    def __init__(
        self,
        merges: list[tuple[int, int]],
        tokens: list[bytes],
        special_tokens: dict[str, int],
        ids: Mapping[int, int] | None = None,
    ) -> None:
        self.merges, self.tokens, self.special_tokens = merges, tokens, special_tokens
        n = len(tokens)
        self.absent = check_token_ids(tokens, ids, special_tokens)
        table = np.arange(n + len(special_tokens), dtype=np.int64)
        if ids is not None:
            table[:n] = [ids.get(i, -1) for i in range(n)]
        table[n:] = list(special_tokens.values())
        self.foreign_ids = ids is not None  # a base tokenizer's ids (GPT-2's), not bytes, merges, specials
        self.to_ids = table
        self.from_ids = {external: internal for internal, external in enumerate(table.tolist()) if external >= 0}
        self._internal_of_bytes: dict[bytes, int] | None = None

    # -- sizes ------------------------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Tokens in all: the bytes (less those without an id), one per merge, the special tokens."""
        return len(self.tokens) + len(self.special_tokens) - len(self.absent)

    @property
    def max_token_value(self) -> int:
        return int(self.to_ids.max())

    @property
    def ids_dtype(self) -> np.dtype:
        """The smallest unsigned integer type holding every id: uint16 up to 65,536 ids, else uint32."""
        return np.dtype(np.uint16 if self.max_token_value < 1 << 16 else np.uint32)

    # -- one token --------------------------------------------------------------------------------

    def token_bytes(self, token_id: int) -> bytes:
        internal = self.from_ids.get(token_id)
        if internal is None:
            raise InputError(f"token id {token_id} is not in this tokenizer's vocabulary")
        if internal >= len(self.tokens):
            return list(self.special_tokens)[internal - len(self.tokens)].encode("utf-8")
        return self.tokens[internal]

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        return b"".join(self.token_bytes(int(i)) for i in ids)

    def encode_single_token(self, text_or_bytes: str | bytes) -> int:
        if isinstance(text_or_bytes, str):
            if text_or_bytes in self.special_tokens:
                return self.special_tokens[text_or_bytes]
            text_or_bytes = text_or_bytes.encode("utf-8")
        internal = self._bytes_index().get(bytes(text_or_bytes))
        if internal is None:
            raise KeyError(text_or_bytes)
        return int(self.to_ids[internal])

    def token_to_id(self, token: str) -> int | None:
        if token in self.special_tokens:
            return self.special_tokens[token]
        try:
            data = unspell(token)
        except ExportError:
            return None
        internal = self._bytes_index().get(data)
        return None if internal is None else int(self.to_ids[internal])

    def id_to_token(self, token_id: int) -> str | None:
        internal = self.from_ids.get(int(token_id))
        if internal is None:
            return None
        if internal >= len(self.tokens):
            return list(self.special_tokens)[internal - len(self.tokens)]
        return spell(self.tokens[internal])

    def get_vocab(self, with_added_tokens: bool = True) -> dict[str, int]:
        entries = {spell(token): int(self.to_ids[i]) for i, token in enumerate(self.tokens) if i not in self.absent}
        if with_added_tokens:
            entries.update(self.special_tokens)
        return entries

    def given_ids(self, below: int | None = None) -> dict[int, int]:
        """Internal id -> id of each token (below `below`, if given) that has an id, special tokens
        left out: what `ids` took."""
        n = len(self.tokens) if below is None else below
        return {i: int(self.to_ids[i]) for i in range(n) if i not in self.absent}

    def _bytes_index(self) -> dict[bytes, int]:
        """Token bytes -> the first internal id with those bytes."""
        if self._internal_of_bytes is None:
            index: dict[bytes, int] = {}
            for internal, token in enumerate(self.tokens):
                if internal not in self.absent:
                    index.setdefault(token, internal)
            self._internal_of_bytes = index
        return self._internal_of_bytes

    @cached_property
    def rank_problem(self) -> str | None:
        """Why encoding by rank (tiktoken's, ranks = internal ids) would not give the merges' ids,
        or None where it gives them on every text (`bpe.formats.rank_order`); the tokens distinct."""
        if len(set(self.tokens)) != len(self.tokens):
            return "two tokens have the same bytes, which tiktoken's ranks cannot hold"
        return rank_order_problem(self.tokens, self.merges)

    # -- internal ids, as the encoders give them ----------------------------------------------

    def internal_special(self, token: str) -> int:
        return len(self.tokens) + list(self.special_tokens).index(token)

    def renumbers(self) -> bool:
        """Whether ids differ from the encoder's (internal) ids: a foreign vocabulary's, or special
        tokens with ids of their own."""
        natural = {t: len(self.tokens) + i for i, t in enumerate(self.special_tokens)}
        return self.foreign_ids or self.special_tokens != natural

    def to_external(self, ids: list[int]) -> list[int]:
        """The ids of internal ids."""
        if not self.renumbers():
            return ids
        return self.to_ids[np.asarray(ids, dtype=np.int64)].tolist()

    def internal_ids(self) -> np.ndarray:
        """Id -> internal id (-1 where no token has that id), as an array."""
        table = np.full(self.max_token_value + 1, -1, dtype=np.int64)
        has_id = self.to_ids >= 0
        table[self.to_ids[has_id]] = np.arange(len(self.to_ids))[has_id]
        return table


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

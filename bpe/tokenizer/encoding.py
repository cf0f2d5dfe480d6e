"""Text to ids and back for one vocabulary and split pattern: the `Tokenizer`'s encoders.

Encoding runs on tiktoken (ranks = merge order), the fast and widely trusted encoder. A named
pattern is split by tiktoken itself; a user's regex cuts text as Hugging Face's `Split` does
(`bpe.pretokenize.split_isolated`), and tiktoken encodes the pieces (each distinct piece once per
`PIECE_CACHE_SIZE` of them). Where tiktoken cannot take the vocabulary (two tokens with the same
bytes) or would encode it otherwise than its merges (`bpe.formats.rank_order`: a token that merging
by rank reaches through a pair the merges never join), a plain Python encoder applies the merges in
order instead, as Hugging Face does. Batches run on threads
(`bpe.tokenizer.batching.in_runs`); `encode_batch_to_numpy` hands tiktoken's buffers over without building
Python lists of ids.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Literal

import numpy as np

from bpe.errors import LONE_SURROGATE, InputError, InvalidTextError, SettingsError, SpecialTokenError, lone_surrogate
from bpe.pretokenize import Pretokenizer
from bpe.tokenizer.batching import check_num_threads, in_runs, text_list
from bpe.tokenizer.conversions import tiktoken_pattern
from bpe.tokenizer.vocabulary import Vocabulary

# Pieces whose ids a tokenizer with a user's regex keeps between calls (a piece and its ids take
# about 200 bytes: some 20 MB at most), so that a batch encodes each common word once.
PIECE_CACHE_SIZE = 100_000

Errors = Literal["strict", "replace"]
Allowed = Collection[str] | Literal["all"]


class Encoder:
    """Encodes and decodes with `vocabulary`, text cut by `pretokenizer`. Ids in and out are the
    vocabulary's ids; the encoders work on internal ids and the vocabulary renumbers them."""

    def __init__(self, vocabulary: Vocabulary, pretokenizer: Pretokenizer) -> None:
        self.vocabulary, self.pretokenizer = vocabulary, pretokenizer
        self.encoding = None  # tiktoken's Encoding, built on first use; False where tiktoken cannot hold it
        self._python_ranks: dict[tuple[int, int], int] | None = None
        self._piece_ids: dict[str, list[int]] = {}  # the ids of pieces a user's regex cut, as encoded

    # -- encoding -----------------------------------------------------------------------------

    def encode(self, text: str, allowed_special: Allowed, special_as_text: bool, errors: Errors) -> list[int]:
        allowed = self._allowed(allowed_special)
        text = self._checked_text(text, allowed, special_as_text, errors)
        encoding = self._splitting_tiktoken()
        if encoding is not None:
            ids = encoding.encode(text, allowed_special=allowed, disallowed_special=())
        else:
            ids = self._encode_pieces(text, allowed)
        return self.vocabulary.to_external(ids)

    def encode_batch(
        self, texts: Sequence[str], num_threads: int, allowed_special: Allowed, special_as_text: bool, errors: Errors
    ) -> list[list[int]]:
        allowed, rows = self._checked_batch(texts, num_threads, allowed_special, special_as_text, errors)
        encoding = self._splitting_tiktoken()
        if encoding is not None:
            encode_one = partial(encoding.encode, allowed_special=allowed, disallowed_special=())
        else:
            encode_one = partial(self._encode_pieces, allowed=allowed)

        def encode_run(run: list[str]) -> list[list[int]]:
            return [encode_one(text) for text in run]

        batch = [ids for run in in_runs(rows, encode_run, num_threads) for ids in run]
        if not self.vocabulary.renumbers():
            return batch
        return [self.vocabulary.to_ids[np.asarray(ids, dtype=np.int64)].tolist() for ids in batch]

    def encode_batch_to_numpy(
        self, texts: Sequence[str], num_threads: int, allowed_special: Allowed, special_as_text: bool, errors: Errors
    ) -> tuple[np.ndarray, np.ndarray]:
        allowed, rows = self._checked_batch(texts, num_threads, allowed_special, special_as_text, errors)
        runs = in_runs(rows, self._numpy_runs(allowed), num_threads)
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        if rows:
            np.cumsum(np.concatenate([lengths for _, lengths in runs]), out=offsets[1:])
        ids = np.empty(int(offsets[-1]), dtype=self.vocabulary.ids_dtype)
        if ids.size:  # every id is below n_vocab: narrowing cuts none
            np.concatenate([run_ids for run_ids, _ in runs], out=ids, casting="unsafe")
        if self.vocabulary.renumbers():
            ids = self.vocabulary.to_ids[ids].astype(ids.dtype)
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

    # -- decoding -----------------------------------------------------------------------------

    def decode_batch(self, batch: Sequence[Sequence[int]], num_threads: int, errors: str) -> list[str]:
        check_num_threads(num_threads)
        rows = [np.asarray(ids, dtype=np.int64).reshape(-1) for ids in batch]
        encoding = self.tiktoken()
        if encoding is None:

            def decode(ids: np.ndarray) -> str:
                return self.vocabulary.decode_bytes(ids.tolist()).decode("utf-8", errors=errors)

            with ThreadPoolExecutor(num_threads) as pool:
                return list(pool.map(decode, rows))
        internal = self.vocabulary.internal_ids()
        converted = []
        for ids in rows:
            inside = (ids >= 0) & (ids < len(internal))
            found = np.where(inside, internal[np.where(inside, ids, 0)], -1)
            if ids.size and found.min() < 0:
                bad = int(ids[np.argmax(found < 0)])
                raise InputError(f"token id {bad} is not in this tokenizer's vocabulary")
            converted.append(found.tolist())
        return encoding.decode_batch(converted, errors=errors, num_threads=num_threads)

    # -- what may be encoded ------------------------------------------------------------------

    def _allowed(self, allowed_special: Allowed) -> set[str]:
        special_tokens = self.vocabulary.special_tokens
        allowed = set(special_tokens) if allowed_special == "all" else set(allowed_special)
        unknown = allowed - set(special_tokens)
        if unknown:
            raise SettingsError(f"not special tokens of this tokenizer: {', '.join(sorted(unknown))}")
        return allowed

    def _checked_batch(
        self, texts: Sequence[str], num_threads: int, allowed_special: Allowed, special_as_text: bool, errors: Errors
    ) -> tuple[set[str], list[str]]:
        """The allowed special tokens and the texts, each checked as `_checked_text` checks it."""
        rows = text_list(texts)
        check_num_threads(num_threads)
        allowed = self._allowed(allowed_special)
        checked = [self._checked_text(text, allowed, special_as_text, errors, row) for row, text in enumerate(rows)]
        return allowed, checked

    def _checked_text(
        self, text: str, allowed: set[str], special_as_text: bool, errors: str, row: int | None = None
    ) -> str:
        """`text` ready to encode: checked to be Unicode and to hold no special token not allowed.
        `row` is the text's index in a batch, named in the error (and kept on it as `.row`)."""
        text = unicode_text(text, errors, row)
        if not special_as_text:
            for token in self.vocabulary.special_tokens:
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

    # -- the encoders -------------------------------------------------------------------------

    def tiktoken(self):
        """tiktoken's Encoding of this vocabulary (for decoding; for encoding where
        `_encoding_tiktoken` gives it), or None where tiktoken cannot hold it."""
        if self.encoding is None:
            self.encoding = _build_tiktoken(self.vocabulary, self.pretokenizer) or False
        return self.encoding or None

    def _encoding_tiktoken(self):
        """The Encoding where encoding by its ranks gives the merges' ids (`Vocabulary.rank_problem`),
        else None."""
        return self.tiktoken() if self.vocabulary.rank_problem is None else None

    def _splitting_tiktoken(self):
        """`_encoding_tiktoken` where tiktoken also splits text as this tokenizer does (the named
        patterns); None for a user's regex, whose pieces `_encode_pieces` cuts."""
        return self._encoding_tiktoken() if self.pretokenizer.name != "custom" else None

    def _encode_pieces(self, text: str, allowed: set[str]) -> list[int]:
        """Cut the text into pieces with the pretokenizer and encode each with tiktoken's encoder of
        one piece, or with `encode_python` where tiktoken cannot encode the vocabulary."""
        encoding = self._encoding_tiktoken()
        encode_piece = getattr(getattr(encoding, "_core_bpe", None), "encode_single_piece", None)
        if encode_piece is None:
            return self.encode_python(text, allowed)
        if len(self._piece_ids) > PIECE_CACHE_SIZE:
            self._piece_ids = {}
        return self._encode_cut(text, allowed, encode_piece, self._piece_ids)

    def encode_python(self, text: str, allowed: set[str]) -> list[int]:
        """Apply the merges in order to each piece (the plain algorithm; slow but always available)."""
        if self._python_ranks is None:
            self._python_ranks = {pair: rank for rank, pair in enumerate(self.vocabulary.merges)}
        return self._encode_cut(text, allowed, partial(_encode_bytes, ranks=self._python_ranks), {})

    def _encode_cut(
        self, text: str, allowed: set[str], encode_piece: Callable[[bytes], list[int]], cache: dict[str, list[int]]
    ) -> list[int]:
        """The internal ids of the text cut by the pretokenizer, each piece not in `cache` encoded once."""
        ids: list[int] = []
        for segment, is_special in self.pretokenizer.segments(text):
            if is_special and segment in allowed:
                ids.append(self.vocabulary.internal_special(segment))
                continue
            for piece in self.pretokenizer.split_ordinary(segment):
                piece_ids = cache.get(piece)
                if piece_ids is None:
                    piece_ids = cache[piece] = encode_piece(piece.encode("utf-8"))
                ids.extend(piece_ids)
        return ids


def unicode_text(text: str, errors: str, row: int | None = None) -> str:
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


def _encode_bytes(data: bytes, ranks: dict[tuple[int, int], int]) -> list[int]:
    """The plain encoder of one piece, where tiktoken cannot take the vocabulary: merge the
    lowest-ranked adjacent pair (`ranks`: pair -> merge index; merge i made 256 + i) until none is
    left, every occurrence left to right.

    >>> _encode_bytes(bytes([1, 2, 3, 1, 2]), {(1, 2): 0, (256, 3): 1})
    [257, 256]
    """
    ids = list(data)
    while len(ids) > 1:
        best = min(zip(ids, ids[1:]), key=lambda pair: ranks.get(pair, 1 << 62))
        if best not in ranks:
            break
        new_id, merged, i = 256 + ranks[best], [], 0
        while i < len(ids):
            if i + 1 < len(ids) and (ids[i], ids[i + 1]) == best:
                merged.append(new_id)
                i += 2
            else:
                merged.append(ids[i])
                i += 1
        ids = merged
    return ids


def _build_tiktoken(vocabulary: Vocabulary, pretokenizer: Pretokenizer):
    """A tiktoken Encoding for the vocabulary (internal ids as ranks), or None when tiktoken cannot
    represent it. For a user's regex, tiktoken encodes the pieces that the pretokenizer cuts, and
    its own pattern (which splits nothing) is never used."""
    tokens = vocabulary.tokens
    if len(set(tokens)) != len(tokens):
        return None
    try:
        import tiktoken
    except ImportError:
        return None
    pattern = tiktoken_pattern(pretokenizer) if pretokenizer.name != "custom" else r"[\s\S]+"
    ranks = {token: rank for rank, token in enumerate(tokens)}
    specials = {text: len(tokens) + i for i, text in enumerate(vocabulary.special_tokens)}
    try:
        return tiktoken.Encoding(name="bpe", pat_str=pattern, mergeable_ranks=ranks, special_tokens=specials)
    except Exception:
        return None

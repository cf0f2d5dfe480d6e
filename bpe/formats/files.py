"""What every reader and writer of tokenizer files applies: reading a file with one-line errors that
name it, tokens that are distinct, and the limits token ids obey."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from bpe.errors import ExportError


def read_text(path: Path) -> str:
    """The UTF-8 text of a tokenizer file; a missing, unreadable or non-UTF-8 file raises ExportError."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ExportError(f"{path}: missing") from None
    except OSError as exc:
        raise ExportError(f"{path}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise ExportError(f"{path}: not UTF-8 text (byte {exc.start}); the file is damaged") from None


def read_json(path: Path) -> object:
    """A JSON file's document; invalid JSON (a truncated file, say) raises ExportError naming where."""
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise ExportError(
            f"{path}: not valid JSON ({exc.msg}: line {exc.lineno}, column {exc.colno}); the file is damaged or "
            "truncated"
        ) from None


def check_unique(vocab: Sequence[bytes]) -> None:
    """The formats key tokens by their bytes: two tokens with the same bytes cannot be written."""
    seen: dict[bytes, int] = {}
    for token_id, token in enumerate(vocab):
        if token in seen:
            raise ExportError(
                f"tokens {seen[token]} and {token_id} are both {token!r}: vocab.json, tokenizer.json and "
                "tiktoken ranks need distinct tokens"
            )
        seen[token] = token_id


# Token ids are written as uint32 (.npy, .bin) and are tiktoken's u32 ranks. Tables indexed by id
# (id -> token) have the largest id + 1 entries, so ids must also be dense: at most twice the tokens
# plus 2**20 (an 8 MB table at worst), which leaves room for gaps and special tokens set far apart.
ID_LIMIT = 1 << 32


SPARSE_IDS = 1 << 20


def max_id(tokens: int) -> int:
    """The largest id a vocabulary of `tokens` tokens may give."""
    return min(ID_LIMIT - 1, 2 * tokens + SPARSE_IDS - 1)


def id_problem(token: str | bytes, token_id: int, tokens: int, kind: str = "id") -> str | None:
    """Why `token_id` cannot be `token`'s id in a vocabulary of `tokens` tokens, or None."""
    if not 0 <= token_id < ID_LIMIT:
        return f"token {token!r} has {kind} {token_id}, outside 0 to {ID_LIMIT - 1} (ids are unsigned 32-bit)"
    if token_id > max_id(tokens):
        return (
            f"token {token!r} has {kind} {token_id}, too sparse for {tokens} tokens (ids may go up to "
            f"{max_id(tokens)}: twice the tokens plus {SPARSE_IDS})"
        )
    return None


def check_ids(where: str, ids: dict[str, int] | dict[bytes, int], tokens: int | None = None) -> None:
    """Raise ExportError naming `where` and the first token whose id `id_problem` refuses; `tokens`
    is the vocabulary's size (the number of `ids` unless given)."""
    tokens = len(ids) if tokens is None else tokens
    for token, token_id in ids.items():
        problem = id_problem(token, token_id, tokens)
        if problem is not None:
            raise ExportError(f"{where}: {problem}")

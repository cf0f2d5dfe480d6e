"""tiktoken's ranks file: one `base64(token) rank` line per token; rank = token id. It records no
split pattern and no special tokens: the caller gives them. Merges are recovered from the ranks as
tiktoken merges (`from_ranks`)."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from pathlib import Path

from bpe.errors import ExportError
from bpe.formats.files import id_problem, read_lines
from bpe.formats.record import TokenizerRecord
from bpe.formats.spelling import absent_bytes
from bpe.pretokenize import NAMED_PATTERNS, WHITESPACE_WORD, Pretokenizer

TIKTOKEN_FILE = "tokenizer.tiktoken"


def write(path: Path, record: TokenizerRecord) -> None:
    """One `base64(token) rank` line per token, in order of rank; rank = token id."""
    vocab, ids = record.vocab(), record.id_list()
    ranked = enumerate(vocab) if ids is None else sorted((int(r), t) for r, t in zip(ids, vocab) if r is not None)
    lines = [f"{base64.b64encode(token).decode('ascii')} {rank}" for rank, token in ranked]
    path.write_text("\n".join(lines) + "\n", encoding="ascii")


def read(path: Path, pattern: str | None, special_tokens: Sequence[str] | dict[str, int] | None) -> TokenizerRecord:
    """A ranks file made by any tool, with the split `pattern` it does not record (a name or a
    regex) and its `special_tokens` (texts, numbered after the largest rank, or text -> id)."""
    if pattern is None:
        raise ExportError(
            f"{path}: a tiktoken ranks file records no split pattern; give it as pattern "
            f"({', '.join(NAMED_PATTERNS)} or a regex; --pattern in the command)"
        )
    ranks = read_ranks(path)
    if special_tokens is None:
        specials = {}
    elif isinstance(special_tokens, dict):
        specials = dict(special_tokens)
    else:
        specials = {t: max(ranks.values()) + 1 + i for i, t in enumerate(special_tokens)}
    Pretokenizer(pattern)  # the caller's pattern: a bad one is a SettingsError naming `pattern`
    return from_ranks(ranks, pattern, specials, str(path))


def read_ranks(path: Path) -> dict[bytes, int]:
    """A tiktoken ranks file made by any tool (`base64(token) rank` a line, in any order) as token
    bytes -> rank, as tiktoken's `load_tiktoken_bpe` reads it, with errors naming the line."""
    ranks: dict[bytes, int] = {}
    seen: dict[int, int] = {}
    for line_no, line in read_lines(path):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or not (parts[1].isascii() and parts[1].isdigit()):
            raise ExportError(f"{path}:{line_no}: expected a base64 token and its rank separated by a space")
        try:
            token = base64.b64decode(parts[0], validate=True)
        except (binascii.Error, ValueError):
            raise ExportError(f"{path}:{line_no}: {parts[0]!r} is not base64") from None
        rank = int(parts[1])
        if token in ranks or rank in seen:
            what = f"token {token!r}" if token in ranks else f"rank {rank}"
            raise ExportError(f"{path}:{line_no}: {what} appears twice")
        ranks[token] = rank
        seen[rank] = line_no
    if not ranks:
        raise ExportError(f"{path}: holds no token")
    for token, rank in ranks.items():
        problem = id_problem(token, rank, len(ranks), kind="rank")
        if problem is not None:
            raise ExportError(f"{path}:{seen[rank]}: {problem}")
    return ranks


def tokens_by_rank(ranks: dict[bytes, int]) -> list[bytes | None]:
    """A tiktoken file's tokens in order of rank, None where a rank between 0 and the largest is
    missing (`save` writes ranks 0 to n-1: a gap makes the file disagree with the others)."""
    by_rank: list[bytes | None] = [None] * (max(ranks.values()) + 1)
    for token, rank in ranks.items():
        by_rank[rank] = token
    return by_rank


def from_ranks(
    ranks: Mapping[bytes, int], pattern: str, special_tokens: dict[str, int], source: str
) -> TokenizerRecord:
    """A tokenizer from tiktoken ranks (token bytes -> rank = id); errors name `source`."""
    absent = absent_bytes(ranks, source)
    taken = set(ranks.values())
    clash = next((t for t, i in special_tokens.items() if i in taken), None)
    if clash is not None:
        raise ExportError(f"{source}: special token {clash!r} has id {special_tokens[clash]}, which a token holds")
    internal_of = {bytes([b]): b for b in range(256) if b not in absent}
    ids = {b: int(ranks[bytes([b])]) for b in range(256) if b not in absent}
    merges: list[tuple[int, int]] = []
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        if len(token) == 1:
            continue
        parts = merge_parts(ranks, token, rank)
        if len(parts) != 2 or not all(part in internal_of for part in parts):
            raise ExportError(
                f"{source}: token {token!r} (rank {rank}) is not the merge of two tokens of lower "
                "rank, so these are not BPE ranks"
            )
        internal = 256 + len(merges)
        merges.append((internal_of[parts[0]], internal_of[parts[1]]))
        internal_of[token] = internal
        ids[internal] = int(rank)
    if pattern == WHITESPACE_WORD:  # how to_tiktoken and save spell the whitespace pattern
        pattern = "whitespace"
    specials = dict(sorted(special_tokens.items(), key=lambda item: item[1]))
    natural = (
        not absent
        and all(ids[i] == i for i in ids)
        and list(specials.values()) == list(range(len(ids), len(ids) + len(specials)))
    )
    return TokenizerRecord(merges, pattern, specials, ids=None if natural else ids, source=source)


def merge_parts(ranks: Mapping[bytes, int], token: bytes, max_rank: int) -> list[bytes]:
    """The pieces tiktoken's merging makes of `token`'s bytes using only ranks below `max_rank`:
    for a BPE ranks table, the two tokens whose merge is `token`.

    >>> merge_parts({b"a": 0, b"b": 1, b"c": 2, b"ab": 3, b"abc": 4}, b"abc", 4)
    [b'ab', b'c']
    """
    parts = [token[i : i + 1] for i in range(len(token))]
    while len(parts) > 1:
        best, best_rank = -1, max_rank
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1])
            if rank is not None and rank < best_rank:
                best, best_rank = i, rank
        if best < 0:
            break
        parts[best : best + 2] = [parts[best] + parts[best + 1]]
    return parts

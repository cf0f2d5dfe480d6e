"""A `Tokenizer` to and from a `tiktoken.Encoding`, and the split pattern tiktoken needs to cut text
as a tokenizer does.

tiktoken keeps only what its pattern matches, while a tokenizer here (as Hugging Face's Split)
keeps the text between matches as pieces too: a user's regex is given to tiktoken `isolated`, in
the spelling Oniguruma reads, and a tiktoken pattern that leaves text unmatched is refused when
converting from tiktoken. What tiktoken has no place for, the special tokens' roles and
`model_max_length`, ride along as attributes of the Encoding.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from typing import TYPE_CHECKING

import regex

from bpe.errors import ExportError, SettingsError
from bpe.formats.rank_order import ids_order_problem
from bpe.formats.record import TokenizerRecord
from bpe.formats.tiktoken_ranks import from_ranks
from bpe.pretokenize import (
    NAMED_PATTERNS,
    WHITESPACE_WORD,
    Pretokenizer,
    ReadOtherwise,
    can_match_empty,
    isolated,
    oniguruma_regex,
)
from bpe.tokenizer.vocabulary import Vocabulary

if TYPE_CHECKING:
    import tiktoken

# Text with a character of every common kind, to find what a tiktoken pattern leaves unmatched.
COVERAGE_PROBE = string.printable + "é ÀßДж中🙂\u00a0\u3000\u0301¹\u200d"


def to_tiktoken(
    vocabulary: Vocabulary,
    pretokenizer: Pretokenizer,
    special_token_roles: Mapping[str, str],
    model_max_length: int | None,
    name: str,
) -> tiktoken.Encoding:
    """`Tokenizer.to_tiktoken`: ranks are the token ids; ExportError where tiktoken cannot hold them."""
    import tiktoken

    if vocabulary.rank_problem is not None:
        raise ExportError(f"tiktoken cannot encode as this tokenizer does: {vocabulary.rank_problem}")
    problem = ids_order_problem(vocabulary.to_ids[256 : len(vocabulary.tokens)].tolist())
    if problem is not None:
        raise ExportError(f"tiktoken cannot encode as this tokenizer does: {problem}")
    ranks = {vocabulary.tokens[i]: token_id for i, token_id in vocabulary.given_ids().items()}
    pat_str = tiktoken_pattern(pretokenizer)
    try:
        encoding = tiktoken.Encoding(
            name=name,
            pat_str=pat_str,
            mergeable_ranks=ranks,
            special_tokens=dict(vocabulary.special_tokens),
        )
    except Exception as exc:  # tiktoken's regex engine refuses the pattern
        raise ExportError(f"tiktoken cannot take this tokenizer's split pattern: {exc}") from None
    encoding.special_token_roles = dict(special_token_roles)
    encoding.model_max_length = model_max_length
    encoding.split_pattern = pretokenizer.pattern_setting
    return encoding


def tiktoken_record(
    encoding: tiktoken.Encoding, special_token_roles: Mapping[str, str] | None, model_max_length: int | None
) -> tuple[TokenizerRecord, Mapping[str, str] | None, int | None]:
    """What `Tokenizer.from_tiktoken` builds on: the record of the Encoding's ranks, split pattern
    and special tokens (the merges recovered from the ranks), and the roles and `model_max_length`,
    the arguments' else those `to_tiktoken` attached (unchecked: the caller's)."""
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
    return record, special_token_roles, model_max_length


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
    try:
        return isolated(oniguruma_regex(pretokenizer.regex, tiktoken=True))
    except ReadOtherwise as exc:
        raise ExportError(
            f"tiktoken cannot split as this tokenizer does: its pattern uses {exc}, which tiktoken's regex engine "
            "reads as ASCII only"
        ) from None


def _spelled_for_tiktoken(pattern: str) -> str | None:
    """`tiktoken_pattern` of a pattern, or None where there is none."""
    try:
        return tiktoken_pattern(Pretokenizer(pattern))
    except (SettingsError, ExportError):
        return None


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

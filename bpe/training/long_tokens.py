"""Tokens far longer than any real tokenizer's: the one-line warning after a run that made them.

Text with no break for the pattern to cut at (a file with no spaces, a long run of one character)
is one huge piece, and BPE merges it into tokens of thousands or millions of bytes: 4 MB of spaces
make tokens of 2, 4, 8, ... 2^21 spaces, a 240 MB tokenizer that encodes nothing else better.
`max_token_length` (`--max-token-length`) caps them; the warning says so.

>>> found = long_tokens([b"the", b" " * 4096, b"a" * 2000])
>>> found.message("--max-token-length")  # doctest: +ELLIPSIS
'2 tokens are longer than 1,024 bytes, the longest 4,096 bytes...; --max-token-length caps...'
>>> long_tokens([b"the", b" " * 1024]) is None
True
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# GPT-2's, cl100k's and o200k's longest tokens are 128 bytes: 8 times that is past any tokenizer
# trained on text with word breaks, and short of a token that only a piece with none can make.
LONG_TOKEN_BYTES = 1024


class LongTokensWarning(UserWarning):
    """Training made tokens longer than `LONG_TOKEN_BYTES` (see `long_tokens`)."""


@dataclass(frozen=True)
class LongTokens:
    """The tokens longer than `LONG_TOKEN_BYTES` a run made: how many, the longest, and the bytes
    of all the run's tokens (what the tokenizer's files grow with)."""

    count: int
    longest: int
    total_bytes: int

    def message(self, setting: str) -> str:
        """The warning, naming the setting that caps token length as the caller spells it
        (`--max-token-length`, `max_token_length`)."""
        return (
            f"{self.count:,} token{'s are' if self.count > 1 else ' is'} longer than {LONG_TOKEN_BYTES:,} bytes, "
            f"the longest {self.longest:,} bytes ({_size(self.total_bytes)} of tokens in all): the text has long "
            f"pieces with no break for the pattern (a run of one character, text without spaces?); {setting} "
            "caps the length of a token"
        )


def _size(n: int) -> str:
    """1234567 -> '1.2 MB'."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n} bytes"


def long_tokens(tokens: Iterable[bytes]) -> LongTokens | None:
    """The tokens longer than `LONG_TOKEN_BYTES` among `tokens` (those a run made), or None."""
    count = longest = total = 0
    for token in tokens:
        total += len(token)
        if len(token) > LONG_TOKEN_BYTES:
            count += 1
            longest = max(longest, len(token))
    return LongTokens(count, longest, total) if count else None

"""What every reader returns and every writer takes: a tokenizer as plain data."""

from __future__ import annotations

from dataclasses import dataclass

from bpe.manifest import Manifest


@dataclass
class TokenizerRecord:
    """What a tokenizer file holds, as `Tokenizer(merges, pattern, special_tokens, ids=...,
    special_token_roles=..., model_max_length=..., manifest=...)` takes it. With `source`, a
    setting the file gives that the tokenizer refuses is an ExportError naming `source`."""

    merges: list[tuple[int, int]]
    pattern: str  # a name of `bpe.pretokenize.NAMED_PATTERNS`, or a regex
    special_tokens: dict[str, int]
    # our id -> the file's id, where the file numbers tokens otherwise; a byte valid UTF-8 never
    # holds may have none (`bpe.formats.spelling.NEVER_IN_TEXT`: the file lacks it)
    ids: dict[int, int] | None = None
    special_token_roles: dict[str, str] | None = None
    model_max_length: int | None = None
    source: str | None = None
    manifest: Manifest | None = None  # how it was trained (a saved directory's manifest.json)

    def id_list(self) -> list[int | None] | None:
        """The file's id of each token by our id (`ids` as a list, None for a byte without one), or
        None where ids are ours."""
        return None if self.ids is None else [self.ids.get(i) for i in range(256 + len(self.merges))]

    def vocab(self) -> list[bytes]:
        """Token bytes by our id: the 256 bytes, then one token per merge.

        >>> TokenizerRecord([(104, 105)], "gpt2", {}).vocab()[256]
        b'hi'
        """
        vocab = [bytes([b]) for b in range(256)]
        for a, b in self.merges:
            vocab.append(vocab[a] + vocab[b])
        return vocab

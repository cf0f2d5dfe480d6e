"""What learning merges hands back, on every path: the compiled engine's (`bpe.engine.merge`,
parity-aware merges, the Dask driver's) and the pure-Python one for small corpora
(`bpe.training.small_corpus`). Only numpy: reading a result loads no kernel."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class MergeResult:
    """Merges in order as an (n, 2) array of token ids (merge i makes token 256 + i, or the i-th
    id after a base tokenizer's merges)."""

    merges: np.ndarray
    counts: np.ndarray  # how often each merged pair occurred when it was chosen
    rounds: int
    stop_reason: str  # "vocab_size", "min_frequency", "max_token_length", "superword_rules" or "no_pairs"
    seconds: float
    tokens_after: int = 0  # pre-token occurrences encode to this many tokens with all merges
    languages: np.ndarray | None = None  # parity-aware merges: the language each served (-1: global); else None

    def __len__(self) -> int:
        return len(self.merges)

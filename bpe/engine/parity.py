"""Parity-aware merges (Foroutan et al. 2025): each merge serves one language, the one whose
dev set is currently the longest in tokens (or, with ratio targets, the one whose training
compression divided by its ratio is the lowest), and that language's most frequent pair is
merged in every language. Counts are kept per language: one pair queue per language, fed by
the deltas of that language's word tables (slices on threads, buckets on Dask workers).

Languages are always held in the order of their codes (`arb` before `eng`); a tie between
languages goes to the first. A tie between pairs follows the run's `tie_break`.
"""

from __future__ import annotations

from dataclasses import dataclass

VARIANTS = ("base", "window")


@dataclass(frozen=True)
class ParityRule:
    """How a merge's language is chosen, as Hugging Face's `ParityBpeTrainer` names it.

    `variant` "base" serves the longest language; "window" skips a language chosen more than
    `alpha / languages` of the last `window` merges. `global_merges` ordinary merges (counts
    summed over languages) come first. `ratio` (one per language, in language order) replaces
    the dev set: the language with the lowest training compression divided by its ratio is served.
    """

    variant: str = "base"
    global_merges: int = 0
    window: int = 100
    alpha: float = 2.0
    ratio: tuple[float, ...] | None = None

"""What an engine hands back from training: one typed record for every engine.

`bpe.training.trainer.build_manifest` turns it into the tokenizer's `bpe.manifest.Manifest`; the pipeline adds
what it knows (the version, the evaluation) to that manifest. Merges themselves are
`bpe.engine.merge.MergeResult`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from bpe.engine.merge_result import MergeResult
from bpe.training.counting import CountStats

# Why training stopped short (`MergeResult.stop_reason`): no setting asked it to, so a warning says so.
STOPPED_SHORT = ("no_pairs", "max_token_length", "superword_rules")


def why_stopped(reason: str, settings: object, name: Callable[[str], str] = str) -> str:
    """Why the merges stopped, in words, for every surface that says it (the command's summary and
    warning, train()'s warning, the pipeline's refusal to publish no merges). `settings` holds the
    run's superword rules (`max_words`, `colon_space`); `name` spells a setting as the caller does.

    >>> why_stopped("max_token_length", None, lambda s: "--" + s.replace("_", "-"))
    'only pairs too long for --max-token-length were left'
    """
    if reason == "vocab_size":
        return "vocabulary size reached"
    if reason == "min_frequency":
        return f"no pair left occurs {name('min_frequency')} times"
    if reason == "no_pairs":
        return "pairs ran out"
    if reason == "max_token_length":
        return f"only pairs too long for {name('max_token_length')} were left"
    if reason == "superword_rules":
        max_words = getattr(settings, "max_words", None)
        rules = [] if max_words is None else [f"at most {max_words} word(s) by {name('max_words')}"]
        rules += [] if getattr(settings, "colon_space", False) else [f'no ": " without {name("colon_space")}']
        return f"only pairs that the superword rules refuse ({', '.join(rules)}) were left"
    return reason


@dataclass
class TrainingRun:
    """Counts seen, merges learned, and how the engine ran.

    `fingerprints` lists every input file with size and SHA-256 (None for in-memory texts);
    `seconds` holds the time per phase (count, merge, ...); `engine` describes the engine and its
    cluster for the manifest (name, workers, rounds, ...). A superword run (two runs of the engine)
    holds its final stage's counts and both stages in `stages`."""

    stats: CountStats
    unique_words: int
    merges: MergeResult
    fingerprints: list[dict] | None
    seconds: dict[str, float] = field(default_factory=dict)
    engine: dict = field(default_factory=dict)
    stages: list[dict] | None = None  # a superword run's two stages (bpe.training.superwords.stage_record)
    languages: list | None = None  # a multilingual run's bpe.training.plan.LanguageStats, in code order

"""What an engine hands back from training: one typed record for every engine.

`bpe.training.build_manifest` turns it into the tokenizer's `bpe.manifest.Manifest`; the pipeline adds
what it knows (the version, the evaluation) to that manifest. Merges themselves are
`bpe.engine.merge.MergeResult`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bpe.counting import CountStats
from bpe.engine.merge_result import MergeResult


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
    stages: list[dict] | None = None  # a superword run's two stages (bpe.superwords.stage_record)
    languages: list | None = None  # a multilingual run's bpe.languages.LanguageStats, in code order

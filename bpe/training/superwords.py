"""Superword tokenizers (SuperBPE, Liu et al. 2025): ordinary BPE up to a transition, then merges
across words.

Stage 1 learns subwords with the run's pattern until the vocabulary reaches `transition` tokens.
Stage 2 splits the same text with a looser pattern (by default the paper's `superbpe`, which keeps
letters and single spaces together, so "by the way" is one piece), replays stage 1's merges on
those pieces, and goes on to the vocabulary size; its merges may cross spaces, within the rules
of `SuperwordRules` (at most `max_words` words, no ": "). Each stage is one ordinary run of an
engine, so both engines give the same merges, and stage 2 is exactly "train from the stage-1
tokenizer with the superword pattern". The tokenizer encodes with stage 2's pattern and all the
merges.

>>> from bpe.training.settings import Settings
>>> settings = Settings(vocab_size=1000, superwords=True, transition=600)
>>> settings.subword_stage().n_merges(), settings.superword_stage(344).n_merges()
(344, 400)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from bpe.engine.merge_result import MergeResult
from bpe.progress import ProgressFn
from bpe.training.results import TrainingRun
from bpe.training.settings import Settings

if TYPE_CHECKING:  # loaded by a run that replays merges
    from bpe.engine.replay import BaseMerges

# A stage's phases, as the progress bars and log lines name them.
STAGE_PHASES = {"subwords": "", "superwords": "superword "}

RunStage = Callable[[Settings, "BaseMerges | None"], TrainingRun]


def train_in_stages(settings: Settings, run_stage: RunStage, base: BaseMerges | None = None) -> TrainingRun:
    """One run of the engine (`run_stage(settings, base)`), or, for a superword run, two: stage 1
    to the transition, then stage 2 after the base's and stage 1's merges. The runs are joined
    into one, the final stage's counts at its head and both stages in `stages`."""
    if not settings.superwords:
        return run_stage(settings, base)
    subwords = settings.subword_stage()
    if subwords.n_merges() == 0:  # the transition is the base's size: superwords on top of it
        second = run_stage(settings.superword_stage(len(base) if base is not None else 0), base)
        return joined(None, second)
    first = run_stage(subwords, base)
    before = first.merges.merges if base is None else np.concatenate([base.merges, first.merges.merges])
    from bpe.engine.replay import BaseMerges

    second = run_stage(settings.superword_stage(len(before)), BaseMerges(before))
    return joined(first, second)


def joined(first: TrainingRun | None, second: TrainingRun) -> TrainingRun:
    """The two stages' runs as one: merges in order, seconds summed per phase, the second stage's
    counts (the tokenizer splits text as it does), and what each stage saw in `stages`. No first
    stage (None) when the transition is where training starts."""
    if first is None:
        skipped = {"stage": "subwords", "merges": 0, "unique_words": 0, "pretokens": 0, "stop_reason": "transition"}
        return replace(second, stages=[{**skipped, "seconds": {}}, stage_record("superwords", second)])
    a, b = first.merges, second.merges
    merges = MergeResult(
        merges=np.concatenate([a.merges, b.merges]),
        counts=np.concatenate([a.counts, b.counts]),
        rounds=a.rounds + b.rounds,
        stop_reason=b.stop_reason,
        seconds=a.seconds + b.seconds,
        tokens_after=b.tokens_after,
    )
    seconds = dict(first.seconds)
    for phase, value in second.seconds.items():
        seconds[phase] = seconds.get(phase, 0.0) + value
    engine = {**second.engine}
    if "rounds" in engine and "rounds" in first.engine:
        engine["rounds"] = first.engine["rounds"] + second.engine["rounds"]
    return TrainingRun(
        stats=second.stats,
        unique_words=second.unique_words,
        merges=merges,
        fingerprints=second.fingerprints,
        seconds=seconds,
        engine=engine,
        stages=[stage_record("subwords", first), stage_record("superwords", second)],
    )


def stage_record(stage: str, run: TrainingRun) -> dict:
    """What the manifest says of one stage: its merges, the pieces it counted, why it stopped."""
    return {
        "stage": stage,
        "merges": len(run.merges.merges),
        "unique_words": run.unique_words,
        "pretokens": run.stats.pretokens,
        "stop_reason": run.merges.stop_reason,
        "seconds": {phase: round(value, 3) for phase, value in run.seconds.items()},
    }


def stage_progress(progress: ProgressFn | None, settings: Settings) -> ProgressFn | None:
    """`progress` with the superword stage's phases named apart ("superword count", "superword
    merge"), so that each stage has bars and log lines of its own."""
    prefix = STAGE_PHASES.get(settings.stage, "")
    if progress is None or not prefix:
        return progress

    def report(phase: str, done: int, total: int | None) -> None:
        progress(prefix + phase, done, total)

    return report

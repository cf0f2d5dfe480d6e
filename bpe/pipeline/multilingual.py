"""A multilingual configuration in the pipeline (`languages:`, `mix:`, `parity:`): each language's
shards found and counted apart (a shard's counts are cached by its content, so a new shard of one
language is the only one counted on the next run), what was counted of each language, and the
mixture multipliers that weigh each shard's counts as its word buckets are built on the workers.

Parity-aware merges are chosen one at a time against the dev set: the flow learns them in its own
process (`bpe.training.plan.learn_parity_merges_of`, as the local engine learns them) over each
language's counts, read from the count cache.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from bpe.distributed.count_tasks import ShardCount, read_counts
from bpe.distributed.driver import DistributedMerge
from bpe.engine.compilation import CompileWatch
from bpe.engine.count import WordCounts
from bpe.engine.replay import BaseMerges
from bpe.engine.resident import release_memory
from bpe.languages.mixture import check_weighted_bytes, weighted
from bpe.pipeline.config import TokenizerConfig
from bpe.progress import ProgressFn
from bpe.training.counting import CountStats
from bpe.training.plan import (
    LanguagePlan,
    ParitySettings,
    learn_parity_merges_of,
    make_plan,
)
from bpe.training.settings import Settings
from bpe.training.trainer import merge_threads_for


def language_plan(cfg: TokenizerConfig, settings: Settings | None) -> LanguagePlan | None:
    """The plan of a configuration with `languages:` (None without): its mixture, its parity rule
    and its dev set, read as `settings` split text (None: checked, as `bpe deploy` checks it,
    without reading the dev set). Errors name the file and key, the variable or the parameter."""
    from bpe.errors import SettingsError

    inputs = cfg.language_inputs()
    if inputs is None:
        return None
    pretokenizer = settings.pretokenizer if settings is not None else None
    try:
        given = cfg.language_settings()
        parity = ParitySettings.of(given)
        return make_plan(list(inputs), pretokenizer, cfg.text_column, cfg.superwords is not None, given["mix"], parity)
    except SettingsError as exc:
        raise cfg.located(exc) from None


def by_language(counted: Sequence[ShardCount], codes: Sequence[str]) -> list[list[ShardCount]]:
    """The counted shards of each language, in the order of `codes` (each shard knows its language)."""
    return [[c for c in counted if c.shard.get("language") == code] for code in codes]


def count_languages(plan: LanguagePlan, counted: Sequence[ShardCount]) -> tuple[int, ...]:
    """Fill `plan.stats` from the shards' counts (unique words per language are not known until
    the languages' words are summed: None) and return each language's mixture multiplier."""
    shards = by_language(counted, plan.codes)
    stats = [CountStats.summed(c.stats for c in language) for language in shards]
    paths = [[c.shard["path"] for c in language] for language in shards]
    multipliers = plan.counted(stats, [None] * len(plan.codes), paths)
    if plan.mix is not None:
        check_weighted_bytes([s.bytes for s in plan.stats], multipliers)
    return multipliers


def shard_multipliers(plan: LanguagePlan, counted: Sequence[ShardCount], multipliers: Sequence[int]) -> list[int]:
    """Each counted shard's multiplier: its language's."""
    of = dict(zip(plan.codes, multipliers, strict=True))
    return [of[c.shard["language"]] for c in counted]


def parity_merges(
    plan: LanguagePlan,
    counted: Sequence[ShardCount],
    multipliers: Sequence[int],
    settings: Settings,
    base: BaseMerges | None = None,
    progress: ProgressFn | None = None,
) -> DistributedMerge:
    """Parity-aware merges in this process over each language's counts, summed from its shards'
    cached counts (each file read only if it holds the bytes checked) and weighted by `multipliers`;
    fills each language's unique words."""

    started = time.perf_counter()
    per_language = []
    for stats, shards in zip(plan.stats, by_language(counted, plan.codes), strict=True):
        counts = WordCounts.combine([read_counts(c.counts, c.expected("counts")) for c in shards])
        stats.unique_words = len(counts)
        per_language.append(counts)
    per_language = weighted(per_language, multipliers)
    release_memory()
    words = sum(len(c) for c in per_language)
    threads = merge_threads_for(words)
    built = time.perf_counter() - started
    with CompileWatch() as compiles:
        done = [0]

        def report(n: int) -> None:
            done[0] += n
            if progress is not None:
                progress("merge", done[0], settings.n_merges())

        t0 = time.perf_counter()
        merged = learn_parity_merges_of(plan, per_language, settings, threads, base, report)
        loop = time.perf_counter() - t0
    engine = {"engine": "local", "threads": threads, "merge_threads": threads, "rounds": merged.rounds}
    return DistributedMerge(merged, engine, words, built, compiles.seconds, max(loop - compiles.seconds, 0.0))

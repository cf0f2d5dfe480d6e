"""A multilingual run's plan from what it was given: the inputs by language (`train(files={...})`,
`bpe train --lang`, `languages:`), the mixture (`mix`), the parity settings and the parity dev set,
checked and read into a `LanguagePlan`, languages in the order of their codes.

Errors name the setting as the caller spelt it (`--parity-ratio`, `parity.ratio`, `parity_ratio`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from bpe.engine.errors import Spelling
from bpe.errors import InputError, SettingsError
from bpe.languages.codes import language_error
from bpe.languages.parity import parity_ratios
from bpe.manifest import LanguagesRecord
from bpe.pretokenize import Pretokenizer
from bpe.schema import PARITY_KEYS, SETTING

if TYPE_CHECKING:  # the compiled engine is loaded only by a run that uses it (`import bpe` stays light)
    from bpe.engine.count import WordCounts
    from bpe.engine.merge_result import MergeResult
    from bpe.engine.parity import ParityRule
    from bpe.engine.replay import BaseMerges
    from bpe.training.counting import CountStats
    from bpe.training.settings import Settings


@dataclass(frozen=True)
class ParitySettings:
    """Parity's settings as one object, as given to `train()`, `bpe train` or a configuration's
    `parity:` (the schema's names, and its defaults for those not given): `parity_rule` turns
    them into the engine's `ParityRule` once the run's languages are known."""

    parity: bool
    parity_dev: str | None
    parity_ratio: str | Mapping | None
    global_merges: int
    parity_variant: str
    parity_window: int
    parity_alpha: float

    @classmethod
    def of(cls, given: Mapping[str, Any]) -> ParitySettings:
        """From settings by name (`PARITY_KEYS`), the schema's default for each one not given.

        >>> ParitySettings.of({"parity_window": 50}).parity_window, ParitySettings.of({}).parity_alpha
        (50, 2.0)
        """
        return cls(**{name: given.get(name, SETTING[name].default) for name in PARITY_KEYS})

    @property
    def on(self) -> bool:
        """Parity is on with `parity`, a dev set or ratios."""
        return self.parity or self.parity_dev is not None or self.parity_ratio is not None


# What only parity-aware merges use: a run without parity must leave these as the schema has them.
PARITY_ONLY = ("global_merges", "parity_variant", "parity_window", "parity_alpha")


def parity_rule(codes: Sequence[str], given: ParitySettings) -> ParityRule | None:
    """The run's parity rule (None: no parity). The other parity settings need parity on; a ratio
    per language, and no more."""
    if not given.on:
        for name in PARITY_ONLY:
            if getattr(given, name) != SETTING[name].default:
                raise SettingsError(partial(_parity_only, name), parameter=name)
        return None
    if given.parity_dev is not None and given.parity_ratio is not None:
        raise language_error("parity_ratio", "replaces the dev set: give a dev set or ratios, not both")
    ratio = None
    if given.parity_ratio is not None:
        ratios = parity_ratios(given.parity_ratio)
        missing = [code for code in codes if code not in ratios]
        extra = [code for code in ratios if code not in codes]
        if extra:
            raise language_error("parity_ratio", f"{extra[0]} is not one of the run's languages ({', '.join(codes)})")
        if missing:
            raise language_error("parity_ratio", f"every language needs a ratio; {', '.join(missing)} has none")
        ratio = tuple(ratios[code] for code in codes)
    from bpe.engine.parity import ParityRule

    return ParityRule(
        variant=given.parity_variant,
        global_merges=given.global_merges,
        window=given.parity_window,
        alpha=given.parity_alpha,
        ratio=ratio,
    )


def _no_superwords(s: Spelling) -> str:
    return f"{s.parity}: parity-aware merges cannot make superwords ({s.on('superwords')})"


def _parity_only(name: str, s: Spelling) -> str:
    return f"{s(name)}: only parity-aware merges use it (turned on by {s.parity}, {s.parity_dev} or {s.parity_ratio})"


def count_dev_set(
    directory: str, codes: Sequence[str], pretokenizer: Pretokenizer, text_column: str = "text"
) -> tuple[list[WordCounts], dict]:
    """The dev set's words, counted as the run's pre-tokenizer splits them, one `WordCounts` per
    language in `codes` order, and its record for the manifest (the directory, the languages it
    holds and those used, and each used file's path, size and SHA-256). The set may hold more
    languages than the run (a multi-parallel set ships hundreds): the run's are used, and each
    must be there. Read by `bpe.evaluation.dev_set`, as `bpe eval --dev` reads it."""
    from bpe import storage
    from bpe.evaluation.dev_set import file_record, language_files, read_files
    from bpe.training.counting import WordCounter

    available = language_files(directory, "parity_dev")
    missing = [code for code in codes if code not in available]
    if missing:
        raise language_error(
            "parity_dev",
            f"{storage.join(directory, missing[0] + '.txt')}: no dev text for {missing[0]} (.txt or .parquet; "
            f"the dev set has {', '.join(available)})",
        )
    found = read_files({code: available[code] for code in codes}, directory, text_column)
    counts, files = [], {}
    for code, path in found.sources.items():
        counter = WordCounter(pretokenizer)
        for batch in found.batches(code):
            counter.add_texts(batch)
        if counter.stats.pretokens == 0:
            raise InputError(f"{path}: the dev text of {code} holds no text")
        counts.append(counter.result())
        files[code] = {**file_record(path), "sentences": found.sentences, "bytes": found.bytes[code]}
    record = {"path": str(directory), "files": files, "languages": list(codes), "available": list(available)}
    return counts, record


def make_plan(
    codes: Sequence[str],
    pretokenizer: Pretokenizer | None,
    text_column: str,
    superwords: bool,
    mix: object | None,
    parity: ParitySettings,
) -> LanguagePlan:
    """The plan of a run on `codes` (sorted): its mixture, its parity rule (checked as the engine
    checks it) and dev set read (as `pretokenizer` splits text; None: the dev set is not read, the
    settings only are checked). Parity cannot make superwords (`superwords`: a superword run)."""
    from bpe.engine.parity import check_rule
    from bpe.languages.mixture import Mix

    mixture = Mix.of(mix) if mix is not None else None
    if mixture is not None:
        mixture.check_codes(codes)
    rule = parity_rule(codes, parity)
    if rule is not None and superwords:
        raise SettingsError(_no_superwords, parameter="parity")
    if rule is not None:
        check_rule(rule, len(codes))  # before any text is read, not once counted
    plan = LanguagePlan(codes=tuple(codes), mix=mixture, parity=rule)
    if rule is not None and parity.parity_dev is not None and pretokenizer is not None:
        plan.dev, plan.dev_record = count_dev_set(parity.parity_dev, codes, pretokenizer, text_column)
    return plan


def dev_fingerprints(plan: LanguagePlan | None) -> list[dict]:
    """The parity dev set's files as the data's fingerprint counts them (the merges depend on
    them): each with its size, SHA-256 and `<code> dev` as its language; none without a dev set."""
    files = (plan.dev_record or {}).get("files", {}) if plan is not None else {}
    return [{"sha256": f["sha256"], "size": f["size"], "language": f"{code} dev"} for code, f in files.items()]


def refuse_without_languages(given: Mapping[str, object]) -> None:
    """A mixture or parity needs text by language: refuse either on one text, naming the setting
    and how the caller's surface gives text by language."""
    for name, value in given.items():
        if value != SETTING[name].default:
            raise SettingsError(partial(_needs_text_by_language, name), parameter=name)


def _needs_text_by_language(name: str, spelling: Spelling) -> str:
    return f"{spelling(name)}: needs text by language ({spelling.by_language()})"  # a module's function: it pickles


def check_counted(plan: LanguagePlan, paths: Sequence[Sequence[str]] | None = None) -> None:
    """Refuse (InputError, naming the language and its inputs) a language in which counting found
    no word: a language with no text cannot be weighed or served. When the hold-out took what it
    had, the line says so and names `holdout_fraction`."""
    for i, stats in enumerate(plan.stats):
        if stats.words == 0:
            named = "its texts" if paths is None else ", ".join(paths[i][:3]) + (" ..." if len(paths[i]) > 3 else "")
            why = f"{stats.documents:,} document(s) without a pre-token"
            if stats.held_out:
                why = (
                    f"holdout_fraction held out {stats.held_out:,} of its {stats.held_out + stats.documents:,} "
                    "document(s) for evaluation; give it more documents or a lower holdout_fraction"
                )
            raise InputError(f"{stats.code}: no text to train on in {named} ({why})")


def languages_record(plan: LanguagePlan, served: Sequence[int] | None = None) -> LanguagesRecord:
    """The manifest's `languages` section of a run with `plan` (its stats filled by the engine):
    `served`, the language index of each merge of a parity-aware run (-1: a global merge)."""
    import numpy as np

    total = sum(s.bytes for s in plan.stats) or 1
    weighted_total = sum(s.bytes * s.multiplier for s in plan.stats) or 1
    by_count = (
        np.bincount(np.asarray(served, np.int64) + 1, minlength=len(plan.codes) + 1) if served is not None else None
    )
    by_language = {}
    for i, stats in enumerate(plan.stats):
        entry = {
            "documents": stats.documents,
            "bytes": stats.bytes,
            "words": stats.words,
            "unique_words": stats.unique_words,
            "share": round(stats.bytes / total, 6),
            "multiplier": stats.multiplier,
            "weighted_share": round(stats.bytes * stats.multiplier / weighted_total, 6),
        }
        if by_count is not None:
            entry["merges"] = int(by_count[i + 1])
        by_language[stats.code] = entry
    parity = None
    if plan.parity is not None:
        rule = plan.parity
        parity = {
            "variant": rule.variant,
            "global_merges": rule.global_merges,
            "window": rule.window,
            "alpha": rule.alpha,
            "ratio": dict(zip(plan.codes, rule.ratio, strict=True)) if rule.ratio is not None else None,
            "dev": plan.dev_record,
            "lengths": "dev" if plan.dev is not None else "ratio" if rule.ratio is not None else "training",
        }
        if by_count is not None:
            parity["global_merges_made"] = int(by_count[0])
    return LanguagesRecord(
        codes=list(plan.codes),
        by_language=by_language,
        mix=plan.mix.record() if plan.mix is not None else None,
        parity=parity,
    )


@dataclass
class LanguageStats:
    """What was counted of one language: documents, bytes of text, pre-tokens (words) and unique
    words, the integer its word counts were multiplied by (1 without a mixture), and the documents
    held out for evaluation (the pipeline's `holdout_fraction`), which are not counted."""

    code: str
    documents: int = 0
    bytes: int = 0
    words: int = 0
    unique_words: int | None = 0  # None: not known apart (the pipeline sums the languages' words on the workers)
    multiplier: int = 1
    held_out: int = 0


@dataclass
class LanguagePlan:
    """A multilingual run as the engines see it. `codes` sorted; `mix` (a `bpe.languages.mixture.Mix`, or None)
    turns each language's bytes into integer count multipliers after counting; `parity` (or None)
    chooses merges for parity; `dev` holds the parity dev set's counted pieces, one `WordCounts` per
    language in `codes` order (None: ratio targets, or training lengths)."""

    codes: tuple[str, ...]
    mix: object | None = None  # bpe.languages.mixture.Mix
    parity: ParityRule | None = None
    dev: Sequence[WordCounts] | None = None
    stats: list[LanguageStats] = field(default_factory=list)  # filled by the engine that counted
    dev_record: dict | None = None  # the dev set's directory and files (path, size, sha256), for the manifest

    def __post_init__(self) -> None:
        if list(self.codes) != sorted(self.codes):
            raise ValueError(f"language codes must be sorted, got {list(self.codes)}")

    def counted(
        self,
        stats: Sequence[CountStats],
        unique_words: Sequence[int | None],
        paths: Sequence[Sequence[str]] | None = None,
    ) -> tuple[int, ...]:
        """Record what counting found of each language (`stats` and `unique_words` in the order of
        the codes; None: not known apart), refuse a language without a word (naming its input
        `paths`), and weigh them: each language's mixture multiplier (1 without a mixture), which
        its record keeps too. Every engine that counts languages apart ends here."""
        self.stats = [
            LanguageStats(code, s.documents, s.bytes, s.pretokens, unique, held_out=s.held_out_rows)
            for code, s, unique in zip(self.codes, stats, unique_words, strict=True)
        ]
        check_counted(self, paths)
        if self.mix is None:
            return (1,) * len(self.codes)
        multipliers = tuple(self.mix.multipliers([s.bytes for s in self.stats], self.codes))
        for language, multiplier in zip(self.stats, multipliers, strict=True):
            language.multiplier = multiplier
        return multipliers


def learn_parity_merges_of(
    plan: LanguagePlan,
    counts: Sequence[WordCounts],
    settings: Settings,
    threads: int,
    base: BaseMerges | None,
    progress: Callable[[int], None] | None,
) -> MergeResult:
    """A parity-aware run's merges in this process, on `threads` threads: the languages' `counts`
    (weighted by the mixture, in the order of the codes) by the plan's parity rule and dev set and
    the settings' merge rules. The local engine and the pipeline (which sums each language's
    cached counts first) both learn them here."""
    from bpe.engine.parity import learn_parity_merges

    rule, rules = plan.parity, settings.merge_rules
    n = settings.n_merges()
    return learn_parity_merges(counts, n, rule, rules, dev=plan.dev, threads=threads, base=base, progress=progress)

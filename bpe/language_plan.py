"""A multilingual run's plan from what it was given: the inputs by language (`train(files={...})`,
`bpe train --lang`, `languages:`), the mixture (`mix`), the parity settings and the parity dev set,
checked and read into a `bpe.languages.LanguagePlan`, languages in the order of their codes.

Errors name the setting as the caller spelt it (`--parity-ratio`, `parity.ratio`, `parity_ratio`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from bpe.engine.count import WordCounts
from bpe.engine.errors import Spelling
from bpe.engine.parity import ParityRule, check_rule
from bpe.errors import InputError, SettingsError
from bpe.languages import LanguagePlan, check_code, language_error, parity_ratios
from bpe.manifest import LanguagesRecord
from bpe.pretokenize import Pretokenizer
from bpe.schema import SETTING

# The parity settings' defaults, which a run without parity must leave as they are.
PARITY_DEFAULTS = {name: SETTING[name].default for name in ("global_merges", "parity_variant", "parity_window")}
PARITY_DEFAULTS["parity_alpha"] = SETTING["parity_alpha"].default


def by_language(value: Mapping, name: str) -> dict[str, Any]:
    """A mapping of language code -> inputs (paths, or documents), its codes checked, sorted by code."""
    if not value:
        raise language_error(name, "expected at least one language (a mapping of language code -> inputs)")
    for code in value:
        check_code(code, name)
    return {code: value[code] for code in sorted(value)}


def parse_languages(given: Sequence[str], name: str = "languages") -> dict[str, list[str]]:
    """`--lang eng=data/en/ --lang hin=data/hi/*.parquet` as {code: [input]}, sorted by code: each
    `code=input`, each language once."""
    found: dict[str, list[str]] = {}
    for item in given:
        code, equals, where = item.partition("=")
        if not equals or not where:
            raise language_error(name, f"expected CODE=INPUT (eng=data/en/), got {item!r}")
        code = check_code(code, name)
        if code in found:
            raise language_error(name, f"{code} is given twice (give it one directory or glob)")
        found[code] = [where]
    return {code: found[code] for code in sorted(found)}


def languages_in(directory: str, name: str = "lang_dir") -> dict[str, list[str]]:
    """The text by language in one directory (a path or URL), as {code: [input]} sorted by code:
    each entry named by a language code, a file `<code>.<ext>` (eng.txt, hin.parquet) or a folder
    `<code>/`; other names (README.md, hidden files) are skipped, as a dev set's directory's are.
    Errors name the setting `name`, spelt as the caller spells it."""
    from bpe import storage
    from bpe.languages import language_of

    if storage.is_remote(directory):
        with storage.naming_url(directory):
            names = storage.listing(directory)
    else:
        local = storage.local_path(directory)
        if not os.path.isdir(local):
            what = "not a directory" if os.path.exists(local) else "no such directory"
            raise language_error(
                name, f"{directory}: {what} (expected a directory holding a file or folder per language)"
            )
        names = sorted(os.listdir(local))
    found: dict[str, str] = {}
    for entry in names:
        code = language_of(entry)
        if code is None:
            continue
        if code in found:
            raise language_error(
                name, f"{directory}: both {found[code]} and {entry} are {code}'s: keep one entry per language"
            )
        found[code] = entry
    if not found:
        raise language_error(
            name, f"{directory}: holds no file or folder named by a language code (eng.txt, hin.parquet, tel/)"
        )
    return {code: [storage.join(directory, entry)] for code, entry in sorted(found.items())}


def parity_rule(
    codes: Sequence[str],
    parity: bool = False,
    parity_dev: str | None = None,
    parity_ratio: str | Mapping | None = None,
    global_merges: int = 0,
    parity_variant: str = "base",
    parity_window: int = 100,
    parity_alpha: float = 2.0,
) -> ParityRule | None:
    """The run's parity rule (None: no parity). Parity is on with `parity`, a dev set or ratios;
    the other parity settings need it. A ratio per language, and no more."""
    on = parity or parity_dev is not None or parity_ratio is not None
    given = {"global_merges": global_merges, "parity_variant": parity_variant, "parity_window": parity_window}
    given["parity_alpha"] = parity_alpha
    if not on:
        for name, value in given.items():
            if value != PARITY_DEFAULTS[name]:
                raise SettingsError(partial(_parity_only, name), parameter=name)
        return None
    if parity_dev is not None and parity_ratio is not None:
        raise language_error("parity_ratio", "replaces the dev set: give a dev set or ratios, not both")
    ratio = None
    if parity_ratio is not None:
        ratios = parity_ratios(parity_ratio)
        missing = [code for code in codes if code not in ratios]
        extra = [code for code in ratios if code not in codes]
        if extra:
            raise language_error("parity_ratio", f"{extra[0]} is not one of the run's languages ({', '.join(codes)})")
        if missing:
            raise language_error("parity_ratio", f"every language needs a ratio; {', '.join(missing)} has none")
        ratio = tuple(ratios[code] for code in codes)
    return ParityRule(
        variant=parity_variant, global_merges=global_merges, window=parity_window, alpha=parity_alpha, ratio=ratio
    )


def _no_superwords(s: Spelling) -> str:
    return f"{s.parity}: parity-aware merges cannot make superwords ({s.on('superwords')})"


def _parity_only(name: str, s: Spelling) -> str:
    return f"{s(name)}: only parity-aware merges use it (turned on by {s.parity}, {s.parity_dev} or {s.parity_ratio})"


def read_dev_set(
    directory: str, codes: Sequence[str], pretokenizer: Pretokenizer, text_column: str = "text"
) -> tuple[list[WordCounts], dict]:
    """The dev set's words, counted as the run's pre-tokenizer splits them, one `WordCounts` per
    language in `codes` order, and its record for the manifest (the directory, the languages it
    holds and those used, and each used file's path, size and SHA-256). The set may hold more
    languages than the run (a multi-parallel set ships hundreds): the run's are used, and each
    must be there. Read by `bpe.dev_set`, as `bpe eval --dev` reads it."""
    from bpe import storage
    from bpe.counting import WordCounter
    from bpe.dev_set import file_record, language_files, read_files

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
    text_column: str = "text",
    superwords: bool = False,
    mix: object | None = None,
    parity: bool = False,
    parity_dev: str | None = None,
    parity_ratio: str | Mapping | None = None,
    global_merges: int = 0,
    parity_variant: str = "base",
    parity_window: int = 100,
    parity_alpha: float = 2.0,
) -> LanguagePlan:
    """The plan of a run on `codes` (sorted): its mixture, its parity rule (checked as the engine
    checks it) and dev set read (as `pretokenizer` splits text; None: the dev set is not read, the
    settings only are checked). Parity cannot make superwords (`superwords`: a superword run)."""
    from bpe.mixture import Mix

    mixture = Mix.of(mix) if mix is not None else None
    if mixture is not None:
        mixture.check_codes(codes)
    rule = parity_rule(
        codes, parity, parity_dev, parity_ratio, global_merges, parity_variant, parity_window, parity_alpha
    )
    if rule is not None and superwords:
        raise SettingsError(_no_superwords, parameter="parity")
    if rule is not None:
        check_rule(rule, len(codes))  # before any text is read, not once counted
    plan = LanguagePlan(codes=tuple(codes), mix=mixture, parity=rule)
    if rule is not None and parity_dev is not None and pretokenizer is not None:
        plan.dev, plan.dev_record = read_dev_set(parity_dev, codes, pretokenizer, text_column)
    return plan


def dev_fingerprints(plan: LanguagePlan | None) -> list[dict]:
    """The parity dev set's files as the data's fingerprint counts them (the merges depend on
    them): each with its size, SHA-256 and `<code> dev` as its language; none without a dev set."""
    files = (plan.dev_record or {}).get("files", {}) if plan is not None else {}
    return [{"sha256": f["sha256"], "size": f["size"], "language": f"{code} dev"} for code, f in files.items()]


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

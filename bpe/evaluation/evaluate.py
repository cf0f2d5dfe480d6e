"""`bpe.evaluate`: one or several tokenizers side by side on a multi-parallel dev set, language by
language (bytes per token, tokens per sentence, fertility, parity against a pivot language,
vocabulary use) and across languages (the Gini coefficient of the languages' token counts, Rényi
efficiency). The figures are defined in `bpe.evaluation.metrics`; the dev set is read by
`bpe.evaluation.dev_set`; the result, `Evaluation` (`bpe.evaluation.report`), is what `bpe eval` prints
(`table()`, or `to_json()` with --json) and draws (`plot()` with --plot).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from bpe.errors import SettingsError
from bpe.evaluation.dev_set import CODE, DevSet, dev_set
from bpe.evaluation.metrics import (
    RENYI_ALPHA,
    Encoded,
    encode_language,
    gini,
    language_figures,
    renyi_efficiency,
    script_letters,
    spaced_letters,
    whitespace_words,
)
from bpe.evaluation.report import Evaluation, TokenizerEvaluation

if TYPE_CHECKING:
    from bpe.tokenizer import Tokenizer

__all__ = ["Evaluation", "TokenizerEvaluation", "evaluate"]

DEFAULT_PIVOT = "eng"  # the pivot when none is named and the dev set has it
# A tokenizer file whose name says nothing of the tokenizer: its directory names it too.
GENERIC_NAMES = ("tokenizer.json",)


def evaluate(
    tokenizers: Tokenizer | str | os.PathLike | Sequence[Tokenizer | str | os.PathLike] | Mapping[str, object],
    dev: DevSet | Mapping[str, Sequence[str]] | str | os.PathLike,
    pivot: str | None = None,
    *,
    languages: Sequence[str] | None = None,
    pattern: str | None = None,
    text_column: str = "text",
    num_threads: int | None = None,
) -> Evaluation:
    """Measure tokenizers on a multi-parallel dev set, language by language.

    `tokenizers`: a Tokenizer, anything `Tokenizer.load` reads (our directory, GPT-2's vocab.json +
    merges.txt, a tokenizer.json, a .tiktoken file; a path or URL), a list of them, or a mapping of
    name -> either. Named by the mapping, else by their paths' last parts. `pattern` is the split
    pattern of a file that records none (a .tiktoken file; GPT-2's files default to gpt2's).

    `dev`: a directory of `<code>.txt` (a sentence per line) or `<code>.parquet` files, or a mapping
    of code -> sentences; line i of every language the same sentence. `languages` keeps only those.
    `pivot`: the language parity is measured against; by default `eng` when the dev set has it,
    else no parity.

    >>> from bpe import Tokenizer
    >>> dev = {"eng": ["hi hi", "hi"], "fra": ["salut", "salut salut"]}
    >>> ev = evaluate({"hi": Tokenizer([(104, 105)])}, dev)
    >>> ev["hi"].languages["fra"].tokens, ev["hi"].languages["fra"].parity, ev["hi"].gini
    (16, 4.0, 0.3)

    (eng: "hi" is one token, so 3 + 1 = 4 tokens; fra: a token per byte, 5 + 11 = 16, 4 times
    eng's; Gini of (4, 16): (|4 - 16| + |16 - 4|) / (2 * 2**2 * 10) = 0.3.)
    """
    import numpy as np

    from bpe.engine.cores import available_cores

    found = dev_set(dev, languages, text_column)
    chosen = check_pivot(pivot, found.codes)
    named = named_tokenizers(tokenizers, pattern)
    threads = num_threads if num_threads is not None else available_cores()
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise SettingsError(
            lambda s: f"{s.num_threads}: expected an integer >= 1, got {threads!r}", parameter="num_threads"
        )
    encoded: list[dict[str, Encoded]] = [{} for _ in named]
    spacing, words = {}, {}
    for code in found.codes:  # a batch of sentences at a time, encoded by every tokenizer: never held whole
        letters, spaces = (0, 0), 0
        for batch in found.batches(code):
            letters = tuple(a + b for a, b in zip(letters, script_letters(batch), strict=True))
            spaces += whitespace_words(batch)
            for i, (_, _, tokenizer) in enumerate(named):
                part = encode_language(tokenizer, batch, threads)
                encoded[i].setdefault(code, Encoded(0, 0, np.zeros_like(part.counts))).add(part)
        spacing[code] = spaced_letters(*letters)
        words[code] = spaces if spacing[code] else None
    for by_code, (_, _, tokenizer) in zip(encoded, named, strict=True):
        for code in found.codes:  # a language without a sentence
            by_code.setdefault(code, encode_language(tokenizer, [], threads))
    results = [
        evaluate_tokenizer(name, source, tokenizer, found, chosen, words, by_code)
        for (name, source, tokenizer), by_code in zip(named, encoded, strict=True)
    ]
    return Evaluation(found.describe(), chosen, results, RENYI_ALPHA, spacing)


def check_pivot(pivot: str | None, codes: Sequence[str]) -> str | None:
    """The pivot language: `pivot`, which must be one of `codes`; by default eng when there, else None."""
    if pivot is None:
        return DEFAULT_PIVOT if DEFAULT_PIVOT in codes else None
    if not isinstance(pivot, str) or not CODE.fullmatch(pivot):
        raise SettingsError(
            lambda s: f"{s.pivot}: expected a language code such as eng, got {pivot!r}", parameter="pivot"
        )
    if pivot not in codes:
        raise SettingsError(
            lambda s: f"{s.pivot}: {pivot!r} is not a language of the dev set (it has {', '.join(codes)})",
            parameter="pivot",
        )
    return pivot


def evaluate_tokenizer(
    name: str,
    source: str | None,
    tokenizer: Tokenizer,
    dev: DevSet,
    pivot: str | None,
    words: Mapping[str, int | None],
    encoded: Mapping[str, Encoded],
) -> TokenizerEvaluation:
    """One tokenizer's figures on every language of `dev`, from its encoding of each (`encoded`)."""
    import numpy as np

    ordinary = tokenizer.vocab_size - len(tokenizer.special_tokens)
    pivot_tokens = encoded[pivot].tokens if pivot is not None else None
    figures = {
        code: language_figures(e, dev.sentences, words[code], ordinary, pivot_tokens) for code, e in encoded.items()
    }
    pooled: np.ndarray = np.sum([e.counts for e in encoded.values()], axis=0)
    total_bytes = sum(e.bytes for e in encoded.values())
    total_tokens = sum(e.tokens for e in encoded.values())
    sentences = dev.sentences * len(encoded)
    return TokenizerEvaluation(
        name=name,
        source=source,
        vocab_size=tokenizer.vocab_size,
        languages=figures,
        bytes=total_bytes,
        tokens=total_tokens,
        bytes_per_token=total_bytes / total_tokens if total_tokens else None,
        tokens_per_sentence=total_tokens / sentences if sentences else None,
        gini=gini([e.tokens for e in encoded.values()]),
        renyi_efficiency=renyi_efficiency(pooled, RENYI_ALPHA),
        vocabulary_use=int(np.count_nonzero(pooled)) / ordinary if ordinary else 0.0,
        most_tokens=max(encoded, key=lambda code: encoded[code].tokens),  # the first in code order on a tie
    )


def named_tokenizers(tokenizers, pattern: str | None = None) -> list[tuple[str, str | None, Tokenizer]]:
    """(name, source, tokenizer) of each tokenizer `evaluate` is given, loading those given as paths."""
    from bpe.tokenizer import Tokenizer

    if isinstance(tokenizers, Mapping):
        given = [(str(name), value) for name, value in tokenizers.items()]
    else:
        items = [tokenizers] if isinstance(tokenizers, (Tokenizer, str, os.PathLike)) else list(tokenizers)
        sources = [str(item) if isinstance(item, (str, os.PathLike)) else None for item in items]
        given = list(zip(display_names(sources), items))
    if not given:
        raise SettingsError(lambda s: f"{s.tokenizers}: expected at least one tokenizer", parameter="tokenizers")
    names = [name for name, _ in given]
    repeated = next((name for name in names if names.count(name) > 1), None)
    if repeated is not None:
        raise SettingsError(
            lambda s: f"{s('names')}: {repeated!r} names two tokenizers; give each its own name", parameter="names"
        )
    found = []
    for name, item in given:
        if isinstance(item, Tokenizer):
            found.append((name, None, item))
        elif isinstance(item, (str, os.PathLike)):
            found.append((name, str(item), load_tokenizer(str(item), pattern)))
        else:
            raise SettingsError(
                lambda s, item=item: (
                    f"{s.tokenizers}: expected a Tokenizer or the path of one, got {type(item).__name__}"
                ),
                parameter="tokenizers",
            )
    return found


def load_tokenizer(source: str, pattern: str | None = None) -> Tokenizer:
    """The tokenizer at `source`, `pattern` given only to a file that records none (a .tiktoken
    file, GPT-2's vocab.json + merges.txt), so one pattern serves a list of mixed tokenizers."""
    from bpe import storage
    from bpe.tokenizer import Tokenizer

    with storage.naming_url(source):  # no connection, no credentials: one line naming the URL
        return Tokenizer.load(source, pattern if pattern is not None and not records_pattern(source) else None)


def records_pattern(source: str) -> bool:
    """Whether the tokenizer files at `source` record their own split pattern: ours (manifest.json)
    and a tokenizer.json do; a .tiktoken file and GPT-2's vocab.json + merges.txt do not."""
    from bpe import storage

    if storage.is_remote(source):
        return not source.rstrip("/").endswith(".tiktoken")
    path = Path(storage.local_path(source))
    if path.is_file():
        return path.suffix != ".tiktoken"
    return (path / "manifest.json").exists() or (path / "tokenizer.json").exists()


def display_names(sources: Sequence[str | None]) -> list[str]:
    """Short names for tokenizers by their paths: the last part (`gpt2`), with its directory for a
    file named for nothing in particular (`tok/tokenizer.json`), and more parts where two would
    share a name; `tokenizer 2` for the second tokenizer, when it has no path.

    >>> display_names(["/shared/gpt2/", "runs/a/tok", "runs/b/tok", "x/tokenizer.json", None])
    ['gpt2', 'a/tok', 'b/tok', 'x/tokenizer.json', 'tokenizer 5']
    """
    parts = []
    for source in sources:
        if source is None:
            parts.append(None)
            continue
        if "://" not in source:
            source = os.path.abspath(source)
        parts.append([p for p in source.replace("\\", "/").split("/") if p])
    taken = [0 if p is None else (2 if p[-1] in GENERIC_NAMES else 1) for p in parts]

    def name(i: int) -> str:
        return f"tokenizer {i + 1}" if parts[i] is None else "/".join(parts[i][-taken[i] :])

    while True:
        names = [name(i) for i in range(len(parts))]
        clashing = [
            i for i, n in enumerate(names) if names.count(n) > 1 and parts[i] is not None and taken[i] < len(parts[i])
        ]
        if not clashing:
            return names
        for i in clashing:
            taken[i] += 1

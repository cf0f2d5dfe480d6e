"""The schema: every setting of a training run declared once, and checked in one place.

A `Setting` gives a setting's name (the parameter of `bpe.train`), type, default, one-line doc,
group, check, whether it changes the merges, and where it appears (`on`): `train()`, `Settings`
(what decides the merges), the manifest's settings record, `bpe train`'s flags, a pipeline
configuration's keys and the train-bpe flow's parameters. Those surfaces are made from it: the
command's options and their help (`bpe.cli.train`), `Settings` and `SettingsRecord`, the
configuration and its errors (`bpe.pipeline.config`, which adds the pipeline's own settings in the
same form), the flow's parameter model (`bpe.pipeline.parameters`) and the reference page of the
documentation (`bpe.pipeline.reference`). `train()` keeps its explicit parameters for readers and
editors; tests/test_schema.py proves they match.

Errors are composed for the surface that shows them (see `bpe.engine.errors.Spelling`):

>>> check("max_token_length", 1)
Traceback (most recent call last):
...
bpe.engine.errors.SettingsError: max_token_length: expected an integer >= 2 (bytes) or None (no limit), got 1

Plain Python (dataclasses), so that `import bpe` and `bpe --help` stay light.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from bpe.engine import TIE_BREAKS
from bpe.engine.errors import Spelling
from bpe.errors import SettingsError
from bpe.pretokenize import PATTERNS, SUPERWORD_PATTERN, Pretokenizer, resolve_pattern, superword_regex

ENGINES = ("local", "dask")
# The roles transformers gives special tokens, in the order `train` adds role tokens it was not given.
ROLES = ("bos", "eos", "pad", "unk")
# A superword run's settings describe the whole run ("whole"), or one of its two stages: ordinary
# BPE up to the transition ("subwords"), then merges across words ("superwords"). See bpe.training.superwords.
STAGES = ("whole", "subwords", "superwords")
PARITY_VARIANTS = ("base", "window")  # bpe.engine.parity.VARIANTS, here so that `bpe --help` stays light
TEXT_FORMATS = ("doc", "lines")  # a text file is one document, or one document per line (bpe.inputs.readers)
# `limit`: decimal and binary byte units, or rows (documents).
LIMIT_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "row": 0,
    "rows": 0,
}
# Upper bounds, so that a number too large for the kernels (64-bit) is one line naming its setting,
# never an overflow deep inside: token ids are unsigned 32-bit, counts 64-bit, and no token or word
# count comes near 2**31. Token ids are written as uint32 (.npy, .bin) and are tiktoken's u32 ranks.
ID_LIMIT = 1 << 32
MAX_VOCAB_SIZE = ID_LIMIT
MAX_COUNT = 2**63 - 1
MAX_LENGTH = 2**31 - 1
# A local Dask cluster's workers are processes of about 150 MB each on this machine.
MAX_LOCAL_WORKERS = 256


class On(enum.Flag):
    """Where a setting appears."""

    TRAIN = enum.auto()  # a parameter of `bpe.train`
    SETTINGS = enum.auto()  # a field of `bpe.training.settings.Settings`: what decides the merges, resolved
    RECORD = enum.auto()  # a key of the manifest's `settings` (`bpe.manifest.SettingsRecord`)
    CLI = enum.auto()  # an option of `bpe train`
    YAML = enum.auto()  # a key of a pipeline configuration (`bpe.pipeline.config`)
    FLOW = enum.auto()  # a parameter of the train-bpe flow (`bpe.pipeline.parameters`)


TRAINING = On.TRAIN | On.SETTINGS | On.RECORD | On.CLI  # what `train()` and `bpe train` take
EVERYWHERE = TRAINING | On.YAML | On.FLOW

# The groups settings are shown in (the command's help, the reference page), in this order.
GROUPS = {
    "vocabulary": "what the tokenizer holds",
    "splitting": "how text is cut into words before merging",
    "merges": "which pairs merge, and when training stops",
    "superwords": "superword tokenizers (SuperBPE): merges across words after the transition",
    "languages": "multilingual runs: text by language, mixture weights and parity-aware merges",
    "inputs": "what is read, and how much of it",
    "engine": "where training runs (the merges are the same on every engine)",
    "pipeline": "the Prefect pipeline's own keys (configurations and flow runs)",
}


def _anything(value: Any) -> bool:
    return True


@dataclass(frozen=True)
class Check:
    """What a value must be: `expected` says it (in a message and the reference page), `test`
    decides it. `deeper` checks further and raises its own error (a regex that must compile).
    `unset`: whether a message also says how to leave the setting unset, when it may be."""

    expected: str
    test: Callable[[Any], bool] = _anything
    deeper: Callable[[str, Any], None] | None = None
    unset: bool = True

    def fault(self, value: Any) -> tuple[str, bool] | None:
        """(what was expected, whether to say how to leave it unset), or None for a good value."""
        return None if self.test(value) else (self.expected, self.unset)

    def constraints(self) -> dict[str, Any]:
        """The bounds a form can check before a run starts (pydantic's Field keywords)."""
        return {}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Integer(Check):
    """An integer from `least` to `most`; `beyond` says why `most` is the most."""

    least: int = 0
    most: int | None = None
    beyond: str = ""

    def fault(self, value: Any) -> tuple[str, bool] | None:
        if not _is_int(value) or value < self.least:
            return self.expected, self.unset
        if self.most is not None and value > self.most:
            return f"at most {self.most:,} {self.beyond}".rstrip(), False
        return None

    def constraints(self) -> dict[str, Any]:
        return {"ge": self.least, **({"le": self.most} if self.most is not None else {})}


def integer(least: int, most: int | None = None, what: str = "", beyond: str = "", expected: str = "") -> Integer:
    """An integer >= `least` (`what` it counts, said after), at most `most` (`beyond`: why)."""
    said = expected or f"an integer >= {least}" + (f" ({what})" if what else "")
    return Integer(said, least=least, most=most, beyond=beyond or what)


@dataclass(frozen=True)
class Choice(Check):
    """One of `options`."""

    options: tuple[str, ...] = ()

    def fault(self, value: Any) -> tuple[str, bool] | None:
        return None if isinstance(value, str) and value in self.options else (self.expected, self.unset)


def choice(options: Sequence[str]) -> Choice:
    return Choice(f"one of {', '.join(options)}", options=tuple(options))


@dataclass(frozen=True)
class Number(Check):
    """A finite number above `above` or from `least`, and at most `most` or below `below`."""

    above: float | None = None
    least: float | None = None
    most: float | None = None
    below: float | None = None

    def fault(self, value: Any) -> tuple[str, bool] | None:
        # an int of any size is finite; a float may be inf or nan
        number = (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and math.isfinite(value)
        )
        within = number and all(
            (
                self.above is None or value > self.above,
                self.least is None or value >= self.least,
                self.most is None or value <= self.most,
                self.below is None or value < self.below,
            )
        )
        return None if within else (self.expected, self.unset)

    def constraints(self) -> dict[str, Any]:
        bounds = {"gt": self.above, "ge": self.least, "le": self.most, "lt": self.below}
        return {k: v for k, v in bounds.items() if v is not None}


def text(expected: str, deeper: Callable[[str, Any], None] | None = None) -> Check:
    """A non-empty string (`deeper` checks it further)."""
    return Check(expected, lambda value: isinstance(value, str) and bool(value), deeper)


YES_NO = Check("true or false", lambda value: isinstance(value, bool))


def _strings(value: Any) -> bool:
    """Strings in a list, tuple or any other iterable but a string itself."""
    if isinstance(value, (str, bytes)):
        return False
    try:
        items = iter(value)
    except TypeError:  # not iterable
        return False
    return all(isinstance(t, str) for t in items)


def _special_tokens(name: str, value: Any) -> None:
    Pretokenizer("gpt2", value)  # empty or repeated tokens


def _pattern(name: str, value: Any) -> None:
    resolve_pattern(value, name, given=True)


def _superword_pattern(name: str, value: Any) -> None:
    superword_regex(value, name, given=True)


def _paths(value: Any) -> bool:
    """A path, glob or URL, or a list of them, as a configuration gives them (`train()` takes
    Paths and Shards too, and checks them as it reads them)."""
    if isinstance(value, str):
        return bool(value)
    return isinstance(value, list) and bool(value) and all(isinstance(v, str) and v for v in value)


def _by_language(value: Any) -> bool:
    """A mapping of language code -> a path, glob or URL, or a list of them (`languages:`)."""
    return (
        isinstance(value, Mapping) and bool(value) and all(isinstance(k, str) and _paths(v) for k, v in value.items())
    )


def _codes(name: str, value: Any) -> None:
    from bpe.languages.codes import check_code

    for code in value:
        check_code(code, name)


def _text_or_numbers(value: Any) -> bool:
    """`eng=1,hin=4` as text, or as a mapping of keys to numbers."""
    if isinstance(value, str):
        return bool(value.strip())
    numbers = (
        all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value.values())
        if isinstance(value, Mapping)
        else False
    )
    return isinstance(value, Mapping) and bool(value) and numbers


def _mix(name: str, value: Any) -> None:
    from bpe.languages.mixture import Mix

    Mix.of(value)


def _ratio(name: str, value: Any) -> None:
    from bpe.languages.parity import parity_ratios

    parity_ratios(value)


_LIMIT = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]+)\s*")


@dataclass(frozen=True)
class Setting:
    """One setting. `default` is `train()`'s (None: unset, and `none` says what that means);
    `required`: the command line and a configuration must give it. `flag` and `key` spell it on
    the command line and in a configuration (a key path: `superwords.max_words`; a setting whose
    key is a section's name turns that section on). `doc` may name other settings as `{name}`,
    each spelt as the surface that shows it spells them."""

    name: str
    type: Any
    default: Any
    doc: str
    group: str
    check: Check
    on: On = EVERYWHERE
    merges: bool = True
    none: str | None = None  # what None means, when a setting may be unset
    required: bool = False
    from_base: bool = False  # unset with a base: the base's (`bpe.training.extend.base_settings`)
    flag: str = ""  # default: --<name with dashes>
    key: str = ""  # default: <name>
    metavar: str | None = None
    cli_none: str | None = None  # the value the command line gives for None, if any (--max-words 0)
    keys: tuple[str, ...] = ()  # a mapping's keys, each with a flag of its own (flag holds "{}")
    example: Any = None  # a value other than the default, as a configuration would give it

    def __post_init__(self) -> None:
        assert self.group in GROUPS, self.group
        if not self.flag and On.CLI in self.on:
            object.__setattr__(self, "flag", "--" + self.name.replace("_", "-"))
        if not self.key and On.YAML in self.on:
            object.__setattr__(self, "key", self.name)

    @property
    def optional(self) -> bool:
        """Whether None is a value of it (unset)."""
        return self.none is not None

    @property
    def flags(self) -> dict[str, str]:
        """The command's flags of this setting by their argparse names: one, or one per key."""
        if not self.keys:
            return {self.name: self.flag}
        return {self.flag.format(key).removeprefix("--").replace("-", "_"): self.flag.format(key) for key in self.keys}

    def doc_spelt(self, spell: Callable[[str], str], key: str | None = None) -> str:
        """The doc with the settings it names spelt by `spell` (and `{key}`: one of its keys, or all)."""
        return self.doc.format_map(_Spell(spell, key=key or "/".join(self.keys)))


class _Spell(dict):
    """`{name}` fields of a doc, spelt as they are looked up."""

    def __init__(self, spell: Callable[[str], str], **known: str) -> None:
        super().__init__(known)
        self.spell = spell

    def __missing__(self, name: str) -> str:
        return self.spell(name)


def in_group(group: str, **common: Any) -> Callable[..., Setting]:
    """A maker of `group`'s settings: Setting(name, type, default, doc, check, **keywords) with the
    group, and `common`'s keywords where a setting gives none of its own (what they share, said once)."""

    def setting(name: str, type: Any, default: Any, doc: str, check: Check, **own: Any) -> Setting:
        return Setting(name, type, default, doc, group, check, **(common | own))

    return setting


# A maker per group, with what its settings share: the languages' appear everywhere but in `Settings`
# and the record; the engine's never change the merges, and most are for `train()` and `bpe train` alone.
_inputs = in_group("inputs")
_vocabulary = in_group("vocabulary")
_splitting = in_group("splitting")
_merges = in_group("merges")
_superwords = in_group("superwords")
_languages = in_group("languages", on=On.TRAIN | On.CLI | On.YAML | On.FLOW)
_engine = in_group("engine", on=On.TRAIN | On.CLI, merges=False)
_pipeline = in_group("pipeline")

SETTINGS = (
    _inputs(
        "files",
        list[str],
        None,
        "the text to train on: files, directories, globs or URLs of text, .parquet, .jsonl, .json, .csv or .tsv, "
        "compressed or not (.gz, .zst, .bz2, .xz)",
        Check("a path, glob or URL, or a list of them", _paths),
        on=On.TRAIN | On.CLI | On.YAML | On.FLOW,
        none="the texts given instead",
        required=True,
        flag="inputs",
        key="data",
        example=["corpus/"],
    ),
    _inputs(
        "counts",
        list[str],
        None,
        "word counts to train on instead of text: Parquet files, directories or globs of a `word` column (a "
        "pre-token's UTF-8 bytes, binary or string) and a `count` column, as `bpe count` writes them or another "
        "engine does; duplicate words are summed",
        Check("a path, glob or URL, or a list of them", _paths),
        on=On.TRAIN | On.CLI | On.YAML | On.FLOW,
        none="the text given",
        metavar="PATH",
        example=["counts/"],
    ),
    _vocabulary(
        "vocab_size",
        int,
        32768,
        "tokens in all: the 256 bytes, the merges and the special tokens (with {base}, the base's tokens too)",
        integer(256, MAX_VOCAB_SIZE, beyond="tokens (token ids are unsigned 32-bit)"),
        required=True,
        metavar="SIZE",
        example=50000,
    ),
    _splitting(
        "pattern",
        str,
        None,
        f"how text is cut into words that merges never cross: {', '.join(PATTERNS)}, or a regex",
        text(f"one of {', '.join(PATTERNS)} or a regex", _pattern),
        none="cl100k, or the base tokenizer's",
        from_base=True,
        metavar="PATTERN",
        example="gpt2",
    ),
    _vocabulary(
        "special_tokens",
        list[str],
        (),
        "special tokens, kept whole and never merged; their ids follow the merges (with {base}, after the base's)",
        Check("a list of strings", _strings, _special_tokens),
        from_base=True,
        flag="--special-token",
        metavar="TOKEN",
        example=["<|endoftext|>"],
    ),
    _merges(
        "min_frequency",
        int,
        1,
        "stop when the best pair occurs fewer times than this",
        integer(1, MAX_COUNT, beyond="(counts are 64-bit)"),
        metavar="COUNT",
        example=2,
    ),
    _merges(
        "tie_break",
        str,
        "bytes",
        "which of the pairs with equal counts merges first: the greatest by their tokens' bytes, or by their ids",
        choice(TIE_BREAKS),
        example="ids",
    ),
    _merges(
        "max_token_length",
        int,
        None,
        "no merge makes a token longer than this many bytes (at least 2): such pairs are skipped",
        integer(2, MAX_LENGTH, "bytes"),
        none="no limit",
        metavar="BYTES",
        example=16,
    ),
    _inputs(
        "text_column",
        str,
        "text",
        "the Parquet/CSV column or JSON field holding the text",
        text("a non-empty column or field name"),
        metavar="NAME",
        example="body",
    ),
    _inputs(
        "text_format",
        str,
        "doc",
        "a text file (any but .parquet/.jsonl/.json/.csv/.tsv) is one document (doc) or one per line (lines)",
        choice(TEXT_FORMATS),
        on=TRAINING,
        example="lines",
    ),
    _inputs(
        "limit",
        str,
        None,
        "train on the start of the input only: a size of text (10MB, 512KiB, 1.5GB) or of rows (5000rows), "
        "after {sample}",
        Check(
            "a size such as 10MB, 512KiB, 1.5GB or a row count such as 5000rows",
            lambda value: _parsed_limit(value) is not None,
            unset=False,
        ),
        on=TRAINING,
        none="all of it",
        metavar="BYTES|ROWS",
        example="10MB",
    ),
    _inputs(
        "sample",
        float,
        None,
        "train on this fraction of the rows (documents), chosen by a hash of each row and {seed}",
        Number("a fraction of rows to keep, above 0 and at most 1", above=0, most=1),
        on=TRAINING,
        none="every row",
        metavar="FRACTION",
        example=0.1,
    ),
    _inputs(
        "seed",
        int,
        0,
        "the seed of {sample}",
        integer(0),
        on=TRAINING,
        example=7,
    ),
    _pipeline(
        "holdout_fraction",
        float,
        0.01,
        "the fraction of rows held out from training, to measure compression on (a text file, one document, is "
        "never held out)",
        Number("a number in [0, 0.5)", least=0, below=0.5),
        on=On.RECORD | On.YAML | On.FLOW,
        example=0.05,
    ),
    _superwords(
        "superwords",
        bool,
        False,
        "a superword tokenizer: ordinary BPE up to {transition}, then merges across words up to {vocab_size}",
        YES_NO,
        example=True,
    ),
    _superwords(
        "transition",
        int,
        None,
        "the vocabulary size (special tokens aside) where the superword stage starts",
        integer(256, expected="a vocabulary size >= 256 at which the superword stage starts"),
        none="no superword stage",
        key="superwords.transition",
        metavar="SIZE",
        example=40000,
    ),
    _superwords(
        "superword_pattern",
        str,
        SUPERWORD_PATTERN,
        f"how the superword stage cuts text: {SUPERWORD_PATTERN} (the paper's) or a regex whose matches and the text "
        "between them are the pieces",
        text(f"{SUPERWORD_PATTERN} or a regex", _superword_pattern),
        key="superwords.pattern",
        metavar="PATTERN",
        example=r"\s+",
    ),
    _superwords(
        "max_words",
        int,
        4,
        "a superword holds at most this many words (runs of bytes other than the space)",
        integer(1, MAX_LENGTH, beyond="words"),
        none="no limit",
        key="superwords.max_words",
        metavar="N",
        cli_none="0",
        example=3,
    ),
    _superwords(
        "colon_space",
        bool,
        False,
        'let superwords hold ": " (refused by default, as in the paper)',
        YES_NO,
        key="superwords.colon_space",
        example=True,
    ),
    _languages(
        "languages",
        dict[str, list[str]],
        None,
        "training text by language, instead of {files}: a language code (ISO 639-3 such as eng, hin) and its "
        "inputs (files, directories, globs or URLs); each language is counted apart, languages are held in the "
        "order of their codes",
        Check("a mapping of language code -> a path, glob or URL, or a list of them", _by_language, _codes),
        on=On.CLI | On.YAML | On.FLOW,
        none="one text, not by language",
        flag="--lang",
        metavar="CODE=INPUT",
        example={"eng": ["en/"], "hin": ["hi/"]},
    ),
    _languages(
        "lang_dir",
        str,
        None,
        "training text by language from one directory, instead of {files} or {languages}: a file or folder per "
        "language, named by its code (eng.txt, hin.parquet, tel/); other names (README.md, hidden files) are "
        "skipped",
        text("a directory (or URL) holding a file or folder per language code"),
        none="not from a directory",
        metavar="DIR",
        example="ud/",
    ),
    _languages(
        "mix",
        str | dict[str, float],
        None,
        "how much each language's text counts: temperature=A (each language's text weighs as its bytes to the "
        "power A, 0 <= A <= 1, as mT5's sampling; 0.3 is usual) or weights such as eng=1,hin=4 (hin's words "
        "count four times; a language left out weighs 1); applied exactly, by multiplying word counts by integers",
        Check("temperature=A or weights such as eng=1,hin=4", _text_or_numbers, _mix),
        none="each language's text as it is",
        metavar="temperature=A|CODE=W,...",
        example="temperature=0.3",
    ),
    _languages(
        "parity",
        bool,
        False,
        "parity-aware merges (Foroutan et al. 2025): each merge serves one language, the one whose {parity_dev} "
        "is the longest in tokens (without a dev set or {parity_ratio}: whose training text is), merging that "
        "language's most frequent pair everywhere; {parity_dev} and {parity_ratio} turn it on too",
        YES_NO,
        example=True,
    ),
    _languages(
        "parity_dev",
        str,
        None,
        "a directory of parallel dev text, a file per language: <code>.txt (a sentence per line, line i "
        "parallel across the files) or <code>.parquet (its {text_column}); each merge serves the language whose "
        "dev text is the longest in tokens",
        text("a directory holding <code>.txt or <code>.parquet per language"),
        none="no dev set",
        key="parity.dev",
        metavar="DIR",
        example="ntrex/",
    ),
    _languages(
        "parity_ratio",
        str | dict[str, float],
        None,
        "target compression ratios instead of {parity_dev}, one per language (eng=1,hin=2.5): each merge serves "
        "the language whose training text's compression divided by its ratio is the lowest",
        Check("a positive ratio per language, such as eng=1,hin=2.5", _text_or_numbers, _ratio),
        none="no ratios",
        key="parity.ratio",
        metavar="CODE=R,...",
        example="eng=1,hin=2.5",
    ),
    _languages(
        "global_merges",
        int,
        0,
        "ordinary merges (counts summed over the languages) made before the parity-aware ones",
        integer(0, MAX_LENGTH, "merges"),
        key="parity.global_merges",
        metavar="N",
        example=800,
    ),
    _languages(
        "parity_variant",
        str,
        "base",
        "base serves the longest language; window skips a language that served more than {parity_alpha} / "
        "languages of the last {parity_window} merges",
        choice(PARITY_VARIANTS),
        key="parity.variant",
        example="window",
    ),
    _languages(
        "parity_window",
        int,
        100,
        "the merges the window variant looks back over",
        integer(1, MAX_LENGTH, "merges"),
        key="parity.window",
        metavar="N",
        example=50,
    ),
    _languages(
        "parity_alpha",
        float,
        2.0,
        "the window variant's share: a language may serve alpha / languages of the window's merges",
        Number("a number above 0", above=0),
        key="parity.alpha",
        metavar="ALPHA",
        example=1.5,
    ),
    _vocabulary(
        "base",
        str,
        None,
        "a tokenizer to start from (our directory, GPT-2's vocab.json + merges.txt, a byte-level BPE tokenizer.json, "
        "a .tiktoken file; a path or URL): its merges are replayed first, its ids kept, new tokens take the ids after",
        text("the path or URL of a tokenizer"),
        on=On.TRAIN | On.CLI | On.YAML | On.FLOW,
        none="no base (training starts from the bytes)",
        flag="--from",
        metavar="TOKENIZER",
        example="gpt2-tokenizer/",
    ),
    _vocabulary(
        "special_token_roles",
        dict[str, str],
        None,
        "the {key} token for transformers, written to tokenizer_config.json (added as a special token if no "
        "{special_tokens} names it)",
        Check("a mapping of role -> token", lambda value: isinstance(value, Mapping)),  # then bpe.formats.roles
        on=On.TRAIN | On.CLI,
        none="no roles",
        flag="--{}-token",
        metavar="TOKEN",
        keys=ROLES,
        example={"eos": "<|endoftext|>"},
    ),
    _vocabulary(
        "model_max_length",
        int,
        None,
        "the model's longest input in tokens, written to tokenizer_config.json: what transformers' truncation=True "
        "cuts to",
        integer(1, expected="a positive integer (tokens)"),
        on=On.TRAIN | On.CLI,
        merges=False,
        none="no truncation",
        metavar="TOKENS",
        example=1024,
    ),
    _engine(
        "engine",
        str,
        "local",
        "local (threads of this process) or dask (a Dask cluster; the [dask] extra)",
        choice(ENGINES),
        example="dask",
    ),
    _engine(
        "threads",
        int,
        None,
        "threads for counting and the merge loop",
        integer(1),
        none="the cores available",
        example=4,
    ),
    _engine(
        "scheduler",
        str,
        None,
        "the Dask scheduler's address (tcp://host:8786) for the dask engine",
        text("a scheduler address"),
        on=On.TRAIN | On.CLI | On.YAML | On.FLOW,
        none="a local cluster",
        key="dask_scheduler",
        metavar="ADDRESS",
        example="tcp://10.0.0.5:8786",
    ),
    _engine(
        "workers",
        int,
        None,
        "worker processes of the local Dask cluster (the dask engine without a scheduler)",
        integer(1, MAX_LOCAL_WORKERS, "worker processes of the local Dask cluster", beyond="processes on this machine"),
        on=On.TRAIN | On.CLI | On.YAML | On.FLOW,
        none="one per core",
        key="dask_workers",
        metavar="N",
        example=4,
    ),
    _engine(
        "scratch",
        str,
        None,
        "where the dask engine keeps word buckets and checkpoints: a path every worker shares or an object store URL",
        text("a path or URL"),
        none="a temporary directory on this machine",
        metavar="PATH",
        example="s3://bucket/scratch",
    ),
)
# What a run resolves beyond the settings it is given: never a parameter, flag or key.
RESOLVED = (
    _vocabulary(
        "base_merges",
        int,
        0,
        "the base tokenizer's merges, replayed before training learns more",
        integer(0),
        on=On.SETTINGS | On.RECORD,
        example=100,
    ),
    _vocabulary(
        "base_missing_bytes",
        int,
        0,
        "the bytes the base tokenizer has no id for (of the 13 valid UTF-8 never holds): the vocabulary counts "
        "ids, so as many more merges fit in it",
        integer(0, 13, expected="an integer from 0 to 13 (the bytes valid UTF-8 never holds)"),
        on=On.SETTINGS,
        example=13,
    ),
    _superwords(
        "stage",
        str,
        "whole",
        "which part of a superword run the settings describe: all of it, or its subword or superword stage",
        choice(STAGES),
        on=On.SETTINGS,
        example="subwords",
    ),
)
SETTING = {setting.name: setting for setting in (*SETTINGS, *RESOLVED)}
# Each setting's default, for the signatures that take it (`train()`): declared above, nowhere else.
DEFAULT = {setting.name: setting.default for setting in SETTINGS}
# The settings a base tokenizer sets unless given (its pattern; its special tokens, first).
FROM_BASE = tuple(s.name for s in SETTINGS if s.from_base)
# The settings that only a superword run reads (the manifest records them for such a run only).
SUPERWORD_KEYS = tuple(s.name for s in SETTINGS if s.group == "superwords" and s.name != "superwords")
# The settings of parity-aware merges, as `train()` takes them (bpe.training.plan reads them).
PARITY_KEYS = tuple(s.name for s in SETTINGS if s.key.startswith("parity"))
# What a multilingual run takes beyond its text by language: the mixture and the parity settings.
LANGUAGE_SETTINGS = ("mix", *PARITY_KEYS)


def on(where: On, settings: Sequence[Setting] = SETTINGS) -> tuple[Setting, ...]:
    """The settings that appear `where`, in the schema's order."""
    return tuple(s for s in settings if where in s.on)


def grouped(settings: Sequence[Setting] = SETTINGS) -> dict[str, list[Setting]]:
    """`settings` by group, in the order of GROUPS."""
    groups: dict[str, list[Setting]] = {group: [] for group in GROUPS}
    for setting in settings:
        groups[setting.group].append(setting)
    return {group: found for group, found in groups.items() if found}


def check(name: str, value: Any, setting: Setting | None = None) -> None:
    """Raise SettingsError, naming the setting, if `value` cannot work for it (None, its unset
    value, always can when it may be unset)."""
    setting = setting or SETTING[name]
    if value is None and setting.optional:
        return
    fault = setting.check.fault(value)
    if fault is not None:
        what, say_unset = fault
        unset = setting.none if say_unset else None
        raise SettingsError(partial(_expected, name, what, value, unset), parameter=name)
    if setting.check.deeper is not None:
        setting.check.deeper(name, value)


def _expected(name: str, what: str, value: Any, unset: str | None, spelling: Spelling) -> str:
    return spelling.expected(name, what, value, unset)  # a module's function: it pickles (to a Dask client)


def check_all(values: dict[str, Any]) -> None:
    """Check each setting in `values` (a name -> value mapping) in the schema's order."""
    for setting in SETTINGS:
        if setting.name in values:
            check(setting.name, values[setting.name], setting)


def parse_limit(limit: str) -> tuple[str, int]:
    """`limit`: ("bytes", n) for a size with its unit, ("rows", n) for a count of rows.

    >>> parse_limit("10MB"), parse_limit("1.5 KiB"), parse_limit("5000rows")
    (('bytes', 10000000), ('bytes', 1536), ('rows', 5000))
    """
    parsed = _parsed_limit(limit)
    if parsed is None:
        check("limit", limit)  # raises, naming it
    return parsed


def _parsed_limit(value: Any) -> tuple[str, int] | None:
    match = _LIMIT.fullmatch(value) if isinstance(value, str) else None
    if match is None or match.group(2).lower() not in LIMIT_UNITS:
        return None
    number, unit = match.group(1), LIMIT_UNITS[match.group(2).lower()]
    if unit == 0:
        return ("rows", int(number)) if "." not in number and int(number) >= 1 else None
    amount = int(float(number) * unit)
    return ("bytes", amount) if amount >= 1 else None

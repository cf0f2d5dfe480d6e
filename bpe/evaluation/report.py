"""What `bpe.evaluate` finds, and how it is shown: the figures of each tokenizer per language and
across languages (`Evaluation`), as a text table with a row per language and a column group per
tokenizer, as plain data for JSON, and as a PNG of bars per language with a colour per tokenizer."""

from __future__ import annotations

import os
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from bpe.errors import OutputError, require_extra
from bpe.evaluation.metrics import RENYI_ALPHA, LanguageFigures

JSON_FORMAT = 1


@dataclass
class TokenizerEvaluation:
    """One tokenizer on the dev set: its figures per language (in code order) and across them.
    `bytes_per_token` and `tokens_per_sentence` are over all languages together; `most_tokens` is
    the language its sentences cost the most tokens in."""

    name: str
    source: str | None
    vocab_size: int
    languages: dict[str, LanguageFigures]
    bytes: int
    tokens: int
    bytes_per_token: float | None
    tokens_per_sentence: float | None
    gini: float | None
    renyi_efficiency: float | None
    vocabulary_use: float
    most_tokens: str

    def to_json(self) -> dict:
        values = dict(self.__dict__)
        values["languages"] = {code: figures.to_json() for code, figures in self.languages.items()}
        return values

    @classmethod
    def from_json(cls, values: dict) -> TokenizerEvaluation:
        """The evaluation `to_json` gave (as a manifest records it)."""
        languages = {code: LanguageFigures(**figures) for code, figures in values["languages"].items()}
        return cls(**{**values, "languages": languages})


@dataclass
class Evaluation:
    """Tokenizers side by side on one dev set: `tokenizers` in the order given, each with its
    figures per language; `pivot` the language parity is measured against (None: no parity).

    `table()` is the text `bpe eval` prints, `to_json()` its --json (stable keys: `format`, `dev`,
    `pivot`, `renyi_alpha`, `tokenizers`, each with `name`, `source`, `vocab_size`, `languages`
    (code -> `sentences`, `bytes`, `tokens`, `words`, `bytes_per_token`, `tokens_per_sentence`,
    `fertility`, `parity`, `vocabulary_use`, `renyi_efficiency`), `bytes`, `tokens`,
    `bytes_per_token`, `tokens_per_sentence`, `gini`, `renyi_efficiency`, `vocabulary_use`,
    `most_tokens`), `plot(path)` a PNG of bars per language, a colour per tokenizer."""

    dev: dict  # DevSet.describe(): location, languages, sentences, bytes, fingerprint
    pivot: str | None
    tokenizers: list[TokenizerEvaluation]
    renyi_alpha: float = RENYI_ALPHA
    spaced: dict[str, bool] = field(default_factory=dict)  # which languages' scripts separate words with spaces

    @property
    def codes(self) -> list[str]:
        return list(self.dev["languages"])

    def __getitem__(self, name: str) -> TokenizerEvaluation:
        """The evaluation of the tokenizer named `name`."""
        for found in self.tokenizers:
            if found.name == name:
                return found
        raise KeyError(f"no tokenizer named {name!r} (the names are {', '.join(t.name for t in self.tokenizers)})")

    def to_json(self) -> dict:
        """The figures as plain data (what `bpe eval --json` prints): languages in code order,
        tokenizers in the order given, None where a figure does not apply."""
        return {
            "format": JSON_FORMAT,
            "dev": {**self.dev, "spaced": dict(self.spaced)},
            "pivot": self.pivot,
            "renyi_alpha": self.renyi_alpha,
            "tokenizers": [t.to_json() for t in self.tokenizers],
        }

    def table(self) -> str:
        """The figures as a text table: a row per language, a column group per tokenizer (bytes per
        token, tokens per sentence, fertility, parity), then the figures across languages."""
        return table(self)

    def plot(self, path: str | os.PathLike) -> Path:
        """Draw tokens per sentence and bytes per token, a bar per language and tokenizer (one colour
        per tokenizer, its Gini in the legend), to the file `path` in the format its suffix names
        (.png, .svg, .pdf). Needs matplotlib (the [plot] extra)."""
        return plot(self, Path(path))


# (heading, figure, format) of a tokenizer's columns; parity only when there is a pivot.
COLUMNS = (
    ("bytes/tok", "bytes_per_token", "{:.2f}"),
    ("tok/sent", "tokens_per_sentence", "{:.1f}"),
    ("fertility", "fertility", "{:.2f}"),
    ("parity", "parity", "{:.2f}"),
)
NONE = "-"  # a figure that does not apply (fertility of an unspaced script, parity without a pivot)
GAP = "  "  # between columns
GROUP_GAP = "   "  # between tokenizers
LEGEND_WIDTH = 100


def _shown(value: float | None, form: str) -> str:
    return NONE if value is None else form.format(value)


def table(evaluation: Evaluation) -> str:
    """The text table `bpe eval` prints: a header line saying what the dev set is, a row per
    language, the figures over all languages, then the figures across languages (Gini, Rényi
    efficiency, vocabulary use), and a line saying what the columns mean."""
    columns = [c for c in COLUMNS if c[1] != "parity" or evaluation.pivot is not None]
    labels = [*evaluation.codes, "all", "Gini", f"Renyi eff. ({evaluation.renyi_alpha:g})", "vocab used"]
    rows: list[list[list[str]]] = []  # per label, per tokenizer, the cells
    for code in evaluation.codes:
        rows.append(
            [[_shown(getattr(t.languages[code], f), form) for _, f, form in columns] for t in evaluation.tokenizers]
        )
    rows.append(
        [
            [
                _shown(t.bytes_per_token, "{:.2f}"),
                _shown(t.tokens_per_sentence, "{:.1f}"),
                *([""] * (len(columns) - 2)),
            ]
            for t in evaluation.tokenizers
        ]
    )
    across = [
        ("gini", "{:.4f}"),
        ("renyi_efficiency", "{:.4f}"),
        ("vocabulary_use", "{:.1%}"),
    ]
    for figure, form in across:  # one value per tokenizer, in its group's last column
        rows.append([[*([""] * (len(columns) - 1)), _shown(getattr(t, figure), form)] for t in evaluation.tokenizers])
    widths = []
    for g, t in enumerate(evaluation.tokenizers):
        group = [max(len(heading), *(len(row[g][c]) for row in rows)) for c, (heading, _, _) in enumerate(columns)]
        spare = len(t.name) - (sum(group) + len(GAP) * (len(group) - 1))
        if spare > 0:
            group[-1] += spare
        widths.append(group)
    first = max(len("language"), *(len(label) for label in labels))

    def line(label: str, groups: list[list[str]]) -> str:
        cells = [GAP.join(cell.rjust(w) for cell, w in zip(group, ws)) for group, ws in zip(groups, widths)]
        return (label.ljust(first) + GROUP_GAP + GROUP_GAP.join(cells)).rstrip()

    group_widths = [sum(ws) + len(GAP) * (len(ws) - 1) for ws in widths]
    names = GROUP_GAP.join(t.name.ljust(w) for t, w in zip(evaluation.tokenizers, group_widths))
    dev = evaluation.dev
    where = f" {dev['location']}" if dev.get("location") else ""
    out = [
        f"dev set{where}: {len(evaluation.codes)} language(s), {dev['sentences']:,} parallel sentence(s) each",
        "",
        (" " * first + GROUP_GAP + names).rstrip(),
        line("language", [[heading for heading, _, _ in columns] for _ in evaluation.tokenizers]),
    ]
    n = len(evaluation.codes)
    out += [line(label, row) for label, row in zip(labels[:n], rows[:n])]
    out.append("-" * len(out[-1]))
    out += [line(label, row) for label, row in zip(labels[n:], rows[n:])]
    out += ["", legend(evaluation)]
    return "\n".join(out) + "\n"


def legend(evaluation: Evaluation) -> str:
    """What the columns and the rows below the languages mean, in a few lines."""
    unspaced = [code for code, spaced in evaluation.spaced.items() if not spaced]
    lines = [
        "bytes/tok: UTF-8 bytes per token; tok/sent: tokens per sentence; fertility: tokens per whitespace-separated "
        "word" + (f" ({NONE} for scripts written without spaces: {', '.join(unspaced)})" if unspaced else ""),
    ]
    if evaluation.pivot is not None:
        lines.append(f"parity: tokens on the same sentences over {evaluation.pivot}'s (1.00 is parity)")
    lines.append(
        "Gini: of the languages' token counts on the parallel sentences (0: the same in every language); "
        f"Renyi eff.: Renyi entropy (alpha {evaluation.renyi_alpha:g}) of the token frequencies over "
        "log |tokens used|; vocab used: share of the vocabulary the dev set uses"
    )
    return "\n".join(
        textwrap.fill(line, LEGEND_WIDTH, subsequent_indent="  ", break_on_hyphens=False) for line in lines
    )


def check_plot(path: str | os.PathLike) -> str:
    """The format of a plot to be written at `path` (its suffix, which matplotlib must write),
    after checking that it can be written there: not a directory, and in a directory (or under one
    to be made) this process can create files in. Refused in one line naming `plot`, before any
    work is done. Needs matplotlib (the [plot] extra)."""
    require_extra("plot", "a plot of the evaluation")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from bpe import storage
    from bpe.errors import SettingsError

    def refuse(why: str) -> SettingsError:
        return SettingsError(lambda s: f"{s.plot}: {path}: {why}", parameter="plot")

    remote = storage.is_remote(path)
    local = Path(storage.local_path(path)).absolute()
    if not remote and local.is_dir():
        raise refuse("is a directory")
    formats = FigureCanvasAgg.get_supported_filetypes()
    suffix = Path(str(path)).suffix.lower().removeprefix(".")
    if suffix not in formats:
        raise refuse(f"expected a file ending in a format matplotlib writes (.{', .'.join(sorted(formats))})")
    if remote:
        return suffix
    place = local.parent
    while not place.exists():
        place = place.parent
    if not place.is_dir():
        raise refuse(f"{place} is a file, not a directory")
    try:
        fd, probe = tempfile.mkstemp(prefix=".bpe-probe-", dir=place)
    except OSError as exc:
        raise refuse(f"cannot write in {place} ({exc.strerror})") from None
    os.close(fd)
    os.unlink(probe)
    return suffix


def plot(evaluation: Evaluation, path: Path) -> Path:
    """A figure at `path`, in the format of its suffix (`check_plot`): tokens per sentence (above)
    and bytes per token (below), a group of bars per language, one colour per tokenizer (its Gini
    in the legend). Written whole or not at all."""
    suffix = check_plot(path)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bpe import storage

    width = max(7.0, 0.55 * len(evaluation.codes) * max(1, len(evaluation.tokenizers)) ** 0.5 + 2)
    fig, axes = plt.subplots(2, 1, figsize=(width, 7))
    bars(axes[0], evaluation, "tokens_per_sentence", "tokens per sentence (lower is better)")
    bars(axes[1], evaluation, "bytes_per_token", "bytes per token (higher is better)")
    axes[0].legend(fontsize=8)
    pivot = f"; parity against {evaluation.pivot}" if evaluation.pivot else ""
    axes[0].set_title(
        f"{len(evaluation.codes)} languages, {evaluation.dev['sentences']:,} parallel sentences each{pivot}",
        fontsize=10,
    )
    fig.tight_layout()
    try:
        storage.write_file(str(path), lambda tmp: fig.savefig(tmp, format=suffix))
    except OSError as exc:  # named as given, never by the temporary file written first
        raise OutputError(f"{path}: cannot write the plot ({exc.strerror or exc})") from None
    finally:
        plt.close(fig)
    return path


def bars(ax, evaluation: Evaluation, figure: str, ylabel: str) -> None:
    """On matplotlib axes `ax`: a group of bars per language (in code order) of one per-language
    `figure` (a field of `LanguageFigures`), a colour per tokenizer, labelled with its Gini."""
    codes, tokenizers = evaluation.codes, evaluation.tokenizers
    width = 0.8 / len(tokenizers)
    for i, t in enumerate(tokenizers):
        xs = [k + (i - (len(tokenizers) - 1) / 2) * width for k in range(len(codes))]
        ys = [getattr(t.languages[code], figure) or 0.0 for code in codes]
        label = t.name + (f" (Gini {t.gini:.3f})" if t.gini is not None else "")
        ax.bar(xs, ys, width, label=label, color=f"C{i % 10}")
    ax.set_xticks(range(len(codes)), codes, fontsize=8)
    ax.set_ylabel(ylabel, fontsize=9)
    ax.grid(True, axis="y", alpha=0.3)

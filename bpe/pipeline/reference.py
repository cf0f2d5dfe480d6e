"""The settings reference of the documentation, rendered from the schema: a Markdown table per
group of every setting, as `train()`, `bpe train`, a configuration and the flow spell it.

    from bpe.pipeline.reference import settings_reference
    markdown = settings_reference()

It lives in the pipeline tier because it shows the pipeline's own keys too (`bpe.pipeline.config`);
it imports neither Prefect nor pydantic.
"""

from __future__ import annotations

from bpe.pipeline.config import CONFIG_SETTINGS, SECTIONS
from bpe.schema import GROUPS, SETTINGS, On, Setting, grouped

NOWRAP = ".nowrap"  # an attribute list (the attr_list extension): the class of code that never wraps
# The first column stacks a setting's three spellings, one a line, in the order its heading names them:
# one narrow column where three would leave the description too little width (or cut the names).
SPELLINGS = ("`train()` parameter", "`bpe train` flag", "YAML key")
COLUMNS = ("<br>".join(SPELLINGS), "type", "default", "description", "changes merges?")


def settings_reference(heading_level: int = 2) -> str:
    """The reference page's body: an introduction, then per group a heading and a table."""
    every = {setting.name: setting for setting in (*SETTINGS, *CONFIG_SETTINGS)}
    lines = [
        "Every setting, as each surface spells it, one a line in the first column: a parameter of `bpe.train`, "
        "a flag of `bpe train`, a key of a pipeline configuration (`conf/<name>.yaml`; *flow* marks the keys a "
        "run of the train-bpe flow can override, as `settings.<key>` or `-p <key>=...`). Generated from "
        "`bpe.schema`; \u2014 means the setting is not there.",
        "",
    ]
    for group, settings in grouped(list(every.values())).items():
        lines += [f"{'#' * heading_level} {group.capitalize()}", "", f"{_sentence(GROUPS[group])}.", ""]
        lines += ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        lines += ["| " + " | ".join(_cell(text) for text in row(setting, every)) + " |" for setting in settings]
        lines.append("")
    return "\n".join(lines)


def row(setting: Setting, every: dict[str, Setting]) -> tuple[str, ...]:
    """A setting's cells, in the order of COLUMNS (`every`: all settings by name, which its
    description may name)."""
    flags = ", ".join(name(flag) for flag in setting.flags.values()) if On.CLI in setting.on else "\u2014"
    key = "\u2014"
    if setting.key:
        section = " (a section, with the keys below)" if setting.key in SECTIONS else ""
        key = name(setting.key) + section + (" (flow)" if On.FLOW in setting.on else "")
    python = name(setting.name) if On.TRAIN in setting.on else "\u2014"
    return (
        "<br>".join((python, flags, key)),
        " or ".join(name(kind) for kind in _type(setting).split(" | ")),
        _text(_default(setting)),
        _text(setting.doc_spelt(lambda other: name(spelling(every.get(other), other)))),
        "yes" if setting.merges else "no",
    )


def spelling(setting: Setting | None, fallback: str) -> str:
    """How the table shows a setting a description names: its `train()` parameter, or its key."""
    if setting is None or On.TRAIN in setting.on or not setting.key:
        return fallback
    return setting.key


def name(text: str) -> str:
    """`text` as code that a table cell never breaks (class `nowrap`, docs/stylesheets/extra.css):
    a setting's name, flag, key or type, which a narrow column would otherwise cut mid-word."""
    return f"`{text}`{{ {NOWRAP} }}"


def _type(setting: Setting) -> str:
    kind = getattr(setting.type, "__name__", None) if not hasattr(setting.type, "__args__") else None
    return str(kind or setting.type)


def _default(setting: Setting) -> str:
    if setting.required:
        python = f"`{setting.default!r}`" if setting.default is not None else f"unset: {setting.none}"
        return f"required on the command line and in a configuration; `train()`: {python}"
    if setting.default is None:
        return f"unset: {setting.none}"
    if isinstance(setting.default, tuple):
        return "none"
    return f"`{setting.default!r}`"


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _text(markdown: str) -> str:
    """`markdown` with `<` and `>` outside its code spans escaped: `<code>.txt` and
    `<artifact_root>` are words to show, not HTML tags."""
    parts = markdown.split("`")
    parts[::2] = [part.replace("<", "&lt;").replace(">", "&gt;") for part in parts[::2]]
    return "`".join(parts)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")

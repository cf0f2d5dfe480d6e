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

COLUMNS = ("setting", "Python parameter", "CLI flag", "YAML key", "type", "default", "description", "changes merges?")


def settings_reference(heading_level: int = 2) -> str:
    """The reference page's body: an introduction, then per group a heading and a table."""
    every = {setting.name: setting for setting in (*SETTINGS, *CONFIG_SETTINGS)}.values()
    lines = [
        "Every setting, as each surface spells it: a parameter of `bpe.train`, a flag of `bpe train`, a key of a "
        "pipeline configuration (`conf/<name>.yaml`; *flow* marks the keys a run of the train-bpe flow can "
        "override, as `settings.<key>` or `-p <key>=...`). Generated from `bpe.schema`; \u2014 means the setting "
        "is not there.",
        "",
    ]
    for group, settings in grouped(list(every)).items():
        lines += [f"{'#' * heading_level} {group.capitalize()}", "", f"{_sentence(GROUPS[group])}.", ""]
        lines += ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        lines += ["| " + " | ".join(_cell(text) for text in row(setting)) + " |" for setting in settings]
        lines.append("")
    return "\n".join(lines)


def row(setting: Setting) -> tuple[str, ...]:
    """A setting's cells, in the order of COLUMNS."""
    flags = ", ".join(f"`{flag}`" for flag in setting.flags.values()) if On.CLI in setting.on else "\u2014"
    key = "\u2014"
    if setting.key:
        section = " (a section, with the keys below)" if setting.key in SECTIONS else ""
        key = f"`{setting.key}`{section}" + (" (flow)" if On.FLOW in setting.on else "")
    return (
        setting.name,
        f"`{setting.name}`" if On.TRAIN in setting.on else "\u2014",
        flags,
        key,
        _type(setting),
        _default(setting),
        setting.doc_spelt(lambda name: f"`{name}`"),
        "yes" if setting.merges else "no",
    )


def _type(setting: Setting) -> str:
    kind = getattr(setting.type, "__name__", None) if not hasattr(setting.type, "__args__") else None
    return f"`{kind or setting.type}`"


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


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")

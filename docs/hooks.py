"""MkDocs hooks: the pages that are generated from the code at build time, so that they cannot
drift from it. A page holds a marker comment where the generated Markdown goes:

- `<!-- cli reference: generated -->`: a table of contents linking every `bpe` command, then each
  command's `--help`, from `bpe.cli.build_parser()`;
- `<!-- settings reference: generated -->`: every setting as each surface spells it, from the
  settings schema (`bpe.schema`, rendered by `bpe.pipeline.reference.settings_reference`).

`DoctestFences` (a griffe extension, named in mkdocs.yml) shows the docstrings' doctests as code.
"""

from __future__ import annotations

import os
import re

import griffe

CLI_MARKER = "<!-- cli reference: generated -->"
SETTINGS_MARKER = "<!-- settings reference: generated -->"
HELP_WIDTH = "82"  # help is wrapped to the terminal's width: on the pages, to what their code blocks show


def on_page_markdown(markdown: str, page, config, files) -> str:
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_markdown())
    if SETTINGS_MARKER in markdown:
        markdown = markdown.replace(SETTINGS_MARKER, settings_markdown())
    return markdown


def cli_markdown() -> str:
    """A table of contents linking every command, then a section per command, `bpe` first (under the
    page's title), each holding the command's `--help` as printed."""
    from bpe.cli import build_parser, commands

    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_WIDTH
    try:
        every = list(commands(build_parser()))
        helps = {name: help for prog, parser in every for name, help in summaries(parser, prog).items()}
        contents, parts = ["Commands:", ""], []
        for prog, parser in every:
            depth = prog.count(" ")
            summary = f": {helps[prog]}" if helps.get(prog) else ""
            contents.append(f"{'    ' * depth}- [`{prog}`](#{anchor(prog)}){summary}")
            heading = f"{'#' * (depth + 2)} `{prog}` {{ #{anchor(prog)} }}"  # under the page's title
            parts += [heading, "", "```text", parser.format_help().rstrip(), "```", ""]
        return "\n".join([*contents, "", *parts])
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before


def summaries(parser, prog: str) -> dict[str, str]:
    """The one-line help of each command directly under `parser` (`prog`), by its full name: as
    `bpe --help` lists it in its groups (`bpe.cli.help.Commands.listed`), or as argparse does."""
    import argparse

    lines = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            listed = [(name, help) for _, name, help in getattr(action, "listed", [])]
            for name, help in listed + [(choice.dest, choice.help) for choice in action._choices_actions]:
                lines[f"{prog} {name}"] = help
    return lines


def anchor(prog: str) -> str:
    """A command's section id: `bpe cluster up` -> `bpe-cluster-up`."""
    return prog.replace(" ", "-")


def settings_markdown() -> str:
    from bpe.pipeline.reference import settings_reference

    return settings_reference()


class DoctestFences(griffe.Extension):
    """The docstrings' examples are doctests (`>>>` lines and their output, up to a blank line, as
    pytest runs them): fenced as Python sessions, which Markdown would otherwise read as quotes."""

    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = fence_doctests(obj.docstring.value)


class SchemaDefaults(griffe.Extension):
    """`train()` takes its defaults from the schema (`vocab_size: int = DEFAULT["vocab_size"]`),
    declared there once: the API reference shows their values (`= 32768`), as `help()` does."""

    def on_function_instance(self, *, func: griffe.Function, **kwargs) -> None:
        from bpe.schema import DEFAULT

        for parameter in func.parameters:
            match = re.fullmatch(r"""DEFAULT\[\s*["'](\w+)["']\s*\]""", str(parameter.default or ""))
            if match and match.group(1) in DEFAULT:
                parameter.default = repr(DEFAULT[match.group(1)])


def fence_doctests(text: str) -> str:
    """Each run of doctest lines in `text` (a docstring), from its first `>>>` to a blank line, fenced
    as a `pycon` block at its own indentation."""
    out, in_doctest = [], False
    for line in text.splitlines():
        if not in_doctest and line.lstrip().startswith(">>>"):
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}```pycon")
            in_doctest = True
        elif in_doctest and not line.strip():
            out.append(f"{indent}```")
            in_doctest = False
        out.append(line)
    if in_doctest:
        out.append(f"{indent}```")
    return "\n".join(out)

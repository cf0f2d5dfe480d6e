"""How `bpe --help` and every command's `--help` read: the commands in groups (tokenizers first),
and each command with a description of what it does and examples to copy.

A subcommand is added with `sub.add_parser(name, help=..., group=..., description=..., examples=...)`
(the pipeline tier's commands too, through the `bpe.commands` entry point): `help` is its line in
`bpe --help`, under its `group`; `description` and `examples` make its own `--help`.
"""

from __future__ import annotations

import argparse
import shutil
import textwrap

# The groups of `bpe --help`, in order. A command registered without a group is listed under "other".
GROUPS = {
    "tokenizers": "tokenizers",
    "pipeline": "pipeline (the [pipeline] extra: Prefect flows, numbered versions)",
    "cluster": "cluster (the [pipeline] extra)",
    "other": "other",
}
EXAMPLES = (
    ("bpe train data/ --vocab-size 32768 --out tok/", "train on every file in data/"),
    ("echo 'Hello world' | bpe encode tok/", "the token ids of a text"),
)
WIDTH = 100  # the widest a help page is wrapped to, whatever the terminal


class HelpText(argparse.HelpFormatter):
    """Help whose description and epilog keep their layout: a paragraph of plain lines is filled to
    the terminal's width (at most WIDTH), one that is a list (a heading ending in ":", indented
    lines: columns, commands, examples) stays as written."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=min(shutil.get_terminal_size().columns, WIDTH) - 2)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = []
        for paragraph in textwrap.dedent(text).strip().split("\n\n"):
            lines = paragraph.splitlines()
            if lines[0].endswith(":") or any(line.startswith(" ") for line in lines):
                paragraphs.append("\n".join(indent + line for line in lines))
            else:
                filled = textwrap.fill(" ".join(lines), width, initial_indent=indent, subsequent_indent=indent)
                paragraphs.append(filled)
        return "\n\n".join(paragraphs)


class Commands(argparse._SubParsersAction):
    """The subparsers action of `bpe`: remembers each command's group and one-line help for the
    grouped list, and gives each command's parser a verbatim description and an examples epilog.
    With `group=None` (a nested command, as `bpe cluster up`) the command is listed by argparse, as
    usual, in its parent's help."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.listed: list[tuple[str, str, str]] = []  # (group, name, one-line help)

    def add_parser(
        self,
        name: str,
        *,
        help: str,
        group: str | None = "other",
        description: str | None = None,
        examples: list[str] | tuple[str, ...] = (),
        **kwargs,
    ) -> argparse.ArgumentParser:
        kwargs["description"] = description or help
        if examples:
            kwargs["epilog"] = "examples:\n" + "\n".join(f"  {line}" for line in examples)
        kwargs.setdefault("formatter_class", HelpText)
        if group is None:
            return super().add_parser(name, help=help, **kwargs)
        self.listed.append((group if group in GROUPS else "other", name, help))
        return super().add_parser(name, **kwargs)  # no help=: `bpe --help` lists it in its group


def command_list(commands: Commands) -> str:
    """`bpe --help`'s list of commands, group by group, each with its one line of help."""
    width = min(shutil.get_terminal_size().columns, WIDTH) - 2
    column = max(len(name) for _, name, _ in commands.listed) + 4
    lines = []
    for group, title in GROUPS.items():
        members = [(name, help) for g, name, help in commands.listed if g == group]
        if not members:
            continue
        lines += ["", f"{title}:"]
        for name, help in members:
            lines += textwrap.wrap(
                help,
                width,
                initial_indent=f"  {name:<{column - 2}}",
                subsequent_indent=" " * column,
            )
    return "\n".join(lines)


def examples_epilog() -> str:
    column = max(len(command) for command, _ in EXAMPLES) + 4
    lines = ["examples:"] + [f"  {command:<{column - 2}}{what}" for command, what in EXAMPLES]
    lines += ["", "Each command's --help explains it, with examples. The documentation is docs/ in the repository."]
    return "\n".join(lines)

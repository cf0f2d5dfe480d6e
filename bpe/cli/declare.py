"""Subcommands of `bpe` declared as data: a `Command` holds what its help says and what it takes,
and `add_command` makes its parser, so that each tier lists its commands as a table and commands
share the arguments they have in common (a store, --yes, --threads) rather than repeat them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


class Argument:
    """One `add_argument` call, kept to be made on a command's parser later: several commands can
    take the same one."""

    def __init__(self, *flags: str, **options: Any) -> None:
        self.flags = flags
        self.options = options

    def add_to(self, parser: argparse.ArgumentParser | argparse._ActionsContainer) -> None:
        parser.add_argument(*self.flags, **self.options)


class OneOf:
    """Arguments of which a command takes one at most (argparse's mutually exclusive group)."""

    def __init__(self, *arguments: Argument) -> None:
        self.arguments = arguments

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        group = parser.add_mutually_exclusive_group()
        for argument in self.arguments:
            argument.add_to(group)


# Arguments that several commands of the core take.
THREADS = Argument("--threads", type=int, default=None, help="encoding threads (default: the cores available)")


@dataclass(frozen=True)
class Command:
    """A subcommand: `help` is its line in `bpe --help`, `description` and `examples` its own
    --help (`bpe.cli.help.Commands.add_parser`); `run(args)` runs it (None: a subcommand under it
    is run by its parent's); `arguments` in the order its --help lists them."""

    name: str
    help: str
    run: Callable[[argparse.Namespace], int] | None = None
    description: str | None = None
    examples: Sequence[str] = ()
    arguments: Sequence[Argument | OneOf] = ()
    usage: str | None = None


def add_command(
    sub: argparse._SubParsersAction, command: Command, group: str | None = "other"
) -> argparse.ArgumentParser:
    """Add `command` to the subparsers `sub` (of `bpe`, or of a command), listed under `group` in
    `bpe --help` (None: listed by argparse in its parent's help); returns its parser."""
    parser = sub.add_parser(
        command.name,
        group=group,
        help=command.help,
        description=command.description,
        examples=command.examples,
        usage=command.usage,
    )
    for argument in command.arguments:
        argument.add_to(parser)
    if command.run is not None:
        parser.set_defaults(run=command.run)
    return parser

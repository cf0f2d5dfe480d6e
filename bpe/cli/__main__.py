"""`python -m bpe.cli`: the `bpe` command."""

from bpe.cli import run

run()

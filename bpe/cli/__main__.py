"""`python -m bpe.cli`: the `bpe` command."""

import sys

from bpe.cli import main

sys.exit(main())

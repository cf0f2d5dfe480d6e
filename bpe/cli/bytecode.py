"""This package's bytecode, written once where Python was told not to write any.

Python compiles a module's source at import and keeps the result in `__pycache__` beside it,
unless PYTHONDONTWRITEBYTECODE (or `python -B`) says not to, as many images and CI machines do.
There, every `bpe` process compiled the modules it imports from source as it started (75 for a
`bpe train`, 0.14 s of a profile in `compile()`): with the bytecode, a 1 KB `bpe train` takes
0.84x the time. The `bpe` command writes it after its first run there (`write_bytecode`), and
`bpe warm` does too; later processes load it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # bpe/


def bytecode_missing() -> bool:
    """Whether processes would compile this package from source as they start: Python writes no
    bytecode here, and none has been written for the package."""
    first = importlib.util.cache_from_source(str(PACKAGE_DIR / "__init__.py"))
    return sys.dont_write_bytecode and not Path(first).exists()


def write_bytecode() -> None:
    """Write the bytecode of this package's modules whose bytecode is missing or older than their
    source, where Python keeps it. A package that cannot be written to (a read-only install) is
    left as it is after one module tried: its processes compile as they start, as before, and no
    run spends half a second compiling what it cannot keep."""
    import compileall
    import py_compile

    try:
        py_compile.compile(str(PACKAGE_DIR / "__init__.py"), doraise=True)
    except (OSError, py_compile.PyCompileError):
        return
    with contextlib.suppress(OSError):
        compileall.compile_dir(str(PACKAGE_DIR), quiet=2)

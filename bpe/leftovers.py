"""Temporaries that a killed process (kill -9, a lost machine) could not clean up, swept by the
next run: each carries its owner's process id in its name (or its content), and is removed once
that process is gone.

>>> temporary_prefix(".tok.tmp-").startswith(f".tok.tmp-{os.getpid()}-")
True
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path


def temporary_prefix(prefix: str) -> str:
    """The name prefix of a temporary this process owns: `prefix` + pid + '-'."""
    return f"{prefix}{os.getpid()}-"


def process_is_gone(pid: int) -> bool:
    """Whether no process `pid` runs on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # it runs, as another user
        return False
    return False


def sweep(directory: str | Path, prefix: str) -> list[Path]:
    """Remove the entries of `directory` named `prefix<pid>-...` whose process is gone; returns them."""
    owned_by = re.compile(re.escape(prefix) + r"(\d+)-")
    removed = []
    try:
        entries = list(Path(directory).iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = owned_by.match(entry.name)
        if match and int(match.group(1)) != os.getpid() and process_is_gone(int(match.group(1))):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            removed.append(entry)
    return removed

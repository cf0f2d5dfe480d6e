"""This installation as a new shell sees it: the command that runs this `bpe`, and the command that
adds an extra to it. Both are printed for the user to copy, so both must work as printed: the
environment `bpe` is installed in need not be on the shell's PATH (the Quick start's `.venv/` is
not), and no package index knows `bpe-trainer`.
"""

from __future__ import annotations

import os
import shlex
import sys

PACKAGE = "bpe-trainer"


def shown(path: str) -> str:
    """`path` as a command line gives it: relative when under this directory (`.venv/bin/bpe`),
    else absolute.

    >>> shown(os.path.join(os.getcwd(), "x", "bpe")), shown("/"), shown(os.getcwd())
    ('x/bpe', '/', '.')
    """
    path = os.path.abspath(path)
    relative = os.path.relpath(path)
    if relative.startswith(os.pardir):
        return path
    return relative


def this_bpe() -> str:
    """The command that runs the `bpe` that is running: its script's path, or the interpreter with
    `-m bpe.cli` when this is not the `bpe` script."""
    script = sys.argv[0] if sys.argv else ""
    if os.path.basename(script) == "bpe" and os.path.isfile(script):
        path, rest = shown(script), []
    else:
        path, rest = shown(sys.executable), ["-m", "bpe.cli"]
    if os.sep not in path:  # `bpe` in this directory, not the one on the PATH
        path = os.path.join(os.curdir, path)
    return shlex.join([path, *rest])


def install_extra(extra: str) -> str:
    """The command that installs `extra` into this environment: from the source checkout an
    editable install was made from, `pip install -e '<checkout>[extra]'`; else `pip install
    'bpe-trainer[extra]'`, which adds the extra's packages to the installed bpe-trainer."""
    import shutil

    pip = os.path.join(os.path.dirname(sys.executable), "pip")
    if not os.path.isfile(pip):
        command = [shown(sys.executable), "-m", "pip"]
    elif (found := shutil.which("pip")) is not None and os.path.samefile(found, pip):
        command = ["pip"]
    else:
        command = [shown(pip)]
    checkout = editable_checkout()
    if checkout is None:
        return shlex.join([*command, "install", f"{PACKAGE}[{extra}]"])
    return shlex.join([*command, "install", "-e", f"{shown(checkout)}[{extra}]"])


def editable_checkout() -> str | None:
    """The source directory this package is an editable install of, as the installer recorded it
    (direct_url.json), or None: installed from an index, a wheel or a copied directory. The first
    installed distribution counts (one with a RECORD: the checkout's own bpe_trainer.egg-info,
    which Python finds first from inside the checkout, is not one)."""
    import json
    from importlib.metadata import distributions
    from urllib.parse import unquote, urlparse

    for found in distributions(name=PACKAGE):
        if found.read_text("RECORD") is None:
            continue
        origin = json.loads(found.read_text("direct_url.json") or "{}")
        url = urlparse(origin.get("url", ""))
        if url.scheme == "file" and origin.get("dir_info", {}).get("editable"):
            return unquote(url.path)
        return None
    return None

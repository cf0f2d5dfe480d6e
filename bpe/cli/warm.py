"""`bpe warm`: compile the kernels ahead of time, a group per process, and the package's bytecode."""

from __future__ import annotations

import argparse
import sys


def run_warm(args: argparse.Namespace) -> int:
    """Compile the kernel groups the cache lacks (every group, or those named) and say what each
    took; write the package's bytecode where it is missing or stale (`write_bytecode`)."""
    from bpe.cli.bytecode import write_bytecode
    from bpe.errors import SettingsError
    from bpe.training.warm import GROUPS, cache_dir, compile_ahead, missing

    names = list(args.groups) or list(GROUPS)
    unknown = [name for name in names if name not in GROUPS]
    if unknown:
        raise SettingsError(f"GROUP: unknown kernel group {unknown[0]!r} (known: {', '.join(GROUPS)})")
    if args.list:
        lacking = set(missing(names))
        for name in names:
            print(f"{name}\t{'not compiled' if name in lacking else 'compiled'}")
        return 0
    write_bytecode()
    compiled = compile_ahead(names, say=lambda line: print(f"bpe: {line}", file=sys.stderr, flush=True))
    if compiled.groups:
        each = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in compiled.groups.items())
        print(
            f"compiled {len(compiled.groups)} kernel group(s) in {compiled.seconds:.1f} s on {compiled.processes} "
            f"process(es) ({each}); cache: {cache_dir()}"
        )
    else:
        print(f"kernels already compiled ({len(names)} group(s)); cache: {cache_dir()}")
    return 0

"""The demo corpus: English prose every Python installation carries, the standard library's docstrings.

`write_demo_corpus(dir)` writes them as Parquet shards (one string column `text`, one row per
paragraph), the same shape as a real corpus, so the demo exercises the real path end to end.
"""

from __future__ import annotations

import ast
import sysconfig
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

SKIPPED_PACKAGES = {"test", "tests", "idlelib", "site-packages", "lib2to3", "turtledemo", "dist-packages"}


def stdlib_paragraphs() -> list[str]:
    """Docstring paragraphs of the standard library's modules, classes and functions, in file order."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(lib.glob("*.py")) + sorted(p for p in lib.glob("*/*.py") if p.parts[-2] not in SKIPPED_PACKAGES)
    paragraphs: list[str] = []
    for path in files:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    paragraphs.extend(p.strip() for p in doc.split("\n\n") if p.strip())
    return paragraphs


def write_demo_corpus(directory: str | Path, shards: int = 4) -> list[Path]:
    """Write the demo corpus as `shards` Parquet files in `directory` (kept if already there)."""
    directory = Path(directory)
    paths = [directory / f"part-{i:05d}.parquet" for i in range(shards)]
    if all(p.exists() for p in paths):
        return paths
    directory.mkdir(parents=True, exist_ok=True)
    paragraphs = stdlib_paragraphs()
    for i, path in enumerate(paths):
        rows = paragraphs[i::shards]
        tmp = path.with_suffix(".parquet.tmp")
        pq.write_table(pa.table({"text": pa.array(rows, pa.string())}), tmp)
        tmp.rename(path)
    return paths

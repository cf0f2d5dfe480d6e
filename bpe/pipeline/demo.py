"""`bpe demo`'s parts below the flow: its corpus, its answer when nothing changed, its terminal.

The corpus is English prose every Python installation carries, the standard library's docstrings:
`write_demo_corpus(dir)` writes them as Parquet shards (one string column `text`, one row per
paragraph), the same shape as a real corpus, so the demo exercises the real path end to end.
`unchanged_demo` answers a run again on the same data without Prefect (whose temporary server takes
seconds to start); `FlowLinesOnly` keeps Prefect's own INFO lines, and the tracebacks of a failed run,
off the terminal.
"""

from __future__ import annotations

import ast
import logging
import sysconfig
from collections.abc import Callable
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
        for node in _statements_breadth_first(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    paragraphs.extend(p.strip() for p in doc.split("\n\n") if p.strip())
    return paragraphs


def _statements_breadth_first(tree: ast.Module):
    """The statements of `tree` in `ast.walk`'s order (breadth first), without the expressions,
    which hold no docstring: a third of the time of walking every node."""
    level: list[ast.AST] = [tree]
    while level:
        yield from level
        level = [
            child
            for node in level
            for field in ("body", "handlers", "orelse", "finalbody", "cases")
            for child in getattr(node, field, None) or ()
            if isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case))
        ]


def demo_corpus_written(directory: str | Path, shards: int = 4) -> bool:
    """Whether `directory` holds the demo corpus's shards already."""
    return all(path.exists() for path in _shard_paths(Path(directory), shards))


def _shard_paths(directory: Path, shards: int) -> list[Path]:
    return [directory / f"part-{i:05d}.parquet" for i in range(shards)]


def write_demo_corpus(directory: str | Path, shards: int = 4) -> list[Path]:
    """Write the demo corpus as `shards` Parquet files in `directory` (kept if already there)."""
    directory = Path(directory)
    paths = _shard_paths(directory, shards)
    if demo_corpus_written(directory, shards):
        return paths
    directory.mkdir(parents=True, exist_ok=True)
    paragraphs = stdlib_paragraphs()
    for i, path in enumerate(paths):
        rows = paragraphs[i::shards]
        tmp = path.with_suffix(".parquet.tmp")
        pq.write_table(pa.table({"text": pa.array(rows, pa.string())}), tmp)
        tmp.rename(path)
    return paths


def unchanged_demo(config: str | Path, overrides: dict, warn: Callable[[str], None] = print) -> tuple[str, str] | None:
    """The version a demo run of the train-bpe flow would answer "no new data since" with, and its
    location, found as the flow finds it but without Prefect: the flow's own change check
    (`unchanged_since`) on the same configuration, `overrides` (the flow's parameters) and shards;
    then the count cache entries recorded in use and `latest` settled as that flow run would
    (the demo promotes). None when the flow has work to do, and when the configuration extends a
    base tokenizer (whose content is the flow's to check)."""
    from bpe.inputs.discover import discover
    from bpe.pipeline.config import load_config
    from bpe.pipeline.retention import record_counts_in_use
    from bpe.pipeline.store import VersionStore
    from bpe.pipeline.version import settle_latest, unchanged_since
    from bpe.training.trainer import data_fingerprint

    cfg = load_config(config, overrides)
    if cfg.base:
        return None
    shards = [{**shard.fingerprint(), "kind": shard.kind} for shard in discover(cfg.data)]  # as discover_shards
    store = VersionStore(cfg.artifact_root, cfg.name)
    version = unchanged_since(store, data_fingerprint(shards), cfg)
    if version is None:
        return None
    record_counts_in_use(cfg, shards, cfg.settings(), warn)
    settle_latest(store, version, promote=True, by="bpe demo")
    return version, store.location(version)


class FlowLinesOnly(logging.Filter):
    """For the terminal's log handler: the flow's and tasks' own lines (progress, results) at every
    level, Prefect's own (a run beginning, each task's final state, the temporary server starting
    and stopping) only from WARNING up, and never those of a failure: the exception a run or task
    failed with, with its traceback (20 to 100 lines), or a run's final state. The run's logs keep
    them; the command says the error itself, in one line. Nor Prefect's note, as the process ends,
    that it is still sending the run's logs or events to the server (it sends them). Records are
    told apart by the file that logged them."""

    def __init__(self) -> None:
        super().__init__()
        import prefect

        self.prefect_dir = str(Path(prefect.__file__).resolve().parent)

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.pathname.startswith(self.prefect_dir):
            return True
        said = record.getMessage()
        failure = bool(record.exc_info) or said.startswith("Finished in state")
        return record.levelno >= logging.WARNING and not failure and not said.startswith("Still processing items")


def quiet_prefect_console() -> None:
    """Put `FlowLinesOnly` on Prefect's terminal handlers (not on the one that sends the logs to the
    Prefect API: a flow run's logs there stay whole). Call after importing Prefect."""
    from prefect.logging.handlers import PrefectConsoleHandler

    loggers = [logging.root, *(x for x in logging.root.manager.loggerDict.values() if isinstance(x, logging.Logger))]
    for handler in {h for logger in loggers for h in logger.handlers if isinstance(h, PrefectConsoleHandler)}:
        if not any(isinstance(f, FlowLinesOnly) for f in handler.filters):
            handler.addFilter(FlowLinesOnly())

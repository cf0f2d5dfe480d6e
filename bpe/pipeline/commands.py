"""The pipeline's subcommands of `bpe` (versions, promote, rollback, history, prune, prune-cache,
cluster up|env|status|down), registered through the `bpe.commands` entry point: `register` adds
their parsers; each imports what it runs only when run, behind `require_extra`. Those that run the
flow (demo, deploy) are the flows' own (`bpe.flows.commands`).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from bpe.cli.declare import Argument, Command, add_command
from bpe.errors import require_extra

STATE_DIR = Path(".bpe-cluster")  # bpe cluster's default --state-dir


# What each column of `bpe versions` says (its --help), in the order it prints them.
VERSIONS_COLUMNS = (
    ("version", "the version's number: v0001, v0002, ... (its directory under the store)"),
    ("created", "when it was published (UTC)"),
    ("channel", "main (trained with the configuration's own settings) or experiment (parameters changed one)"),
    ("vocabulary", "its tokens in all: bytes, merges and special tokens"),
    ("shards", "the input files it was trained on"),
    ("data", "their size"),
    ("bytes/token", "compression on the tokenizer's fixed evaluation set (held-out rows, never trained on)"),
    (
        "change vs promoted",
        "bytes/token minus that of the version that was latest when it was published (after a rollback, the one "
        "rolled back to); '-' and why, where the two cannot be compared (another vocabulary size or evaluation set, "
        "or it was pruned)",
    ),
)
VERSIONS_MARKS = "(latest) where `latest` points, (promoted) once latest, (rollback target) where `bpe rollback` goes"


def _versions_description() -> str:
    import textwrap

    width = max(len(name) for name, _ in VERSIONS_COLUMNS) + 4
    rows = [
        line
        for name, meaning in VERSIONS_COLUMNS
        for line in textwrap.wrap(meaning, 78, initial_indent=f"  {name:<{width - 2}}", subsequent_indent=" " * width)
    ]
    intro = "List the versions of a tokenizer in an artifact store, oldest first."
    return "\n".join([intro, "", "columns:", *rows, "", f"After them: {VERSIONS_MARKS}."])


def open_store(text: str, command: str):
    """The VersionStore a command names as <artifact root>/<tokenizer name>; a mistyped store is
    an error, not an empty store."""
    require_extra("pipeline", f"bpe {command}")
    from bpe.errors import InputError
    from bpe.pipeline.store import VersionStore

    root, sep, name = text.rstrip("/").rpartition("/")
    store = VersionStore(root or (sep or "."), name)  # "/demo" lives in "/", "demo" in "."
    if not store.fs.isdir(store.base):
        what = "is not a directory" if store.fs.exists(store.base) else "no such artifact store"
        raise InputError(f"{text}: {what} (expected <artifact root>/<tokenizer name>)")
    return store


def run_versions(args: argparse.Namespace) -> int:
    from bpe.pipeline.store import describe_versions

    store = open_store(args.store, "versions")
    rows = describe_versions(store)
    if not rows:
        print(f"{args.store}: no versions")
        return 0
    version, created, channel, vocabulary, shards, data, bpt, change = (name for name, _ in VERSIONS_COLUMNS)
    print(f"{version:<9} {created:<26} {channel:<10} {vocabulary:>10} {shards:>6} {data:>10} {bpt:>11}  {change:<18}")
    for r in rows:
        data = f"{r['data_bytes'] / 1e6:,.1f} MB" if r["data_bytes"] else ""
        bpt = f"{r['bytes_per_token']:.3f}" if r["bytes_per_token"] else ""
        change = f"{r['change']:+.4f} vs {r['previous_promoted']}" if r["change"] is not None else ""
        if r.get("incomparable"):  # nothing to compare with: say why rather than compare unlike figures
            change = f"- vs {r['previous_promoted']} ({r['incomparable']})"
        marks = [
            m
            for m, on in (
                ("latest", r["latest"]),
                ("promoted", r["promoted"] and not r["latest"]),
                ("rollback target", r["rollback_target"]),
            )
            if on
        ]
        line = (
            f"{r['version']:<9} {r['created']:<26} {r['channel']:<10} {r['vocab_size'] or 0:>10,} {r['shards']:>6} "
            f"{data:>10} {bpt:>11}  {change:<18}" + (f"  ({', '.join(marks)})" if marks else "")
        )
        print(line.rstrip())
    return 0


def _version_name(text: str) -> str:
    """`v0003`, `v3` or `3` -> `v0003`; anything else as given (the store refuses it in one line)."""
    import re

    match = re.fullmatch(r"v?(\d+)", text.strip())
    return f"v{int(match.group(1)):04d}" if match else text


def run_promote(args: argparse.Namespace) -> int:
    """Move `latest` to a version, backwards too; recorded in the store's history."""
    store = open_store(args.store, "promote")
    version = _version_name(args.version)
    before, after = store.promote(version)
    if before == after:
        print(f"{args.store}: {after} is already latest; nothing changed")
    else:
        print(
            f"{args.store}: latest {before or '(none)'} -> {after} (promoted; recorded in "
            f"{args.store.rstrip('/')}/history.jsonl)"
        )
    return 0


def run_rollback(args: argparse.Namespace) -> int:
    """Move `latest` back to the version promoted before the current one."""
    store = open_store(args.store, "rollback")
    before, after = store.rollback()
    print(f"{args.store}: latest {before} -> {after} (rolled back; recorded in {args.store.rstrip('/')}/history.jsonl)")
    return 0


def run_history(args: argparse.Namespace) -> int:
    """Print the store's history, oldest first: when, what, which version, and where `latest` went."""
    store = open_store(args.store, "history")
    events = store.history()
    if not events:
        print(f"{args.store}: no history yet (versions published before it have none)")
        return 0
    print(f"{'time':<21} {'action':<9} {'version':<8} {'latest':<16} {'by'}")
    for e in events:
        before, after = e.get("latest_before"), e.get("latest_after")
        moved = f"{before or '-'} -> {after}" if before != after else f"{after or '-'} (stays)"
        what = e.get("action", "?") + (f" ({e['channel']})" if e.get("action") == "publish" and "channel" in e else "")
        print(
            f"{e.get('time', ''):<21} {e.get('action', '?'):<9} {e.get('version', ''):<8} {moved:<16} "
            f"{e.get('by', '')}" + (f"  [{what}]" if what != e.get("action") else "")
        )
    return 0


def run_prune(args: argparse.Namespace) -> int:
    """List (or, with --yes, remove) the versions beyond the newest --keep, never the protected ones."""
    from bpe.pipeline.retention import prune_versions

    store = open_store(args.store, "prune")
    plan = prune_versions(store, args.keep, apply=args.yes)
    for swept in plan.swept:  # what earlier prunes left, retried first
        if not swept.left:
            print(f"deleted what an earlier prune of {swept.version} left in {swept.location}")
    print(f"{args.store}: {len(plan.keep) + len(plan.remove)} version(s); keeping {len(plan.keep)}:")
    for version, why in plan.keep.items():
        print(f"  {version}  {why}")
    if not plan.remove:
        print("nothing to remove")
    elif not args.yes:
        print(f"would remove {len(plan.remove)} version(s): {', '.join(plan.remove)}")
        print("dry run: nothing removed; run again with --yes to remove them")
    else:
        print(f"removed {len(plan.removed)} version(s): {', '.join(plan.removed) or '-'}")
        if plan.spared:
            print(f"kept after all (promoted or rolled back to meanwhile): {', '.join(plan.spared)}")
    for line in plan.leftovers():
        print(line)
    return 0


def run_prune_cache(args: argparse.Namespace) -> int:
    """List (or, with --yes, remove) the count cache entries no run has used for --older-than days."""
    require_extra("pipeline", "bpe prune-cache")
    from datetime import UTC, datetime

    from bpe.pipeline.retention import sweep_count_cache

    sweep = sweep_count_cache(args.cache, args.older_than, apply=args.yes)
    total = sum(e.bytes for e in sweep.entries)
    stale = sum(e.bytes for e in sweep.stale)
    print(
        f"{args.cache}: {len(sweep.entries)} count cache entries ({total / 1e6:,.1f} MB); "
        f"{len(sweep.stale)} not used for {args.older_than:g} days ({stale / 1e6:,.1f} MB)"
    )
    for e in sweep.stale:
        used = datetime.fromtimestamp(e.last_used, UTC).strftime("%Y-%m-%d %H:%M")
        print(f"  {e.key}  last used {used} UTC  {e.bytes / 1e6:,.1f} MB" + ("" if e.complete else "  (incomplete)"))
    if not sweep.stale:
        print("nothing to remove")
    elif not args.yes:
        print("dry run: nothing removed; run again with --yes to remove them")
    else:
        freed = sum(e.bytes for e in sweep.removed)
        print(
            f"removed {len(sweep.removed)} entries ({freed / 1e6:,.1f} MB)"
            + (
                f"; {len(sweep.stale) - len(sweep.removed)} used again meanwhile, kept"
                if len(sweep.removed) < len(sweep.stale)
                else ""
            )
        )
    return 0


def run_cluster(args: argparse.Namespace) -> int:
    require_extra("pipeline", "bpe cluster")
    from bpe.pipeline import cluster

    here = "" if args.state_dir == STATE_DIR else f" --state-dir {shlex.quote(str(args.state_dir))}"
    if args.action == "up":
        state = cluster.up(
            args.state_dir,
            args.workers,
            args.prefect_port,
            args.dask_port,
            args.dashboard_port,
            args.database_url,
            args.conf,
            log=print,  # what registering the deployments said: a paused one, and why
        )
        urls = state["urls"]
        print(f"Prefect UI      {urls['prefect_ui']}  (database: {state['database']})")
        print(f"Prefect API     {urls['prefect_api']}")
        print(f"Dask scheduler  {urls['dask_scheduler']}  ({args.workers} worker(s))")
        print(f"Dask dashboard  {urls['dask_dashboard']}")
        print(f"logs in {args.state_dir}/logs; stop: bpe cluster down{here}")
        print("The Prefect API wants its auth string and Dask speaks TLS (docs/pipeline/cluster.md); in a shell:")
        print(f'  eval "$(bpe cluster env{here})"   # PREFECT_API_URL, PREFECT_API_AUTH_STRING, Dask TLS settings')
        print("  prefect deployment run 'train-bpe/demo'")
        print(f"  bpe train FILES --vocab-size N --out DIR --engine dask --scheduler {urls['dask_scheduler']}")
        return 0
    if args.action == "env":
        for line in cluster.client_env(args.state_dir):
            print(line)
        return 0
    if args.action == "status":
        state = cluster.status(args.state_dir)
        for p in state["processes"]:
            print(f"{p['name']:<24} pid {p['pid']:<8} {'running' if p['alive'] else 'stopped'}")
        for name, url in state.get("urls", {}).items():
            print(f"{name:<24} {url}")
        return 0 if all(p["alive"] for p in state["processes"]) else 1
    stopped = cluster.down(args.state_dir)
    left = [p for p in stopped if p["alive"]]
    print(f"stopped {len(stopped) - len(left)} process(es)")
    if left:
        running = ", ".join(f"{p['name']} (pid {p['pid']}, log {p['log']})" for p in left)
        print(f"bpe: error: still running after SIGKILL: {running}; `bpe cluster down{here}` again", file=sys.stderr)
        return 1
    return 0


STORE = Argument("store", help="<artifact root>/<tokenizer name>, a path or an fsspec URL")
YES = Argument("--yes", action="store_true", help="remove them (without it: only list what would go)")

# The commands on a store or cache, in the order `bpe --help` lists them under "pipeline".
STORE_COMMANDS = (
    Command(
        "versions",
        "list the versions in an artifact store, with their channel and compression",
        run_versions,
        description=_versions_description(),
        examples=["bpe versions artifacts/demo", "bpe versions s3://bucket/artifacts/en"],
        arguments=[STORE],
    ),
    Command(
        "promote",
        "move a store's `latest` to a version (backwards too)",
        run_promote,
        description="""
            Move the store's `latest` to a version, forwards or backwards: what `latest` readers and
            the next runs see. Recorded, with who did it, in the store's history.jsonl; `bpe rollback`
            undoes it.""",
        examples=["bpe promote artifacts/en v0003", "bpe promote artifacts/en 3"],
        arguments=[STORE, Argument("version", help="the version to make latest (v0003, or 3)")],
    ),
    Command(
        "rollback",
        "move a store's `latest` back to the version promoted before it",
        run_rollback,
        description="""
            Move `latest` back to the version promoted before the current one, skipping versions pruned
            since: rollback again walks further back. Recorded in the store's history.jsonl.""",
        examples=["bpe rollback artifacts/en"],
        arguments=[STORE],
    ),
    Command(
        "history",
        "list every publish, promote, rollback and prune of a store",
        run_history,
        description="""
            List every publish, promote, rollback and prune of a store, oldest first: when, what, which
            version, where `latest` went, and by whom (user@host, or the flow run of a publish).""",
        examples=["bpe history artifacts/en"],
        arguments=[STORE],
    ),
    Command(
        "prune",
        "remove all but the newest versions of a store (dry run without --yes)",
        run_prune,
        description="""
            Remove all but the newest --keep versions of a store. Always kept: `latest`, the rollback
            target and the newest main-line version. Without --yes it only lists what would go.""",
        examples=["bpe prune artifacts/en --keep 5", "bpe prune artifacts/en --keep 5 --yes"],
        arguments=[
            STORE,
            Argument(
                "--keep",
                type=int,
                required=True,
                metavar="N",
                help="newest versions to keep (latest, the rollback target and the newest main-line version are "
                "always kept)",
            ),
            YES,
        ],
    ),
    Command(
        "prune-cache",
        "remove count cache entries unused for DAYS days (dry run without --yes)",
        run_prune_cache,
        description="""
            Remove the count cache entries (a shard's counts) that no run has used for --older-than days:
            every run records the entries it uses. Without --yes it only lists them.""",
        examples=[
            "bpe prune-cache artifacts/.cache --older-than 30",
            "bpe prune-cache artifacts/.cache --older-than 30 --yes",
        ],
        arguments=[
            Argument("cache", help="the count cache: a configuration's cache_dir (default <artifact root>/.cache)"),
            Argument("--older-than", type=float, required=True, metavar="DAYS", help="days since a run last used it"),
            YES,
        ],
    ),
)

CLUSTER = Command(
    "cluster",
    "run the docker-compose topology as local processes on 127.0.0.1: up, env, status, down",
    run_cluster,
    description="""
        Run the topology of docker-compose.yml as local processes on 127.0.0.1: a Prefect server and
        worker, a Dask scheduler and workers, speaking TLS, the API behind an auth string. What they
        need and log is kept in --state-dir (.bpe-cluster/), readable by its owner only.""",
    examples=["bpe cluster up --workers 2", 'eval "$(bpe cluster env)"', "bpe cluster status", "bpe cluster down"],
)
STATE_DIR_OPTION = Argument("--state-dir", type=Path, default=STATE_DIR, help="where PIDs and logs are kept")
# Its actions: `run_cluster` runs each (by args.action).
CLUSTER_ACTIONS = (
    Command(
        "up",
        "start Prefect server + worker and a Dask scheduler + workers",
        description="""
            Start a Prefect server and worker, a Dask scheduler and workers on 127.0.0.1, register the
            deployments of conf/ (as `bpe deploy` does), and print the URLs and how to use them.""",
        examples=[
            "bpe cluster up",
            "bpe cluster up --workers 4 --prefect-port 4300 --database-url postgresql+asyncpg://...",
        ],
        arguments=[
            Argument("--workers", type=int, default=2, help="Dask workers (default 2)"),
            Argument("--prefect-port", type=int, default=4200, help="Prefect server and UI port (default 4200)"),
            Argument("--dask-port", type=int, default=8786, help="Dask scheduler port (default 8786)"),
            Argument("--dashboard-port", type=int, default=8787, help="Dask dashboard port (default 8787)"),
            Argument("--database-url", help="PostgreSQL URL for the Prefect server (default: SQLite)"),
            Argument("--conf", type=Path, default=None, help="configurations to deploy (default: conf/)"),
            STATE_DIR_OPTION,
        ],
    ),
    *(  # the actions that take only --state-dir
        Command(name, help=summary, description=description, examples=[example], arguments=[STATE_DIR_OPTION])
        for name, summary, description, example in (
            (
                "env",
                'print the settings a client needs, as export lines: eval "$(bpe cluster env)"',
                "Print, as export lines, what a shell needs to use the cluster: PREFECT_API_URL, the API's\n"
                "auth string and Dask's TLS client settings.",
                'eval "$(bpe cluster env)"',
            ),
            (
                "status",
                "show the processes",
                "Show the cluster's processes, whether each runs, and its URLs; exit 1 if one is not running.",
                "bpe cluster status",
            ),
            (
                "down",
                "stop them",
                "Stop exactly the processes `bpe cluster up` started, workers first, and their children.",
                "bpe cluster down",
            ),
        )
    ),
)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the pipeline's subcommands to the `bpe` parser's subparsers."""
    for command in STORE_COMMANDS:
        add_command(sub, command, "pipeline")
    cluster = add_command(sub, CLUSTER, "cluster")
    cluster.register("action", "parsers", type(sub))
    actions = cluster.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action in CLUSTER_ACTIONS:
        add_command(actions, action, group=None)

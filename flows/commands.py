"""The `bpe` subcommands that run the flows: `demo` (the train-bpe flow on the demo corpus, in
Prefect's ephemeral mode) and `deploy` (register a deployment per configuration), registered
through the `bpe.commands` entry point like the pipeline's (`bpe.pipeline.commands`).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

from bpe.cli.declare import Argument, Command, add_command
from bpe.errors import require_extra
from bpe.install import this_bpe
from bpe.progress import Heartbeat


def said(line: str) -> None:
    """A line on stderr in one write: the demo's threads (compiling, Prefect's start) say lines at
    once, and print's two writes (the text, then its newline) could run two lines into one."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def run_demo(args: argparse.Namespace) -> int:
    """Write the demo corpus, then run the train-bpe flow on it in this process; when a version of
    the same data and settings is there already, say so at once, without starting Prefect."""
    require_extra("pipeline", "bpe demo")
    from bpe.pipeline.config import packaged_config
    from bpe.pipeline.demo import demo_corpus_written, unchanged_demo, write_demo_corpus

    config = str(args.config or packaged_config("demo"))
    parameters = {
        "data": [str(args.data)],
        "artifact_root": str(args.artifacts) if args.artifacts else None,
        "vocab_size": args.vocab_size,
    }
    compiled = None
    if demo_corpus_written(args.data):
        paths = write_demo_corpus(args.data)  # there already: checked, not written
    else:  # a first run: the kernels compile while the corpus is written (seconds on a busy machine)
        with Heartbeat(said, f"writing the demo corpus (the standard library's docstrings) into {args.data}/"):
            compiled = compile_for_the_demo(config, parameters)
            paths = write_demo_corpus(args.data)
    said(f"demo corpus: {len(paths)} Parquet shards in {args.data}/")
    known = unchanged_demo(config, parameters, warn=lambda line: print(f"bpe demo: {line}", file=sys.stderr))
    if known:
        version, location = known
        print(f"no new data since {version}: the latest version is {location}")
        print(f"try: echo 'Hello world' | {this_bpe()} encode {shlex.quote(str(location))}")
        return 0
    compiled = compiled or compile_for_the_demo(config, parameters)  # while Prefect and its server start
    # Prefect's ephemeral server would otherwise try to send telemetry, and log an error offline.
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # Prefect waits 20 s for its ephemeral server to answer; a busy 2-core machine can take longer.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    with Heartbeat(said, "starting Prefect"):
        from prefect.settings import PREFECT_API_URL

        from bpe.flows.train_bpe import train_bpe  # imports Prefect: only the pipeline's commands pay for it
        from bpe.pipeline.demo import quiet_prefect_console
        from bpe.pipeline.services import start_ephemeral_server, tie_ephemeral_server_to_this_process

        tie_ephemeral_server_to_this_process()
        if "PREFECT_LOGGING_LEVEL" not in os.environ:  # asked for: Prefect's own lines too
            quiet_prefect_console()
        server = PREFECT_API_URL.value()
        if not server:
            start_ephemeral_server()  # its database made the first time: seconds
    compiled()  # the flow's own check then finds every kernel it needs compiled
    said(f"running the train-bpe flow {f'on {server}' if server else 'in Prefect ephemeral mode'}")
    # promote: the demo's --vocab-size is what the user asked for, and it becomes latest
    result = train_bpe(config=config, **parameters, promote=True)
    if result["trained"]:
        print(
            f"{result['name']} {result['version']} written to {result['location']}: "
            f"{result['bytes_per_token']:.3f} bytes per token on held-out text"
        )
    else:
        print(f"no new data since {result['version']}: the latest version is {result['location']}")
    print(f"try: echo 'Hello world' | {this_bpe()} encode {shlex.quote(str(result['location']))}", flush=True)
    return 0


def compile_for_the_demo(config: str, parameters: dict) -> Callable[[], object]:
    """Start compiling, on a thread, the kernels the flow's run with `config` and `parameters` needs
    that this machine lacks (a first run: tens of seconds, said line by line), so that it overlaps
    Prefect's start; returns the function that waits for it. The flow checks again and compiles
    what this left out (a base tokenizer's, say)."""
    from bpe.pipeline.config import load_config
    from bpe.training.warm import compile_in_background, groups_of_run

    cfg = load_config(config, parameters)
    groups = [] if cfg.base else groups_of_run(cfg.settings(), "dask", parity_merges=cfg.parity is not None)
    return compile_in_background(groups, lambda line: said(f"bpe: {line}"))


def run_deploy(args: argparse.Namespace) -> int:
    require_extra("pipeline", "bpe deploy")
    from bpe.flows.deploy import deploy_all, require_server

    require_server()
    for name in deploy_all(args.conf, args.pool):
        print(f"deployed {name} on work pool {args.pool}")
    return 0


COMMANDS = (
    Command(
        "demo",
        "run the train-bpe flow on the demo corpus (no server needed: Prefect's ephemeral mode)",
        run_demo,
        description="""
            Write the demo corpus (the docstrings of Python's standard library, as Parquet shards) and
            run the train-bpe flow on it in this process: Prefect's ephemeral mode and a local Dask
            cluster, no server to start. It publishes the next version of the `demo` tokenizer under the
            artifact root (artifacts/demo/v0001, ...), prints where, and a command to try it; run again
            on the same data, it says at once that nothing is new.""",
        examples=["bpe demo", "bpe demo --vocab-size 8192 --artifacts /tmp/artifacts"],
        arguments=[
            Argument("--data", type=Path, default=Path("demo-data"), help="where to write the demo corpus"),
            Argument("--config", type=Path, default=None, help="configuration (default: the packaged conf/demo.yaml)"),
            Argument("--artifacts", type=Path, default=None, help="artifact root (default: the config's)"),
            Argument("--vocab-size", type=int, default=None, help="override the config's vocabulary size"),
        ],
    ),
    Command(
        "deploy",
        "register the train-bpe deployments (one per conf/*.yaml) on a Prefect server",
        run_deploy,
        description="""
            Register a train-bpe deployment per configuration (conf/*.yaml) on the Prefect server that
            PREFECT_API_URL names, each with its configuration's schedule, on a process work pool that a
            worker then serves. Prints each deployment's schedule, whether it is paused, and where its
            failure alerts go.""",
        examples=[
            "export PREFECT_API_URL=http://127.0.0.1:4200/api",
            "bpe deploy && prefect worker start --pool bpe",
            "bpe deploy --conf my-configs/ --pool tokenizers",
        ],
        arguments=[
            Argument("--conf", type=Path, default=None, help="directory of configurations (default: conf/)"),
            Argument("--pool", default="bpe", help="process work pool (created if missing)"),
        ],
    ),
)


def register(sub: argparse._SubParsersAction) -> None:
    """Add `demo` and `deploy` to the `bpe` parser's subparsers."""
    for command in COMMANDS:
        add_command(sub, command, "pipeline")

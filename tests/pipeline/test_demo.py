"""The README's first command: `bpe demo` runs the train-bpe flow with no server started by hand
(Prefect's ephemeral mode, a local Dask cluster) and says where the new version is; run again on
the same data, it says so at once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bpe import Tokenizer
from bpe.pipeline.store import VersionStore
from tests.conftest import cache_lacking, write_parquet

pytestmark = pytest.mark.services  # starts real services: the slow tier

REPO = Path(__file__).resolve().parents[2]


def demo(tmp_path: Path, env: dict, vocab_size: int, succeeds: bool = True) -> subprocess.CompletedProcess:
    """`bpe demo` in a subprocess, as a newcomer runs it: its two streams into one, as on a terminal
    (line-buffered, so the lines are in the order they were printed), with the longest time it
    went without a line (`silence`: seconds, and the line that ended it)."""
    bpe = Path(sys.executable).parent / "bpe"
    command = [str(bpe), "demo", "--data", str(tmp_path / "demo-data"), "--artifacts", str(tmp_path / "artifacts")]
    process = subprocess.Popen(
        [*command, "--vocab-size", str(vocab_size)],
        cwd=tmp_path,
        env={**env, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines, last, silence = [], time.monotonic(), (0.0, "")
    for line in process.stdout:
        silence, last = max(silence, (time.monotonic() - last, line)), time.monotonic()
        lines.append(line)
    done = subprocess.CompletedProcess(command, process.wait(timeout=600), "".join(lines))
    done.silence = silence
    assert (done.returncode == 0) == succeeds, done.stdout[-4000:]
    return done


def test_demo_runs_the_flow_in_ephemeral_mode(tmp_path):
    """On a machine whose kernel cache lacks the counting group of the demo's pattern (as a fresh
    one lacks them all), the demo compiles it before the flow runs, saying so, and its workers
    only load kernels; it is never silent for long."""
    env = {
        **{k: v for k, v in cache_lacking(tmp_path, ("count cl100k",), ("count._count_cl100k-",)).items()
           if not k.startswith("PREFECT_")},
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }  # fmt: skip
    done = demo(tmp_path, env, 1024)
    location = tmp_path / "artifacts" / "demo" / "v0001"
    lines = done.stdout.splitlines()
    compiling = next((i for i, line in enumerate(lines) if line.startswith("bpe: compiling ")), None)
    flow = next((i for i, line in enumerate(lines) if line.startswith("running the train-bpe flow")), None)
    assert compiling is not None and flow is not None, done.stdout[-3000:]
    assert compiling < flow and "count cl100k" in lines[compiling], done.stdout
    assert any("kernels loaded on 2 worker(s)" in line for line in lines), done.stdout
    assert not any("compiled the kernels on" in line for line in lines), done.stdout
    assert done.silence[0] < 10, done.silence
    # The answer is the last thing said; the flow's own progress comes before it, Prefect's own
    # INFO lines (a run beginning, each task's final state, the temporary server) not at all.
    assert lines[-2].startswith(f"demo v0001 written to {location}:")
    assert lines[-2].endswith("bytes per token on held-out text")
    # The command to try works in a new shell, where the project's environment is not on the PATH.
    bpe = Path(sys.executable).parent / "bpe"
    assert lines[-1] == f"try: echo 'Hello world' | {bpe} encode {location}"
    fresh = subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", lines[-1].removeprefix("try: ")],
        cwd=tmp_path,
        env={**{k: v for k, v in env.items() if k != "VIRTUAL_ENV"}, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert fresh.returncode == 0 and fresh.stdout.split() and fresh.stdout.split()[0].isdigit(), fresh.stderr
    for progress in (
        "training: no version yet",
        "count: 4 of 4 shard(s) (100%)",
        f"published demo v0001 at {location}",
    ):
        assert any(progress in line for line in lines), progress
    for internal in ("Beginning flow run", "Finished in state", "temporary server"):
        assert not any(internal in line for line in lines), done.stdout
    assert VersionStore(str(tmp_path / "artifacts"), "demo").latest() == "v0001"
    tok = Tokenizer.load(location)
    assert tok.vocab_size == 1024 and "<|endoftext|>" in tok.special_tokens
    assert (location / "compression.png").exists()

    # The counts a later run reuses (tests/pipeline/test_pipeline.py shows it does) are beside the versions,
    # not in Prefect's database or result storage, which ephemeral mode may start afresh.
    assert len(list((tmp_path / "artifacts" / ".cache" / "counts").glob("*.json"))) == 4
    results = tmp_path / "prefect-home" / "storage"
    assert not results.exists() or not any(results.rglob("*")), sorted(results.rglob("*"))

    # Again, on the same data: the answer at once, without Prefect (its temporary server alone
    # takes seconds), and nothing else said.
    started = time.monotonic()
    again = demo(tmp_path, env, 1024)
    print(f"second bpe demo: {time.monotonic() - started:.1f} s")
    assert again.stdout.splitlines() == [
        f"demo corpus: 4 Parquet shards in {tmp_path / 'demo-data'}/",
        f"no new data since v0001: the latest version is {location}",
        f"try: echo 'Hello world' | {bpe} encode {location}",
    ]
    assert not list((tmp_path / "artifacts" / "demo").glob("v0002*"))

    # That check is the flow's own: the same data and settings answer; another vocabulary size,
    # or one more shard, is the flow's to train.
    from bpe.pipeline.config import packaged_config
    from bpe.pipeline.demo import unchanged_demo

    config = packaged_config("demo")
    parameters = {
        "data": [str(tmp_path / "demo-data")],
        "artifact_root": str(tmp_path / "artifacts"),
        "vocab_size": 1024,
    }
    assert unchanged_demo(config, parameters) == ("v0001", str(location))
    assert unchanged_demo(config, {**parameters, "vocab_size": 1100}) is None
    write_parquet(tmp_path / "demo-data" / "part-00004.parquet", ["a shard added since v0001"])
    assert unchanged_demo(config, parameters) is None


def test_a_failed_flow_run_is_one_line_with_its_traceback_left_in_the_runs_logs(tmp_path):
    """Prefect logs a failed run's exception with its traceback (20 to 100 lines) on the terminal's
    handler too: the demo says the one line, and the traceback stays in the run's logs."""
    import sqlite3

    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "BPE_CACHE_KEY"))},
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "BPE_CACHE_KEY": "short",  # the flow refuses it when it starts
    }
    done = demo(tmp_path, env, 1024, succeeds=False)
    line = (
        "BPE_CACHE_KEY: the count cache key has 5 characters; expected at least 32 (e.g. the output of `openssl rand "
    )
    said = [
        said
        for said in done.stdout.splitlines()
        if not said.startswith(("writing the demo corpus", "starting Prefect", "bpe: compil"))  # its progress
    ]
    assert done.returncode == 1 and said == [
        f"demo corpus: 4 Parquet shards in {tmp_path / 'demo-data'}/",
        "running the train-bpe flow in Prefect ephemeral mode",
        f"bpe: error: {line}-hex 32`)",
    ], done.stdout
    with sqlite3.connect(tmp_path / "prefect-home" / "prefect.db") as db:
        logs = [message for (message,) in db.execute("SELECT message FROM log")]
    assert any("Traceback (most recent call last)" in m and line in m for m in logs), logs


def _command_line(process) -> str:
    """A process's command line, or "" for one that exited (or became a zombie) meanwhile: the
    demo starts and reaps short-lived children while the test looks at them."""
    import psutil

    try:
        return " ".join(process.cmdline())
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return ""


def test_the_ephemeral_server_dies_with_a_killed_demo(tmp_path):
    """kill -9 of `bpe demo` mid-run must not leave Prefect's ephemeral server listening."""
    import psutil

    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")},
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    bpe = Path(sys.executable).parent / "bpe"
    demo = subprocess.Popen(
        [str(bpe), "demo", "--data", str(tmp_path / "demo-data"), "--artifacts", str(tmp_path / "artifacts")],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        servers: list = []
        while not servers:
            assert time.monotonic() < deadline and demo.poll() is None, "no ephemeral server was started"
            children = psutil.Process(demo.pid).children(recursive=True)
            servers = [c for c in children if "uvicorn" in _command_line(c)]
            time.sleep(0.2)
        demo.kill()
        demo.wait(30)
        gone, alive = psutil.wait_procs(servers, timeout=20)
        assert not alive, f"still listening after its parent was killed: {[p.pid for p in alive]}"
    finally:
        if demo.poll() is None:
            demo.kill()
        for child in psutil.Process().children(recursive=True):
            if "uvicorn" in _command_line(child):
                child.kill()

"""Shared fixtures: the shared English corpus (skipped when absent), small inputs on disk, and the
services started once per session (a Prefect server, a Dask cluster with a Prefect worker, an S3
server) for every module that needs them."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import strategies as st

# A machine that sets PYTHONDONTWRITEBYTECODE (as CI images and containers do) would have every
# process of the suite compile from source the modules of bpe (an editable install: pip compiles
# none of them) and pytest rewrite every test module again: hundreds of processes (bpe commands,
# Dask workers, flow runs) and three test workers. The suite keeps their bytecode (__pycache__/,
# which git ignores): set before the test workers and any other process start, which inherit it.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# Dask's idle bookkeeping at its defaults (the event loop's tick every 20 ms, each worker's sampling
# profiler every 10 ms, its memory monitor every 100 ms) keeps an idle scheduler and two workers
# busy for a tenth of a core, and the suite's clusters wait between tests for minutes on 2 cores:
# these settings bring that to a fiftieth. Set before Dask is imported, for every cluster the tests
# start: LocalClusters in this process, and the services' processes, which inherit the environment.
DASK_IDLE_SETTINGS = {
    "DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL": "1s",
    "DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False",
    "DASK_DISTRIBUTED__WORKER__MEMORY__MONITOR_INTERVAL": "1s",
}
for _name, _value in DASK_IDLE_SETTINGS.items():
    os.environ.setdefault(_name, _value)

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("BPE_SHARED", REPO.parent / "shared"))
CORPUS = SHARED / "corpora" / "en"
GPT2 = SHARED / "gpt2"


def shared_corpus() -> Path:
    if not (CORPUS / "part-00000.parquet").exists():
        pytest.skip(f"shared corpus not found at {CORPUS}")
    return CORPUS


@functools.cache
def _stdlib_paragraphs() -> tuple[str, ...]:
    from bpe.pipeline.demo import stdlib_paragraphs as read

    shared = _shared_by_xdist_workers()
    if shared is None:
        return tuple(read())
    with _locked(shared / "stdlib-paragraphs.lock"):  # the first worker to ask parses, the others read
        path = shared / "stdlib-paragraphs.json"
        if not path.exists():
            path.write_text(json.dumps(read()))
        return tuple(json.loads(path.read_text()))


def stdlib_paragraphs() -> list[str]:
    """`bpe.pipeline.demo.stdlib_paragraphs()` (real prose every machine has), parsed once per
    session rather than once per module (about 2 s of a core each time), and under pytest-xdist
    once for all the workers (several modules ask for it as they are collected): a new list on
    every call."""
    return list(_stdlib_paragraphs())


_config: pytest.Config | None = None  # this session's (`pytest_configure`)


def _shared_by_xdist_workers() -> Path | None:
    """The directory the pytest-xdist workers of this session share (None outside them)."""
    if _config is None or not os.environ.get("PYTEST_XDIST_WORKER"):
        return None
    return _config._tmp_path_factory.getbasetemp().parent


# Every character some split pattern treats as whitespace (regex's \s, str.split()'s \x1c-\x1f), which
# regex engines disagree on most often: mixed into the arbitrary text of the encoder property tests.
WHITESPACE = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B)))
WHITESPACE += "\u2028\u2029\u202f\u205f\u3000"


def any_text(extra: str = "ab1 ") -> st.SearchStrategy[str]:
    """Arbitrary Unicode text (no lone surrogates) up to 60 characters, rich in whitespace and `extra`."""
    return st.text(
        st.one_of(st.characters(exclude_categories=("Cs",)), st.sampled_from(WHITESPACE), st.sampled_from(extra)),
        max_size=60,
    )


@st.composite
def any_merges(draw, words: Iterable[bytes], most: int) -> list[tuple[int, int]]:
    """A valid BPE merge sequence that no corpus need have learnt: up to `most` merges, each joining
    two tokens that exist before it (the bytes of `words`, or earlier merges), no pair twice."""
    tokens = sorted({b for word in words for b in word})
    merges: list[tuple[int, int]] = []
    for _ in range(draw(st.integers(0, most))):
        pair = (draw(st.sampled_from(tokens)), draw(st.sampled_from(tokens)))
        if pair not in merges:
            merges.append(pair)
            tokens.append(255 + len(merges))
    return merges


@pytest.fixture(scope="session")
def corpus() -> Path:
    return shared_corpus()


@pytest.fixture(scope="session")
def corpus_rows(corpus) -> list[str]:
    """A slice of real English paragraphs: the first 3,000 rows of the smallest shard."""
    table = pq.read_table(corpus / "part-00005.parquet")
    return [t for t in table.column("text").to_pylist()[:3000] if t]


MERGE_RULES = ("tie_break", "min_frequency", "max_token_length", "superwords")


def merge_rules(**given):
    """The engines' merge rules (`bpe.engine.rules.MergeRules`) with the schema's defaults for
    whatever is not given, as `Settings.merge_rules` builds them."""
    from bpe.engine.rules import MergeRules
    from bpe.schema import DEFAULT

    defaults = {"tie_break": DEFAULT["tie_break"], "min_frequency": DEFAULT["min_frequency"]}
    return MergeRules(**{**defaults, "max_token_length": None, "superwords": None, **given})


def ruled(options: dict) -> tuple:
    """`options` for an engine as its merge rules (`merge_rules`) and the rest, by name."""
    rules = merge_rules(**{name: value for name, value in options.items() if name in MERGE_RULES})
    return rules, {name: value for name, value in options.items() if name not in MERGE_RULES}


def parity_rule(**given):
    """The engine's parity rule (`bpe.engine.parity.ParityRule`) with the schema's defaults for
    whatever is not given, as `train()` would build it."""
    from bpe.engine.parity import ParityRule
    from bpe.schema import DEFAULT

    defaults = {
        "variant": DEFAULT["parity_variant"],
        "global_merges": DEFAULT["global_merges"],
        "window": DEFAULT["parity_window"],
        "alpha": DEFAULT["parity_alpha"],
        "ratio": None,
    }
    return ParityRule(**{**defaults, **given})


def write_parquet(path: Path, texts, column: str = "text") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({column: pa.array(list(texts), pa.string())}), path)
    return path


HEADROOM = 128 << 20  # address space a load may take beyond what the interpreter holds once imported


def limited(
    *command: str, imports: str = "bpe.cli, bpe.tokenizer", timeout: float = 60, env: dict | None = None
) -> subprocess.CompletedProcess:
    """`command` (lines of Python, `sys` imported) in a process whose address space is limited to
    what it holds after importing `imports` plus HEADROOM, stopped after `timeout` seconds: a read
    of /dev/zero or of a FIFO fails the test, not the machine. `env`: its environment (this one's)."""
    import textwrap

    limit = textwrap.dedent(
        f"""
        import resource, sys
        import {imports}
        size = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (size + {HEADROOM}, size + {HEADROOM}))
        """
    )
    return subprocess.run(
        [sys.executable, "-c", limit + "\n".join(command)], capture_output=True, text=True, timeout=timeout, env=env
    )


def raised_in_limits(
    statement: str, imports: str, timeout: float = 30, env: dict | None = None
) -> subprocess.CompletedProcess:
    """`statement` (after `from MODULE import *` of each module of `imports`) run by `limited`,
    which prints the exception it raises, if any, as `<class name> <message>`."""
    stars = "\n".join(f"from {module.strip()} import *" for module in imports.split(","))
    attempt = f"try:\n    {statement}\nexcept Exception as exc:\n    print(type(exc).__name__, exc)"
    return limited(stars, attempt, imports=imports, timeout=timeout, env=env)


def not_a_regular_file(path: Path, replacement: str) -> None:
    """Put at `path` what is not a regular file: a FIFO (`fifo`), a directory (`directory`), or a
    link to `replacement` (`/dev/zero`, `/dev/urandom`)."""
    if replacement == "fifo":
        os.mkfifo(path)
    elif replacement == "directory":
        path.mkdir()
    else:
        path.symlink_to(replacement)


def publish_as(
    store,
    channel: str = "main",
    promoted: bool | None = None,
    bpt: float = 3.0,
    eval_set: str = "set-a",
    vocab_size: int = 600,
    created: str = "2026-11-30T08:50:18+00:00",
    shards: int = 2,
    data_bytes: int = 1_500_000,
) -> str:
    """Publish a version as the flow does, without training: its manifest says its channel, whether
    it is promoted, its vocabulary size, and its bytes per token on the evaluation rows with
    fingerprint `eval_set` (and when it was made, from how many shards of how many bytes)."""
    import json

    staged = store.stage()
    manifest = {
        "channel": channel,
        "promoted": channel == "main" if promoted is None else promoted,
        "evaluation": {"bytes_per_token": bpt, "eval_set": {"fingerprint": eval_set}},
        "created": created,
        "result": {"vocab_size": vocab_size},
        "counts": {"bytes": data_bytes},
        "data": {"shards": [{}] * shards},
    }
    (staged.directory / "manifest.json").write_text(json.dumps(manifest))
    store.commit(staged)
    return staged.version


@pytest.fixture
def no_counting(monkeypatch) -> None:
    """Counting must not start: the check under test comes first (`bpe.training.trainer`'s count_shards raises)."""

    def counting_started(*args, **kwargs):
        raise AssertionError("counting started before the check")

    monkeypatch.setattr(sys.modules["bpe.training.trainer"], "count_shards", counting_started)


def _moto_server(log_dir: Path):
    """Start moto's standalone S3 server on a free port of 127.0.0.1; returns the process and the
    AWS_* variables that reach it (not set anywhere: the caller decides where they apply)."""
    pytest.importorskip("boto3")
    pytest.importorskip("s3fs")
    pytest.importorskip("moto")
    import subprocess
    import sys
    import time

    from bpe.pipeline.services import free_port, port_in_use

    port = free_port()
    log = log_dir / f"moto-{port}.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + 30
    while not port_in_use(port):
        if process.poll() is not None or time.monotonic() > deadline:
            _stop_moto(process)
            raise AssertionError(log.read_text()[-2000:])
        time.sleep(0.1)
    env = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    return process, env


def _stop_moto(process) -> None:
    import signal

    from bpe.pipeline.services import stop

    stop(process, first=signal.SIGTERM)


@contextlib.contextmanager
def moto_s3(log_dir: Path):
    """A moto S3 server of its own on 127.0.0.1, for the `with` block: this process (and every
    process it starts) reaches it through the standard AWS_* variables, as any S3 client would.
    Yields those variables. For a test that needs a second endpoint; the others share `s3_server`."""
    process, env = _moto_server(log_dir)
    try:
        with pytest.MonkeyPatch.context() as patch:
            for key, value in env.items():
                patch.setenv(key, value)
            yield env
    finally:
        _stop_moto(process)


# The session-scoped services below (a Prefect server, a Dask cluster with a Prefect worker, an S3
# server) are started for the first test that needs them and stopped at the end of the session.
SHARED_SERVICES = ("prefect_server", "dask_services", "pipeline_services", "s3_server")


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto`: one pytest-xdist worker more than the cores this process may use. About an eighth
    of the suite's time is spent waiting (for a Prefect worker's poll, a server's reply, a process
    to start), so a third worker on 2 cores fills time the other two leave idle."""
    return len(os.sched_getaffinity(0)) + 1


# The modules that take longest, longest first, as measured on 2 cores (seconds of test time in a
# full run: dask 83, pipeline 79, object_storage 74, channels 56, alerts 53, dask_languages 49,
# cold_start 47, demo 44, cluster 44, ...). Handed out first, they leave the short modules to fill
# the gaps at the end. The other modules that use the shared Prefect server and Dask cluster come
# early too, so that these can stop early (`pytest_runtest_teardown`).
SLOWEST_MODULES = (
    "test_channels",
    "test_pipeline",
    "test_dask",
    "test_object_storage",
    "test_cluster",
    "test_dask_languages",
    "test_alerts",
    "test_cold_start",
    "test_demo",
    "test_extend_pipeline",
    "test_docs",
    "test_multilingual",
    "test_count_cache",
    "test_long_words",
    "test_extend",
    "test_inputs",
    "test_tiers",
    "test_dask_faults",
    "test_small_corpus",
    "test_superwords",
    "test_max_token_length",
    "test_outputs",
    "test_interrupts",
)


def pytest_sessionstart(session) -> None:
    """Compile every kernel group this machine's cache lacks, once, before any test runs (on the
    pytest-xdist controller, before its workers start): a fresh machine's first run compiles, and
    without this each test process would wait on the others' compiling mid-test, and the cold tests
    (`cache_lacking`) would copy a cache still half empty. Said on the terminal as a run says it."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    from bpe.training.warm import GROUPS, compile_ahead

    def say(line: str) -> None:
        print(f"bpe: {line}", file=sys.__stderr__, flush=True)

    compile_ahead(list(GROUPS), say)


SLOW_MARKS = ("services", "chaos", "cold")


def pytest_itemcollected(item) -> None:
    """Mark `slow` every test that starts services, breaks things at scale or compiles from nothing,
    but the `smoke` ones: CI (the README's test command) runs `-m "not slow"`, which keeps it under
    10 minutes on 2 cores with one test of each kind of service really started; `pytest` alone, or
    `-m slow` after a change to the pipeline, the Dask engine or object storage, runs the rest."""
    if any(item.get_closest_marker(mark) for mark in SLOW_MARKS) and not item.get_closest_marker("smoke"):
        item.add_marker(pytest.mark.slow)


def pytest_configure(config) -> None:
    """pytest-xdist hands out modules (`--dist loadfile`) in the order of the most tests first
    unless told to keep the collection's order, which `pytest_collection_modifyitems` sets."""
    global _config
    _config = config
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(trylast=True)  # after pytest's own reordering of parametrized fixtures
def pytest_collection_modifyitems(items) -> None:
    """In one process, run the modules that use the shared services last, one after another (each
    module whole, in its usual order): the services start once for them and never idle through the
    rest of the suite. Spread over workers (pytest-xdist, a module per worker at a time, handed out
    in this order), run the slowest modules first instead (`SLOWEST_MODULES`, then any other with
    tests that start services, compile from nothing or break things at scale), so that the fast
    ones fill the gaps at the end rather than a slow one starting last."""

    if os.environ.get("PYTEST_XDIST_WORKER"):
        _service_users.update(_modules_using(items))
        marks = ("services", "chaos", "cold")
        slow = {module_of(item) for item in items if any(item.get_closest_marker(m) for m in marks)}

        def rank(item) -> int:
            name = Path(module_of(item)).stem
            if name in SLOWEST_MODULES:
                return SLOWEST_MODULES.index(name)
            return len(SLOWEST_MODULES) + (module_of(item) not in slow)

        items.sort(key=rank)  # stable: each module's own order is kept
        return
    modules = {
        module_of(item) for item in items if any(name in getattr(item, "fixturenames", ()) for name in SHARED_SERVICES)
    }
    items.sort(key=lambda item: module_of(item) in modules)


def module_of(item) -> str:
    return item.nodeid.split("::")[0]


# The services shared by the pytest-xdist workers (`shared_by_workers`, by their state's name) that
# stop as soon as every module that uses them has ended, rather than idle to the end of the session
# (a Prefect server answering its worker's polls, a Dask cluster: some 7% of a core together for
# minutes). In stopping order: what uses a service stops before it.
STOPPED_WHEN_UNUSED = {
    "pipeline_services": "pipeline-services",
    "dask_services": "dask-services",
    "prefect_server": "prefect-server",
}
# Services that a fixture asks for itself (request.getfixturevalue), which its users use too.
ASKED_FOR_BY = {"pipeline_services": ("dask_services", "prefect_server")}
_service_users: dict[str, set[str]] = {}  # the modules (node ids) of this session that use each service


def _modules_using(items) -> dict[str, set[str]]:
    users: dict[str, set[str]] = {name: set() for name in STOPPED_WHEN_UNUSED}
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        for name, asked in ASKED_FOR_BY.items():
            if name in names:
                names.update(asked)
        for name in users.keys() & names:
            users[name].add(module_of(item))
    return users


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After a module's last test in a pytest-xdist worker (with `--dist loadfile` a module runs
    whole in one worker): record that it has ended, and stop each shared service that no module
    still to run uses."""
    yield
    if not os.environ.get("PYTEST_XDIST_WORKER") or (nextitem is not None and module_of(nextitem) == module_of(item)):
        return
    from bpe.pipeline.services import stop

    shared = _shared_by_xdist_workers()
    with _locked(shared / "ended-modules.lock"):
        record = shared / "ended-modules.json"
        ended = set(json.loads(record.read_text())) if record.exists() else set()
        ended.add(module_of(item))
        record.write_text(json.dumps(sorted(ended)))
    for fixture, name in STOPPED_WHEN_UNUSED.items():
        if not _service_users.get(fixture) or not _service_users[fixture] <= ended:
            continue
        state = shared / f"{name}.json"
        with _locked(shared / f"{name}.lock"):
            if not state.exists():  # never started, or stopped at the end of a session
                continue
            found = json.loads(state.read_text())
            if not found.get("stopped"):
                for pid, sig in found["record"]["stop"]:
                    stop(pid, first=sig)
                state.write_text(json.dumps({**found, "stopped": True}))


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory) -> Iterator[dict]:
    """One moto S3 server on 127.0.0.1 for the whole session; yields its AWS_* variables without
    setting them. Tests reach it through `s3_env` (or set the variables for their module) and each
    works in buckets of its own (`unique_bucket`), so none sees another's objects."""
    process, env = _moto_server(tmp_path_factory.mktemp("s3-server"))
    try:
        yield env
    finally:
        _stop_moto(process)


@pytest.fixture
def s3_env(s3_server, monkeypatch) -> dict:
    """The session's S3 server, reached through the AWS_* variables for this test only."""
    for key, value in s3_server.items():
        monkeypatch.setenv(key, value)
    return s3_server


def drop_s3_credentials(monkeypatch, tmp_path: Path) -> None:
    """From here on, the S3 endpoint is reached with no credentials at all: none in the AWS_*
    variables, in credential or config files, or from this machine's metadata service."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))


def unique_bucket(prefix: str = "bpe") -> str:
    """A bucket name no other test uses on the shared S3 server."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@contextlib.contextmanager
def shared_by_workers(tmp_path_factory, name: str, start) -> Iterator[dict]:
    """Services of the session, started once for every pytest-xdist worker: the first worker to
    ask calls `start(directory)`, which starts them and returns a JSON record of what they are
    (with "stop": [[pid, signal], ...], in stopping order); the others reuse the record, and the
    last to let go stops the processes. In one process it is start, use, stop. Two workers on one
    Prefect server and one Dask cluster rather than two of each: a start each (half a minute on
    2 cores while the other worker runs) and half the idle services' CPU."""
    from bpe.pipeline.services import stop

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        record = start(tmp_path_factory.mktemp(name))
        try:
            yield record
        finally:
            for pid, sig in record["stop"]:
                stop(pid, first=sig)
        return
    shared = tmp_path_factory.getbasetemp().parent
    state = shared / f"{name}.json"
    with _locked(shared / f"{name}.lock"):
        if state.exists():
            found = json.loads(state.read_text())
        else:
            found = {"record": start(tmp_path_factory.mktemp(name)), "users": 0}
        found["users"] += 1
        state.write_text(json.dumps(found))
    try:
        yield found["record"]
    finally:
        with _locked(shared / f"{name}.lock"):
            found = json.loads(state.read_text())
            found["users"] -= 1
            if found["users"]:
                state.write_text(json.dumps(found))
            else:
                for pid, sig in [] if found.get("stopped") else found["record"]["stop"]:
                    stop(pid, first=sig)
                state.unlink()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    import fcntl

    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def pytest_sessionfinish(session) -> None:
    """On the pytest-xdist controller, after every worker has ended: stop the shared services a
    worker that died could not (`shared_by_workers`)."""
    if os.environ.get("PYTEST_XDIST_WORKER") or not getattr(session.config.option, "numprocesses", None):
        return
    from bpe.pipeline.services import stop

    for state in session.config._tmp_path_factory.getbasetemp().glob("*.json"):
        found = json.loads(state.read_text())
        record = {} if not isinstance(found, dict) or found.get("stopped") else found.get("record") or {}
        for pid, sig in record.get("stop", []):
            stop(pid, first=sig)


@contextlib.contextmanager
def two_worker_cluster() -> Iterator[tuple]:
    """A Dask LocalCluster of two worker processes with a thread each (under nannies) on 127.0.0.1,
    and its client, for the `with` block."""
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    )
    client = distributed.Client(cluster)
    try:
        yield cluster, client
    finally:
        client.close()
        cluster.close()


@pytest.fixture(scope="session")
def local_cluster() -> Iterator[tuple]:
    """A `two_worker_cluster` and its client, one per test process, for the modules that train on
    a cluster they size as they need (`scale`) and otherwise leave as they found it: started once
    rather than once per module or test (a worker process takes seconds of a core to start, and to
    load the kernels on its first run)."""
    with two_worker_cluster() as cluster_and_client:
        yield cluster_and_client


@pytest.fixture
def two_workers(local_cluster):
    """The client of `local_cluster`, scaled to two workers."""
    scale(*local_cluster, 2)
    return local_cluster[1]


def scale(cluster, client, n: int) -> None:
    """Scale a LocalCluster to n workers and wait until it has settled there (the cluster's own
    worker list and the scheduler's agree for a second), whatever size an earlier test left."""
    cluster.scale(n)
    deadline = time.monotonic() + 60
    settled_since = None
    while True:
        now = time.monotonic()
        if len(cluster.workers) == n and len(client.scheduler_info()["workers"]) == n:
            settled_since = settled_since or now
            if now - settled_since > 1.0:
                return
        else:
            settled_since = None
        assert now < deadline, "cluster did not scale"
        time.sleep(0.1)


@pytest.fixture(scope="session")
def dask_services(tmp_path_factory) -> Iterator[dict]:
    """A Dask scheduler and two workers (`dask worker`: a nanny and its worker each, with the
    pipeline's preload) on 127.0.0.1 for the session, one set for all the pytest-xdist workers:
    the train-bpe flow's cluster (`pipeline_services`) and the running scheduler commands are
    pointed at (tests.distributed.test_dask). Yields once they are started: call `ready()` before using them,
    which waits until both workers have registered (they start while their users start other
    services). Stopped at the end of the session, workers first."""

    def start(root: Path) -> dict:
        from bpe.pipeline.services import free_port, start_dask_scheduler, start_dask_worker

        logs = root / "logs"
        logs.mkdir()
        scheduler = start_dask_scheduler(free_port(), log=logs / "dask-scheduler.log")
        workers = []
        try:
            for i in range(2):
                workers.append(start_dask_worker(scheduler.url, log=logs / f"dask-worker-{i}.log", wait=False))
        except BaseException:
            for service in [*workers, scheduler]:
                service.stop()
            raise
        return {
            "scheduler": scheduler.url,
            "logs": str(logs),
            "workers": [[w.pid, str(w.log)] for w in workers],
            "stop": [[service.pid, service.stop_signal] for service in [*workers, scheduler]],
        }

    def ready() -> str:
        from bpe.pipeline.services import group_running

        deadline = time.monotonic() + 90
        for pid, log in record["workers"]:
            while b"Registered to:" not in Path(log).read_bytes():
                assert group_running(pid), f"a Dask worker exited while starting: {Path(log).read_text()[-1500:]}"
                assert time.monotonic() < deadline, f"a Dask worker did not register: {Path(log).read_text()[-1500:]}"
                time.sleep(0.1)
        return record["scheduler"]

    with shared_by_workers(tmp_path_factory, "dask-services", start) as record:
        yield {**record, "logs": Path(record["logs"]), "ready": ready}


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory) -> dict:
    """The wheel `pip install .` would install, built once per session from a copy of the tracked
    files (setuptools writes a build/ folder into the tree it builds). Yields its path and the build's output. Under
    pytest-xdist the workers share one build: the first builds it, under a lock, for the others."""
    shared = _shared_by_xdist_workers()
    if shared is None:
        return _build_wheel(tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheel"))
    with _locked(shared / "wheel.lock"):
        record = shared / "wheel.json"
        if not record.exists():
            built = _build_wheel(tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheel"))
            record.write_text(json.dumps({"path": str(built["path"]), "output": built["output"]}))
        found = json.loads(record.read_text())
    return {"path": Path(found["path"]), "output": found["output"]}


def _build_wheel(source: Path, out: Path) -> dict:
    import shutil
    import subprocess
    import sys

    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, tracked.decode().split("\0")):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-3000:]
    (path,) = out.glob("*.whl")
    return {"path": path, "output": build.stdout + build.stderr}


def cache_lacking(tmp_path: Path, groups: tuple[str, ...], kernels: tuple[str, ...]) -> dict:
    """An environment whose kernel cache is a copy of this machine's without the groups `groups`
    and the kernel files starting with `kernels` (theirs): for them, a first run's path."""
    from bpe.engine.kernel_cache import kernel_cache_base, kernel_cache_name

    name = kernel_cache_name()
    target = tmp_path / "kernel-cache" / name
    source = Path(kernel_cache_base()) / name
    if source.is_dir():
        shutil.copytree(source, target, ignore=shutil.ignore_patterns(".compiling", "*.tmp.*"))
    (target / "engine").mkdir(parents=True, exist_ok=True)
    for path in (target / "engine").iterdir():
        if path.name.startswith(kernels):
            path.unlink()
    for group in groups:
        for marker in (target / "groups").glob(f"{group.replace(' ', '-')}.*"):
            marker.unlink()
    return {**os.environ, "BPE_KERNEL_CACHE": str(tmp_path / "kernel-cache")}

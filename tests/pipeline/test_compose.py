"""docker-compose.yml, its S3 override files and the Dockerfile.

Structurally (fast, no Docker): every service present, one image built once, commands the
installed prefect/dask/bpe tools accept, environment and volumes consistent between services,
healthchecks gating start order, nothing published beyond 127.0.0.1, pinned dependencies.

For real (`services`; skipped where no Docker engine answers): the image is built, the stack comes
up, the demo deployment publishes v0001, a larger run survives a Dask worker container killed
mid-loop with the local engine's merges, versions survive `down`/`up`, and `down -v` leaves
nothing; with the s3 profile (moto standing in for MinIO), artifacts and the count cache go to S3.
Run with `-s` to see the measured times.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import time
import tomllib
import urllib.request
import uuid
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SERVICES = {"bpe-image", "postgres", "prefect-server", "dask-scheduler", "dask-worker", "prefect-worker"}
PROJECT_SERVICES = {"prefect-server", "dask-scheduler", "dask-worker", "prefect-worker"}
ONE_SHOT = {"bpe-image", "s3-init"}  # run to completion: others wait for service_completed_successfully
S3_ENV = {
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_DEFAULT_REGION",
    "BPE_ARTIFACT_ROOT",
    "BPE_CACHE_DIR",
}
COMPOSE_FILES = ("docker-compose.yml", "docker-compose.s3.yml", "docker-compose.moto.yml")


def load(name: str) -> dict:
    return yaml.safe_load((REPO / name).read_text())


@pytest.fixture(scope="module")
def compose() -> dict:
    return load("docker-compose.yml")


@pytest.fixture(scope="module")
def s3() -> dict:
    return load("docker-compose.s3.yml")


@pytest.fixture(scope="module")
def moto() -> dict:
    return load("docker-compose.moto.yml")


def env_example() -> dict[str, str]:
    return dict(
        line.split("=", 1)
        for line in (REPO / ".env.example").read_text().splitlines()
        if "=" in line and line[0] != "#"
    )


def commands(service: dict) -> list[list[str]]:
    """The tool invocations of a service's command (a `sh -c "a && exec b"` holds two)."""
    command = service["command"]
    if command[:2] == ["sh", "-c"]:
        parts = [shlex.split(part) for part in command[2].split("&&")]
        return [p[1:] if p[0] == "exec" else p for p in parts]
    return [command]


@lru_cache
def help_text(*words: str) -> str:
    tool = Path(os.sys.executable).parent / words[0]
    done = subprocess.run(
        [str(tool), *words[1:], "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "250"},
        timeout=60,
    )
    assert done.returncode == 0, f"`{' '.join(words)}` is not a command of the installed tools: {done.stderr[-500:]}"
    return done.stdout


def test_one_image_is_built_once_and_used_by_every_python_service(compose, s3):
    services = compose["services"]
    assert set(services) == SERVICES
    assert [name for name, s in services.items() if "build" in s] == ["bpe-image"]
    builder = services["bpe-image"]
    image = builder["image"]
    assert re.fullmatch(r"bpe-trainer:\$\{BPE_IMAGE_TAG:-latest\}", image) and builder["build"] == "."
    assert builder["command"] == ["true"] and builder["restart"] == "no"
    # Compose makes sure images exist in dependency order: every service of the image comes after
    # its builder, so that a fresh `up` builds it rather than trying to pull bpe-trainer.
    for name in PROJECT_SERVICES:
        assert services[name]["image"] == image, name
        assert services[name]["depends_on"]["bpe-image"] == {"condition": "service_completed_successfully"}, name
    init = s3["services"]["s3-init"]
    assert init["image"] == image and "build" not in init and "bpe-image" in init["depends_on"]
    assert services["postgres"]["image"].startswith("postgres:")


def test_commands_are_accepted_by_the_installed_tools(compose):
    checked = 0
    for name in PROJECT_SERVICES:
        for args in commands(compose["services"][name]):
            subcommand = [a for a in args[:3] if not a.startswith("-") and "://" not in a]
            text = help_text(*subcommand)
            for flag in (a.split("=")[0] for a in args if a.startswith("--")):
                assert re.search(rf"(^|\s){re.escape(flag)}\b", text), f"{name}: {' '.join(subcommand)} has no {flag}"
            checked += 1
    assert checked == 5


def test_nothing_is_published_beyond_localhost(compose):
    for file in COMPOSE_FILES:
        for name, service in load(file)["services"].items():
            for port in service.get("ports", []):
                assert str(port).startswith("127.0.0.1:"), f"{file}: {name} publishes {port}"
    assert "ports" not in compose["services"]["dask-worker"]  # scales with --scale: no fixed host port
    assert "container_name" not in compose["services"]["dask-worker"]


def test_start_order_is_gated_by_healthchecks(compose, s3):
    services = compose["services"]
    for name in ("postgres", "prefect-server", "dask-scheduler", "dask-worker", "prefect-worker"):
        assert services[name]["healthcheck"]["test"], name
    assert s3["services"]["minio"]["healthcheck"]["test"]
    for file in ("docker-compose.yml", "docker-compose.s3.yml"):
        for name, service in load(file)["services"].items():
            for dependency, condition in service.get("depends_on", {}).items():
                wanted = "service_completed_successfully" if dependency in ONE_SHOT else "service_healthy"
                assert condition == {"condition": wanted}, f"{file}: {name} -> {dependency}"
                defined = {**s3["services"], **services}[dependency]  # minio is only in the s3 file
                assert dependency in ONE_SHOT or "healthcheck" in defined, dependency
    assert set(services["prefect-worker"]["depends_on"]) == {
        "bpe-image",
        "prefect-server",
        "dask-scheduler",
        "dask-worker",
    }
    assert set(services["prefect-server"]["depends_on"]) == {"bpe-image", "postgres"}
    # A Dask worker is healthy once the scheduler lists it, so the Prefect worker starts with one.
    assert "http://dask-scheduler:8787/json/identity.json" in " ".join(services["dask-worker"]["healthcheck"]["test"])
    # The Prefect worker is healthy while it polls for flow runs (its own webserver says so).
    worker = services["prefect-worker"]
    assert "--with-healthcheck" in commands(worker)[1]
    port = worker["environment"]["PREFECT_WORKER_WEBSERVER_PORT"]
    assert f"http://127.0.0.1:{port}/health" in " ".join(worker["healthcheck"]["test"])
    assert worker["healthcheck"]["start_period"]  # `bpe deploy` runs first


def test_dask_workers_keep_their_memory_protection(compose):
    from dask.utils import parse_bytes

    command = compose["services"]["dask-worker"]["command"]
    limit = command[command.index("--memory-limit") + 1]
    default = re.fullmatch(r"\$\{DASK_WORKER_MEMORY:-([^}]+)\}", limit)
    assert default, f"--memory-limit {limit}: expected ${{DASK_WORKER_MEMORY:-<size>}}"
    assert parse_bytes(default.group(1)) >= 2**30
    assert parse_bytes(env_example()["DASK_WORKER_MEMORY"]) >= 2**30


def test_environment_and_volumes_agree_between_services(compose):
    services = compose["services"]
    server_port = services["prefect-server"]["command"][services["prefect-server"]["command"].index("--port") + 1]
    scheduler = services["dask-scheduler"]["command"]
    scheduler_address = f"tcp://dask-scheduler:{scheduler[scheduler.index('--port') + 1]}"
    worker_env = services["prefect-worker"]["environment"]
    assert worker_env["PREFECT_API_URL"] == f"http://prefect-server:{server_port}/api"
    assert worker_env["BPE_DASK_SCHEDULER"] == scheduler_address
    assert services["dask-worker"]["command"][2] == scheduler_address
    assert (
        "postgres:5432/prefect" in services["prefect-server"]["environment"]["PREFECT_SERVER_DATABASE_CONNECTION_URL"]
    )
    assert services["prefect-server"]["environment"]["PREFECT_SERVER_API_AUTH_STRING"].startswith(
        "${PREFECT_API_AUTH_STRING"
    )
    assert worker_env["PREFECT_API_AUTH_STRING"].startswith("${PREFECT_API_AUTH_STRING")
    # Flow runs and Dask workers must see the same files at the same paths.
    assert set(services["prefect-worker"]["volumes"]) == set(services["dask-worker"]["volumes"])
    assert services["prefect-worker"]["environment"]["BPE_ARTIFACT_ROOT"] == "/artifacts"
    assert services["dask-worker"]["environment"]["BPE_ARTIFACT_ROOT"] == "/artifacts"
    mounts = [v.split(":")[1] for v in services["prefect-worker"]["volumes"]]
    assert any(worker_env["BPE_EN_DATA"].startswith(m + "/") for m in mounts)  # en's data goes in a volume
    declared = set(compose["volumes"])
    for name, service in services.items():
        for volume in service.get("volumes", []):
            assert volume.split(":")[0] in declared, f"{name}: volume {volume} is not declared"
    assert {"pgdata", "data", "artifacts"} <= declared


def test_secrets_come_from_env_whose_example_is_committed():
    used = set()
    for file in COMPOSE_FILES:
        text = (REPO / file).read_text()
        used |= set(re.findall(r"\$\{([A-Z_0-9]+)", text))
        # A secret has no default: compose stops with the message when .env lacks it.
        for secret in ("POSTGRES_PASSWORD", "PREFECT_API_AUTH_STRING", "S3_ACCESS_KEY", "S3_SECRET_KEY"):
            for use in re.findall(rf"\$\{{{secret}[^}}]*\}}", text):
                assert use.startswith(f"${{{secret}:?"), f"{file}: {use}"
        # Nothing secret written in the files themselves.
        for name, service in load(file)["services"].items():
            for key, value in (service.get("environment") or {}).items():
                if re.search(r"PASSWORD|SECRET|AUTH_STRING|ACCESS_KEY|CONNECTION_URL", key):
                    assert "${" in str(value), f"{file}: {name}: {key} is written in the file"
    assert {"POSTGRES_PASSWORD", "PREFECT_API_AUTH_STRING", "S3_ACCESS_KEY", "S3_SECRET_KEY"} <= used
    assert used <= set(env_example()), used - set(env_example())
    assert ".env" in (REPO / ".gitignore").read_text().splitlines()


def test_the_worker_registers_the_deployments_on_start(compose):
    first, second = commands(compose["services"]["prefect-worker"])
    assert first[:2] == ["bpe", "deploy"] and second[:3] == ["prefect", "worker", "start"]
    assert first[first.index("--pool") + 1] == second[second.index("--pool") + 1]
    assert second[second.index("--type") + 1] == "process"


def test_s3_profile_points_workers_and_flows_at_the_object_store(compose, s3, moto):
    assert "minio" not in compose["services"], "the stack without S3 needs no S3 settings in .env"
    assert "s3data" in s3["volumes"]
    minio = s3["services"]["minio"]
    assert minio["profiles"] == ["s3"] and minio["image"].startswith("minio/minio")
    assert minio["healthcheck"]["test"] and "s3data:/data" in minio["volumes"]
    api_port = minio["command"][minio["command"].index("--address") + 1].lstrip(":")
    for name in ("dask-worker", "prefect-worker", "s3-init"):
        env = s3["services"][name]["environment"]
        assert set(env) == S3_ENV, name  # the standard variables only, and the project's two overrides
        assert env["AWS_ENDPOINT_URL"] == f"http://minio:{api_port}"
        assert env["AWS_ACCESS_KEY_ID"] == minio["environment"]["MINIO_ROOT_USER"]
        assert env["AWS_SECRET_ACCESS_KEY"] == minio["environment"]["MINIO_ROOT_PASSWORD"]
        assert env["BPE_ARTIFACT_ROOT"].startswith("s3://") and env["BPE_CACHE_DIR"].startswith("s3://")
    for name in ("dask-worker", "prefect-worker"):
        assert s3["services"][name]["depends_on"] == {"s3-init": {"condition": "service_completed_successfully"}}
    init = s3["services"]["s3-init"]
    assert init["profiles"] == ["s3"] and init["restart"] == "no"
    assert init["depends_on"]["minio"] == {"condition": "service_healthy"}
    # The test's stand-in: moto's S3 server on MinIO's port, built from the same base image.
    stand_in = moto["services"]["minio"]
    dockerfile = (REPO / stand_in["build"]["context"] / stand_in["build"]["dockerfile"]).read_text()
    assert re.search(r"^FROM python:3\.11-slim", dockerfile, re.M) and "moto[server]" in dockerfile
    assert stand_in["command"][:3] == ["python", "-m", "moto.server"] and stand_in["command"][-1] == api_port


def constraints() -> dict[str, str]:
    pins = {}
    for line in (REPO / "docker" / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            match = re.fullmatch(r"([A-Za-z0-9_.\-]+)==(\S+)", line.strip())
            assert match, f"docker/constraints.txt: not an exact pin: {line}"
            pins[re.sub(r"[-_.]+", "-", match.group(1)).lower()] = match.group(2)
    return pins


def compose_page_block(heading: str, language: str) -> str:
    """The first `language` block under `heading` of the Docker Compose page."""
    from tests.test_docs import blocks

    page = "docs/pipeline/compose.md"
    start = (REPO / page).read_text().splitlines().index(heading) + 1
    return next(b.code for b in blocks(page) if b.line > start and b.language == language)


def test_the_compose_page_mounts_the_multilingual_data_where_both_workers_read_it(compose):
    """The override the page gives puts every path of conf/multilingual.yaml (relative to the
    image's working directory, as the flow runs resolve them) under a read-only mount of the
    Prefect worker, which reads the dev set, and of the Dask workers, which count the shards:
    without it `bpe deploy` registers the deployment paused."""
    import posixpath

    override = yaml.safe_load(compose_page_block("## The multilingual deployment", "yaml"))["services"]
    workdir = re.search(r"^WORKDIR (\S+)", (REPO / "Dockerfile").read_text(), re.M).group(1)
    config = load("conf/multilingual.yaml")
    paths = [*config["languages"].values(), config["parity"]["dev"]]
    for service in ("prefect-worker", "dask-worker"):
        assert service in compose["services"]
        mounts = [volume.split(":") for volume in override[service]["volumes"]]
        for path in paths:
            where = posixpath.normpath(posixpath.join(workdir, path))
            assert any(where.startswith(target + "/") and mode == "ro" for _, target, mode in mounts), (service, where)


def test_the_compose_page_names_every_volume_down_v_deletes(compose, s3):
    stop = compose_page_block("## Stop it", "bash")
    page = (REPO / "docs" / "pipeline" / "compose.md").read_text()
    section = page[page.index("## Stop it") :]
    assert "docker compose down" in stop and "docker compose down -v" in stop
    for volume in (*compose["volumes"], *s3["volumes"]):
        assert f"`{volume}`" in section or volume in stop, f"the page does not say that down -v deletes {volume}"


def test_the_image_pins_every_dependency():
    from packaging.requirements import Requirement

    text = (REPO / "docker" / "constraints.txt").read_text()
    assert "docker/constraints.sh" in text.split("\n\n")[0]  # the header says how to regenerate it
    pins = constraints()
    assert "bpe-trainer" not in pins
    assert {"bokeh", "s3fs", "dask", "distributed", "prefect", "numba", "numpy", "pyarrow"} <= set(pins)
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    wanted = project["dependencies"] + [d for extra in ("dask", "pipeline", "s3") for d in extras.get(extra, [])]
    names = {re.sub(r"[-_.]+", "-", Requirement(spec).name).lower() for spec in wanted}
    assert {"bokeh", "s3fs"} <= names, "the image needs bokeh (Dask dashboard) and s3fs (s3://) from its extras"
    for spec in wanted:
        req = Requirement(spec)
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        if name == "bpe-trainer":
            continue
        assert name in pins, f"{name} is not pinned: sh docker/constraints.sh"
        assert req.specifier.contains(pins[name], prereleases=True), f"{name}=={pins[name]} does not meet {spec}"


def test_dockerfile_installs_this_project_pinned_on_python_311():
    text = (REPO / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11", text, re.M)
    assert "COPY docker/constraints.txt docker/constraints.txt" in text
    assert "pip install -r docker/constraints.txt" in text
    assert "pip install -c docker/constraints.txt -e '.[pipeline,s3]'" in text
    assert "COPY bpe bpe" in text and "COPY conf conf" in text
    assert re.search(r"^USER bpe", text, re.M)  # not root
    # Not root, the server cannot write the UI's files into Prefect's install directory (the UI
    # then answers 404): they go where the user may write. The kernels compiled at build time go
    # there too, so that the user's processes load them.
    ui = re.search(r"PREFECT_UI_STATIC_DIRECTORY=(\S+)", text).group(1)
    kernels = re.search(r"BPE_KERNEL_CACHE=(\S+)", text).group(1)
    assert ui.startswith("/opt/bpe/") and kernels.startswith("/opt/bpe/")
    assert re.search(r"chown -R bpe .*/opt/bpe", text)
    assert "bpe warm" in text
    ignored = (REPO / ".dockerignore").read_text().splitlines()
    assert {".venv", ".env", "artifacts"} <= set(ignored)
    assert not {"docker", "docker/", "bpe", "conf", "flows", "tasks"} & set(ignored)


# ------------------------------------------------------------------------------------------------
# For real: Docker.

PORT_VARS = ("PREFECT_HOST_PORT", "DASK_HOST_PORT", "DASK_DASHBOARD_HOST_PORT", "S3_HOST_PORT", "S3_CONSOLE_HOST_PORT")
BIG_VOCAB = 40_000  # the merge loop of the larger run takes ~10 s on 3 workers of a 2-core machine

# Run inside a container: writes a synthetic but varied corpus (a Zipf-distributed lexicon of
# 400,000 made-up words, ~100,000 of them used; 20 MB) to argv[1], and to argv[2] the same rows
# minus those the demo configuration holds out, i.e. exactly what its flow run trains on.
CORPUS_SCRIPT = r"""
import os, sys
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
from bpe.training.counting import holdout_mask
from bpe.pipeline.config import load_config

out, train = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(7)
onsets = ["", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z",
          "st", "tr", "pl", "ch", "sh", "th", "gr", "br", "kr"]
nuclei = ["a", "e", "i", "o", "u", "y", "ai", "ou", "ee", "\u00e4", "\u00e9", "\u00f6"]
codas = ["", "", "n", "r", "s", "t", "l", "m", "ng", "ck", "x"]
syllables = np.array([o + n + c for o in onsets for n in nuclei for c in codas])
lexicon = ["".join(rng.choice(syllables, k)) for k in rng.integers(1, 6, 400_000)]
words = [lexicon[r] for r in np.minimum(rng.zipf(1.15, 1_500_000), len(lexicon)) - 1]
punctuation = [",", ".", ";", "!", "?", " -", ":"]
docs, i = [], 0
while i < len(words):
    n = int(rng.integers(20, 200))
    text = " ".join(w.capitalize() if rng.random() < 0.08 else w for w in words[i:i + n])
    docs.append(text + punctuation[int(rng.integers(len(punctuation)))] + " " + str(int(rng.integers(100_000))))
    i += n
fraction = load_config("/app/conf/demo.yaml").holdout_fraction
kept = 0
for directory in (out, train):
    os.makedirs(directory, exist_ok=True)
for s in range(6):
    rows = pa.array(docs[s::6], pa.large_string())
    rest = rows.filter(pa.array(~holdout_mask(rows, fraction)))
    kept += len(rest)
    for directory, part in ((out, rows), (train, rest)):
        tmp = os.path.join(directory, f"part-{s:05d}.parquet.tmp")
        pq.write_table(pa.table({"text": part}), tmp)
        os.rename(tmp, tmp[: -len(".tmp")])
print(f"{len(docs)} documents, {sum(len(d.encode()) for d in docs):,} bytes; {kept} kept for training")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@lru_cache
def no_docker() -> str | None:
    """Why Docker cannot be used here, or None."""
    if shutil.which("docker") is None:
        return "no docker command"
    try:
        info = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=60)
        if info.returncode:
            return f"no Docker engine answers (`docker info` failed: {info.stderr.strip()[-200:]})"
        if subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=60).returncode:
            return "`docker compose` is not available"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`docker info` failed: {exc}"
    return None


@pytest.fixture
def docker_engine():
    reason = no_docker()
    if reason:
        pytest.skip(reason)


class Stack:
    """One compose project: its own name, image tag, host ports and env file (a copy of .env.example)."""

    def __init__(self, tmp_path: Path, files=("docker-compose.yml",), profiles=()) -> None:
        self.project = f"bpetest{uuid.uuid4().hex[:8]}"
        self.tag = self.project
        self.values = {**env_example(), "BPE_IMAGE_TAG": self.tag, **{v: str(free_port()) for v in PORT_VARS}}
        self.env_file = tmp_path / "compose.env"
        self.env_file.write_text("".join(f"{k}={v}\n" for k, v in self.values.items()))
        self.base = ["docker", "compose", "-p", self.project, "--env-file", str(self.env_file)]
        self.base += [a for f in files for a in ("-f", str(REPO / f))] + [a for p in profiles for a in ("--profile", p)]
        # The shell's variables would win over the env file's.
        ours = set(self.values) | {"COMPOSE_FILE", "COMPOSE_PROFILES", "COMPOSE_PROJECT_NAME"}
        self.environ = {k: v for k, v in os.environ.items() if k not in ours}
        self.timings: dict[str, float] = {}
        self.tags = {self.tag}

    def run(self, *args: str, timeout: float = 900, check: bool = True, env: dict | None = None, **kw):
        done = subprocess.run(
            [*self.base, *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**self.environ, **(env or {})},
            **kw,
        )
        if check and done.returncode:
            raise AssertionError(
                f"`docker compose {' '.join(args)}` exited {done.returncode}:\n"
                f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            )
        return done

    def timed(self, label: str, *args: str, **kw):
        started = time.perf_counter()
        try:
            return self.run(*args, **kw)
        finally:
            self.timings[label] = time.perf_counter() - started

    def exec(self, service: str, *command: str, **kw) -> str:
        return self.run("exec", "-T", service, *command, **kw).stdout

    def containers(self, service: str) -> list[str]:
        return sorted(self.run("ps", "-q", service).stdout.split())

    def running(self, service: str) -> list[str]:
        labels = [f"label=com.docker.compose.{k}={v}" for k, v in (("project", self.project), ("service", service))]
        return docker("ps", "-q", "--no-trunc", "--filter", labels[0], "--filter", labels[1]).split()

    def health(self, container: str) -> str:
        return docker("inspect", "-f", "{{if .State.Health}}{{.State.Health.Status}}{{end}}", container).strip()

    def wait_healthy(self, service: str, timeout: float = 300) -> None:
        wait_for(
            f"{service} to be healthy",
            lambda: all(self.health(c) == "healthy" for c in self.containers(service)),
            timeout,
        )

    def url(self, var: str, path: str) -> str:
        return f"http://127.0.0.1:{self.values[var]}{path}"

    def dask_workers(self) -> int:
        with urllib.request.urlopen(self.url("DASK_DASHBOARD_HOST_PORT", "/json/identity.json"), timeout=5) as r:
            return len(json.load(r)["workers"])

    def prefect(self, path: str, body: dict | None = None):
        auth = base64.b64encode(self.values["PREFECT_API_AUTH_STRING"].encode()).decode()
        headers = {"Authorization": f"Basic {auth}", "Content-Type": "application/json"}
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url("PREFECT_HOST_PORT", "/api" + path), data=data, headers=headers)
        with urllib.request.urlopen(request, timeout=10) as r:
            return json.load(r)

    def deployment_run(self, *params: str) -> list[str]:
        """`docker compose`'s arguments for `prefect deployment run 'train-bpe/demo' -p P ... --watch` in the worker."""
        args = [a for p in params for a in ("-p", p)]
        return ["exec", "-T", "prefect-worker", "prefect", "deployment", "run", "train-bpe/demo", *args, "--watch"]

    def run_deployment(self, *params: str, label: str) -> str:
        """`prefect deployment run 'train-bpe/demo' --watch` in the Prefect worker's container."""
        done = self.timed(label, *self.deployment_run(*params), check=False)
        out = done.stdout + done.stderr
        assert done.returncode == 0 and "Completed" in out, f"{label}: the flow run did not complete:\n{out[-4000:]}"
        return out

    def logs(self) -> str:
        return self.run("logs", "--no-color", "--tail", "150", check=False, timeout=120).stdout

    def leftovers(self) -> dict[str, list[str]]:
        label = f"label=com.docker.compose.project={self.project}"
        return {
            "containers": docker("ps", "-aq", "--filter", label).split(),
            "volumes": docker("volume", "ls", "-q", "--filter", label).split(),
            "networks": docker("network", "ls", "-q", "--filter", label).split(),
        }

    def remove(self) -> None:
        """`down -v` (whatever state the test left) and the test's image tags."""
        self.run("down", "-v", "--remove-orphans", "--timeout", "5", check=False, timeout=300)
        for tag in self.tags:
            subprocess.run(["docker", "rmi", f"bpe-trainer:{tag}"], capture_output=True, timeout=120)

    def report(self, title: str) -> None:
        print(f"\n{title} ({self.project}): " + ", ".join(f"{k} {v:.1f} s" for k, v in self.timings.items()))

    @contextlib.contextmanager
    def removed_after(self, title: str) -> Iterator[Stack]:
        """A test's use of the stack: its logs printed if the test fails; then removed, its timings reported."""
        try:
            yield self
        except BaseException:
            print(f"\n--- docker compose logs ({self.project}) ---\n{self.logs()}")
            raise
        finally:
            self.remove()
            self.report(title)


def docker(*args: str) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"docker {' '.join(args)}: {done.stderr[-1000:]}"
    return done.stdout


def container_log(container: str) -> list[str]:
    """A container's output lines, stdout and stderr (where Prefect's log lines go) together."""
    done = subprocess.run(
        ["docker", "logs", container], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120
    )
    return done.stdout.splitlines()


def wait_for(what: str, predicate, timeout: float, interval: float = 1.0):
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            value = predicate()
        except Exception as exc:  # not up yet
            value, last = None, exc
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last error: {last!r})")
        time.sleep(interval)


def built_services(output: str) -> list[str]:
    return re.findall(r"^Building ([\w.-]+)\s*$", output, re.M)


def image_kernels(image: str) -> set[str]:
    return set(docker("run", "--rm", "--entrypoint", "find", image, "/opt/bpe/kernels", "-type", "f").split())


def container_kernels(container: str) -> set[str]:
    return set(docker("exec", container, "find", "/opt/bpe/kernels", "-type", "f").split())


@pytest.mark.services
def test_the_stack_trains_survives_a_killed_worker_keeps_versions_and_cleans_up(tmp_path, docker_engine):
    stack = Stack(tmp_path)
    built = f"{stack.tag}-built"
    stack.tags.add(built)
    with stack.removed_after("compose timings"):
        # The image, built once: one service carries `build`.
        done = stack.timed("build", "build", env={"BPE_IMAGE_TAG": built}, timeout=1800)
        assert built_services(done.stdout + done.stderr) == ["bpe-image"]
        image = f"bpe-trainer:{built}"
        pins = constraints()
        frozen = re.findall(r"^([A-Za-z0-9_.\-]+)==(\S+)$", docker("run", "--rm", image, "pip", "freeze"), re.M)
        frozen = {re.sub(r"[-_.]+", "-", k).lower(): v for k, v in frozen}
        assert {k: frozen.get(k) for k in pins} == pins  # the image has exactly the pinned versions

        # Up with two Dask workers; the Prefect worker starts once one is healthy.
        # Its tag (the env file's) was never built, as on a fresh machine: `up` builds it (from the
        # layer cache here) rather than trying to pull it.
        done = stack.timed("up (with a cached build)", "up", "-d", "--scale", "dask-worker=2", timeout=1800)
        out = done.stdout + done.stderr
        assert built_services(out) == ["bpe-image"] and "Pulling" not in out and "pull access" not in out, out
        started = time.perf_counter()
        stack.wait_healthy("prefect-worker")
        stack.wait_healthy("dask-worker")
        stack.timings["until the prefect-worker is healthy"] = time.perf_counter() - started
        assert stack.dask_workers() == 2
        with urllib.request.urlopen(stack.url("DASK_DASHBOARD_HOST_PORT", "/status"), timeout=10) as r:
            page = r.read().decode()
            assert r.status == 200 and "Dask needs" not in page and "bokeh" in page.lower()  # the real dashboard
        deployments = {d["name"]: d for d in stack.prefect("/deployments/filter", {})}
        assert {"demo", "en"} <= set(deployments)
        en = deployments["en"]  # its data (/data/en) is not there: its schedule must not fire and fail
        assert en["paused"] or not any(s["active"] for s in en["schedules"]), en
        assert not deployments["demo"]["paused"]

        # The demo deployment publishes v0001, with the kernels compiled into the image.
        stack.run_deployment(label="first run")
        listing = stack.exec("prefect-worker", "bpe", "versions", "/artifacts/demo")
        assert re.search(r"^v0001 .*\(latest\)", listing, re.M), listing

        # Three workers.
        stack.timed("scale to 3", "up", "-d", "--scale", "dask-worker=3", timeout=600)
        wait_for("3 Dask workers", lambda: stack.dask_workers() == 3, 120)

        # A larger corpus in the data volume, trained with one worker container killed mid-loop.
        worker = stack.containers("prefect-worker")[0]
        made = subprocess.run(
            ["docker", "exec", "-i", worker, "python", "-", "/data/big", "/data/big-train"],
            input=CORPUS_SCRIPT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert made.returncode == 0, made.stderr[-3000:]
        print(f"\nlarger corpus: {made.stdout.strip()}")
        logged_before = len(container_log(worker))
        # An override is an experiment: promoted, it becomes latest.
        params = ('data=["/data/big"]', "name=big", f"vocab_size={BIG_VOCAB}", "promote=true")
        run = subprocess.Popen(
            [*stack.base, *stack.deployment_run(*params)],
            cwd=REPO,
            env=stack.environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        started = time.perf_counter()
        try:
            # The flow run's logs reach the Prefect worker's output; the first "merge:" progress
            # line comes with the loop's first round.
            def merging() -> bool:
                new = container_log(worker)[logged_before:]
                return any("train-merges" in line and " - merge: " in line for line in new)

            wait_for("the merge loop to start", merging, timeout=600, interval=0.2)
            victim = stack.containers("dask-worker")[0]
            killed_at = time.perf_counter() - started
            docker("kill", victim)
            out, _ = run.communicate(timeout=900)
        finally:
            if run.poll() is None:
                run.kill()
        stack.timings["worker-kill run"] = time.perf_counter() - started
        assert run.returncode == 0 and "Completed" in out, f"the run with a killed worker failed:\n{out[-4000:]}"
        manifest = json.loads(stack.exec("prefect-worker", "cat", "/artifacts/big/v0001/manifest.json"))
        engine = manifest["engine"]
        assert engine["recoveries"] >= 1, f"the kill ({killed_at:.1f} s in) came after the merge loop: {engine}"
        flow_logs = "\n".join(container_log(worker)[logged_before:])
        assert "lost; rebuilt on" in flow_logs
        print(
            f"\nworker-kill run: killed {victim[:12]} {killed_at:.1f} s after the request; "
            f"{manifest['result']['merges']:,} merges, engine {engine}"
        )

        # The same merges as the local engine on the same rows.
        settings = manifest["settings"]
        local = [
            "bpe",
            "train",
            "/data/big-train",
            "--vocab-size",
            str(settings["vocab_size"]),
            "--pattern",
            settings["pattern"],
            "--min-frequency",
            str(settings["min_frequency"]),
            "--tie-break",
            settings["tie_break"],
            "--text-column",
            settings["text_column"],
            "--out",
            "/tmp/local-big",
            "--quiet",
        ]
        for token in settings["special_tokens"]:
            local += ["--special-token", token]
        done = stack.timed("local engine, same data", "exec", "-T", "prefect-worker", *local, timeout=900)
        assert "compiling the kernels" not in done.stderr
        ours = stack.exec("prefect-worker", "cat", "/tmp/local-big/merges.txt").splitlines()
        theirs = stack.exec("prefect-worker", "cat", "/artifacts/big/v0001/merges.txt").splitlines()
        first = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
        assert ours == theirs, f"merges differ: local {len(ours)}, Dask {len(theirs)} lines, first at line {first}"
        assert len(theirs) > BIG_VOCAB // 2
        # No container compiled a kernel: all of both engines' came with the image, usable by `bpe`.
        baked = image_kernels(f"bpe-trainer:{stack.tag}")
        assert baked, "no compiled kernels in the image"
        for container in stack.running("dask-worker") + stack.running("prefect-worker"):
            assert container_kernels(container) == baked, f"{container} compiled kernels at run time"

        # `down` then `up`: the versions are still there.
        stack.timed("down", "down", timeout=600)
        stack.timed("up again", "up", "-d", timeout=900)
        stack.wait_healthy("prefect-worker")
        for name in ("demo", "big"):
            listing = stack.exec("prefect-worker", "bpe", "versions", f"/artifacts/{name}")
            assert re.search(r"^v0001 .*\(latest\)", listing, re.M), listing

        # `down -v`: nothing left.
        stack.timed("down -v", "down", "-v", timeout=600)
        assert stack.leftovers() == {"containers": [], "volumes": [], "networks": []}


@pytest.mark.services
def test_the_s3_profile_keeps_artifacts_and_the_count_cache_in_object_storage(tmp_path, docker_engine):
    stack = Stack(tmp_path, files=COMPOSE_FILES, profiles=("s3",))
    with stack.removed_after("compose timings, s3 profile with moto"):
        done = stack.timed("build", "build", timeout=1800)
        assert sorted(built_services(done.stdout + done.stderr)) == ["bpe-image", "minio"]  # minio: moto here
        stack.timed("up", "up", "-d", "--scale", "dask-worker=2", timeout=900)
        stack.wait_healthy("prefect-worker")
        init = stack.containers("s3-init")
        assert docker("inspect", "-f", "{{.State.ExitCode}}", *init).split() == ["0"]
        values = stack.values
        bucket = values["S3_BUCKET"]
        for service in ("dask-worker", "prefect-worker"):
            env = stack.exec(service, "env")
            assert f"BPE_ARTIFACT_ROOT=s3://{bucket}/artifacts" in env and f"BPE_CACHE_DIR=s3://{bucket}/cache" in env

        stack.run_deployment(label="first run")
        listing = stack.exec("prefect-worker", "bpe", "versions", f"s3://{bucket}/artifacts/demo")
        assert re.search(r"^v0001 .*\(latest\)", listing, re.M), listing
        script = f"print(json.dumps([fs.find('{bucket}/artifacts/demo'), fs.find('{bucket}/cache')]))"
        found = stack.exec("prefect-worker", "python", "-c", "import json, s3fs; fs = s3fs.S3FileSystem(); " + script)
        artifacts, cache = json.loads(found)
        assert any(p.endswith("/v0001/merges.txt") for p in artifacts) and cache, (artifacts, cache)
        assert stack.exec("prefect-worker", "ls", "-A", "/artifacts").split() == []  # nothing went to the volume
        stack.run_deployment(label="second run (no new data)")
        stack.timed("down -v", "down", "-v", timeout=600)
        assert stack.leftovers() == {"containers": [], "volumes": [], "networks": []}

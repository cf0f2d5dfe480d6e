"""docker-compose.yml and the Dockerfile, checked structurally (no Docker engine runs here): every
service present, commands the installed prefect/dask/bpe tools accept, environment and volumes
consistent between services, healthchecks gating start order, nothing published beyond 127.0.0.1."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
SERVICES = {"postgres", "prefect-server", "dask-scheduler", "dask-worker", "prefect-worker"}
PROJECT_SERVICES = SERVICES - {"postgres"}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


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
    done = subprocess.run([str(tool), *words[1:], "--help"], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "250"}, timeout=60)  # fmt: skip
    assert done.returncode == 0, f"`{' '.join(words)}` is not a command of the installed tools: {done.stderr[-500:]}"
    return done.stdout


def test_every_service_is_there_and_built_from_one_image(compose):
    assert set(compose["services"]) == SERVICES
    for name in PROJECT_SERVICES:
        service = compose["services"][name]
        assert service["build"] == "." and service["image"] == "bpe-trainer:latest", name
    assert compose["services"]["postgres"]["image"].startswith("postgres:")


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
    for name, service in compose["services"].items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port}"
    assert "ports" not in compose["services"]["dask-worker"]  # scales with --scale: no fixed host port
    assert "container_name" not in compose["services"]["dask-worker"]


def test_start_order_is_gated_by_healthchecks(compose):
    services = compose["services"]
    for name in ("postgres", "prefect-server", "dask-scheduler"):
        assert services[name]["healthcheck"]["test"], name
    for name, service in services.items():
        for dependency, condition in service.get("depends_on", {}).items():
            assert condition == {"condition": "service_healthy"}, f"{name} -> {dependency}"
            assert "healthcheck" in services[dependency]
    assert set(services["prefect-worker"]["depends_on"]) == {"prefect-server", "dask-scheduler"}
    assert set(services["prefect-server"]["depends_on"]) == {"postgres"}


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
    declared = set(compose["volumes"])
    for name, service in services.items():
        for volume in service.get("volumes", []):
            assert volume.split(":")[0] in declared, f"{name}: volume {volume} is not declared"
    assert {"pgdata", "data", "artifacts"} <= declared


def test_secrets_come_from_env_whose_example_is_committed(compose):
    text = (REPO / "docker-compose.yml").read_text()
    used = set(re.findall(r"\$\{([A-Z_]+)", text))
    example = dict(
        line.split("=", 1)
        for line in (REPO / ".env.example").read_text().splitlines()
        if "=" in line and line[0] != "#"
    )
    assert used == {"POSTGRES_PASSWORD", "PREFECT_API_AUTH_STRING"} and used <= set(example)
    assert ".env" in (REPO / ".gitignore").read_text().splitlines()
    assert "password" not in text.lower().replace("postgres_password", "").replace("${", "")


def test_the_worker_registers_the_deployments_on_start(compose):
    first, second = commands(compose["services"]["prefect-worker"])
    assert first[:2] == ["bpe", "deploy"] and second[:3] == ["prefect", "worker", "start"]
    assert first[first.index("--pool") + 1] == second[second.index("--pool") + 1]
    assert second[second.index("--type") + 1] == "process"


def test_dockerfile_installs_this_project_on_python_311():
    text = (REPO / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11", text, re.M)
    assert "pip install -e '.[pipeline]'" in text and "COPY bpe bpe" in text and "COPY conf conf" in text
    assert re.search(r"^USER bpe", text, re.M)  # not root
    # Not root, the server cannot write the UI's files into Prefect's install directory (the UI
    # then answers 404): they go where the user may write.
    ui = re.search(r"PREFECT_UI_STATIC_DIRECTORY=(\S+)", text).group(1)
    assert ui.startswith("/opt/bpe/") and re.search(r"chown -R bpe .*/opt/bpe", text)
    ignored = (REPO / ".dockerignore").read_text().splitlines()
    assert {".venv", ".env", "artifacts"} <= set(ignored)

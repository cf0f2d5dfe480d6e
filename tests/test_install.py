"""The install: CI runs the README's two commands as written, and the lock (constraints.txt) satisfies
the declared dependencies and agrees with the image's."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def readme_commands() -> dict[str, str]:
    readme = (REPO / "README.md").read_text()
    return {name: re.search(rf"<!-- {name} command -->\n`([^`]+)`", readme).group(1) for name in ("demo", "test")}


def test_ci_runs_the_readme_commands_verbatim_and_installs_nothing_of_its_own():
    """CI is what a newcomer does: the README's two lines, as written, in order, and nothing else
    (no pip upgrade, no install line), so a first command that fails on a fresh machine fails CI."""
    commands = readme_commands()
    assert "bpe demo" in commands["demo"] and "pip install" in commands["demo"] and "pytest" in commands["test"]
    ci = (REPO / ".ci" / "run").read_text()
    code = [line for line in ci.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert not [line for line in code if re.search(r"\bpip\b|\bvenv\b|python3? -m", line)], code
    extract = "".join(line + "\n" for line in code if line.startswith("readme_command()"))
    for name, command in commands.items():
        found = subprocess.run(
            ["bash", "-c", f"{extract}readme_command {name}"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
        assert found == command
    assert re.search(r"for name in demo test; do", ci) and 'bash -c "$command"' in ci


def pins(path: Path) -> dict[str, str]:
    """name -> version of a `name==version` constraints file (names normalized as pip does)."""
    found = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            found[re.sub(r"[-_.]+", "-", name).lower()] = version
    return found


def test_the_lock_satisfies_the_declared_dependencies_and_agrees_with_the_image():
    """constraints.txt (the README's first command, CI) pins every dependency the project declares,
    each within its declared range, and the image's pins (docker/constraints.txt) are the same
    versions of what they share, so what CI tests is what the image runs."""
    import tomllib

    from packaging.requirements import Requirement

    lock, image = pins(REPO / "constraints.txt"), pins(REPO / "docker" / "constraints.txt")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    for text in declared:
        requirement = Requirement(text)
        name = re.sub(r"[-_.]+", "-", requirement.name).lower()
        assert name in lock, f"{name} is not pinned in constraints.txt: sh docker/constraints.sh"
        assert requirement.specifier.contains(lock[name], prereleases=True), (text, lock[name])
    assert {name: v for name, v in image.items() if name in lock and lock[name] != v} == {}

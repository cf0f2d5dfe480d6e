"""Project wiring: what the README promises and the build relies on."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import bpe

REPO = Path(__file__).resolve().parent.parent


def test_kernel_cache_covers_every_module_with_kernels():
    with_kernels = {p.name for p in (REPO / "bpe").glob("*.py") if "@njit" in p.read_text()}
    assert with_kernels == set(bpe.KERNEL_MODULES)


def test_ci_runs_the_readme_test_command():
    readme = (REPO / "README.md").read_text()
    demo = re.search(r"<!-- demo command -->\n`([^`]+)`", readme).group(1)
    test = re.search(r"<!-- test command -->\n`([^`]+)`", readme).group(1)
    assert "bpe demo" in demo and "pytest" in test
    extracted = subprocess.run(
        ["bash", "-c", "grep -A1 '^<!-- test command -->' README.md | sed -n '2p' | sed 's/^ *//'"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert extracted.strip("`") == test
    assert "grep -A1 '^<!-- test command -->' README.md" in (REPO / ".ci" / "run").read_text()

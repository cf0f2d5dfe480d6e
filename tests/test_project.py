"""Project wiring: what the README promises and the build relies on."""

from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_every_kernel_lives_in_the_engine_whose_source_keys_the_kernel_cache():
    kernel_files = [p for p in (REPO / "bpe").rglob("*.py") if "@njit" in p.read_text()]
    assert kernel_files and {p.parent for p in kernel_files} == {REPO / "bpe" / "engine"}
    import numba

    import bpe.engine  # noqa: F401  (sets the cache directory)

    digest = hashlib.sha256()
    for path in sorted((REPO / "bpe" / "engine").glob("*.py")):
        digest.update(path.name.encode() + path.read_bytes())
    assert numba.config.CACHE_DIR.endswith(digest.hexdigest()[:16])


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

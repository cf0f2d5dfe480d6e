"""Resident memory: numba's compiler (LLVM, ~100 MiB of code touched whole at import) can leave a
process's resident memory once its kernels are loaded, and compiling and running kernels still
works after. A fresh process each time: the pages are the process's own. (That Dask workers do
so is in tests/distributed/test_dask.py.)
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tests.reference import train_reference


def run_fresh(body: str) -> dict:
    script = textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_kernels_compile_and_run_after_the_compiler_is_released():
    """The compiler's pages leave, and a kernel compiled after, and merges learnt after, are right."""
    found = run_fresh(
        """
        import json
        import numpy as np
        from numba import njit
        from bpe.engine.count import WordCounts
        from bpe.engine.merge import learn_merges
        from bpe.engine.resident import release_compiler, resident_kb
        from bpe.engine.rules import MergeRules

        import bpe.engine.merge  # numba and LLVM imported: the library is resident
        before = resident_kb()
        advised = release_compiler()
        after = resident_kb()

        @njit
        def total(values):  # compiled now, after the release: LLVM is mapped back as it runs
            s = 0
            for v in values:
                s += v
            return s

        counts = WordCounts.from_dict({b"hello": 5, b"yellow": 3, b"low": 2})
        merged = learn_merges(counts, 6, MergeRules("bytes", 1, None, None))
        print(json.dumps({"before": before, "after": after, "advised": advised, "total": int(total(np.arange(10))),
                          "merges": merged.merges.tolist()}))
        """
    )
    assert found["before"] > 32 * 1024, "LLVM should be resident after numba's import"
    assert found["advised"] > 0 and found["after"] < found["before"] // 4
    assert found["total"] == 45
    assert found["merges"] == [list(m) for m in train_reference({b"hello": 5, b"yellow": 3, b"low": 2}, 6)]

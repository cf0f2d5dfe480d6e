"""What a process keeps resident, and giving back what it no longer needs, so that its peak is
the largest phase of the work and not the sum of phases plus the compiler.

- glibc keeps memory a phase freed for the next `malloc`: `malloc_trim` hands it back.
- numba's compiler (llvmlite's LLVM, about 100 MiB of code) is mapped whole into every process
  that imports numba: LLVM's static initializers touch nearly every page of it at import. Once
  kernels are loaded it is not run again, yet it counts in the process's resident memory, which
  is what Dask's memory monitor pauses and restarts workers by. Its pages are clean copies of the
  library file: unmapping them (`madvise(MADV_DONTNEED)`) loses nothing, they stay in the page
  cache, shared with every other process, and are mapped again on demand if a kernel is
  compiled or loaded later.
- Arrow's and Parquet's code (about 60 MiB resident once a file is read) is the same case for a
  Dask worker that holds a word table for the merge loop, and reads no file until it is done.
"""

from __future__ import annotations

import ctypes
import mmap
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the run without compiled kernels calls `release_memory`, and loads no numpy
    import numpy as np

COMPILER = "/llvmlite/"  # where llvmlite's library (LLVM) is, as /proc maps it
READER = "/pyarrow/"  # and Arrow's and Parquet's: a word table's merge loop runs none of them
MADV_DONTNEED = 4  # Linux's value
PAGE = mmap.PAGESIZE
RELEASED_AT_LEAST = 16 << 20  # `release_pages`: smaller arrays share glibc's heap with others

_LOADED_BY = {COMPILER: "llvmlite.binding.ffi", READER: "pyarrow.lib"}  # the module that maps it
# (start, length) of each library's clean mappings, found once: Python never unloads an extension
# module or the libraries it loaded, so the ranges stay theirs for the life of the process.
_code: dict[str, list[tuple[int, int]]] = {}
_madvise: list = []  # the C library's madvise, set up on first use


def release_memory() -> None:
    """Hand back what glibc keeps from freed memory and the compiler's pages (`release_compiler`)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    release_compiler()


def release_pages(array: np.ndarray, start: int, end: int) -> int:
    """Hand back the pages wholly inside bytes start..end of `array`, which its owner never reads
    again (Linux; elsewhere nothing): a phase that reads a large array once, front to back, lets go
    of it as it goes rather than at its end. Returns the bytes handed back; read after, they are
    zeros. Only an array of `RELEASED_AT_LEAST` bytes or more, which has its own mapping."""
    if not sys.platform.startswith("linux") or array.nbytes < RELEASED_AT_LEAST:
        return 0
    first = -(-(array.ctypes.data + start) // PAGE) * PAGE
    last = (array.ctypes.data + end) // PAGE * PAGE
    if last <= first:
        return 0
    return last - first if _dont_need(first, last - first) else 0


class ReleasedBehind:
    """Hands back the pages of an array that its owner reads once, front to back, as the reading
    passes them (`release_pages`): `passed(end)` says bytes before `end` are read."""

    def __init__(self, array: np.ndarray, start: int = 0) -> None:
        self.array, self.start, self.end = array, start, start

    def passed(self, end: int) -> None:
        # From the page the last call ended in: it was only partly read then.
        release_pages(self.array, max(self.end - PAGE, self.start), end)
        self.end = end


def release_compiler() -> int:
    """Unmap the compiler's code (`release_code`): kernels loaded, it is not run again."""
    return release_code(COMPILER)


def release_code(where: str) -> int:
    """Unmap from this process the pages of the libraries whose path holds `where` (`COMPILER`,
    `READER`), on Linux; return the bytes of address space advised. Only read-only mappings that
    hold no private (anonymous) page are touched: what the kernel maps back on demand is the same."""
    if not sys.platform.startswith("linux") or _LOADED_BY.get(where, "") not in sys.modules:
        return 0
    if not _code.get(where):
        _code[where] = _clean_mappings(where)
    if not _code[where]:
        return 0
    return sum(length for start, length in _code[where] if _dont_need(start, length))


def _dont_need(start: int, length: int) -> bool:
    """`madvise(start, length, MADV_DONTNEED)` (Linux): whether it was done."""
    if not _madvise:
        function = ctypes.CDLL(None, use_errno=True).madvise
        function.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        _madvise.append(function)
    return _madvise[0](start, length, MADV_DONTNEED) == 0


def _clean_mappings(where: str) -> list[tuple[int, int]]:
    """(start, length) of each mapping of a file whose path holds `where` that is not writable and
    holds no anonymous (copied-on-write, relocated) page: pages that only ever mirror the file."""
    found: list[tuple[int, int]] = []
    current: list[int] | None = None  # start, length, anonymous kB of the mapping being read
    mappings: list[list[int]] = []
    try:
        with open("/proc/self/smaps") as smaps:
            for line in smaps:
                fields = line.split()
                if not fields[0].endswith(":"):  # a mapping's header: range perms offset dev inode [path]
                    current = None
                    if len(fields) >= 6 and where in fields[5] and "w" not in fields[1]:
                        start, end = (int(x, 16) for x in fields[0].split("-"))
                        current = [start, end - start, 0]
                        mappings.append(current)
                elif current is not None and fields[0] == "Anonymous:":
                    current[2] = int(fields[1])
    except OSError:
        return []
    for start, length, anonymous in mappings:
        if anonymous == 0:
            found.append((start, length))
    return found


def resident_kb(where: str = COMPILER) -> int:
    """kB of the pages this process has resident of the libraries whose path holds `where`
    (Linux; elsewhere 0): what `release_code` leaves of them."""
    kb, inside = 0, False
    try:
        with open("/proc/self/smaps") as smaps:
            for line in smaps:
                fields = line.split()
                if not fields[0].endswith(":"):
                    inside = len(fields) >= 6 and where in fields[5]
                elif inside and fields[0] == "Rss:":
                    kb += int(fields[1])
    except OSError:
        return 0
    return kb

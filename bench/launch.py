"""Starts one command for bench/measure.py and reports what the kernel measured of it.

    python -I -S bench/launch.py FD COMMAND...

Writes {"wall", "status", "maxrss_kb", "cpu"} as one JSON object to file descriptor FD, then
exits with the command's exit status. Why a process in between: Linux carries a process's peak
resident memory across exec, and a child started with vfork (as subprocess and posix_spawn start
them) carries its parent's peak, so a command started straight from a benchmark that holds
pyarrow and manifests (70 MB or more) would report at least that much. This process runs without
site or any import beyond the standard library's smallest modules (about 8 MB, below the 10 MB of
any Python command), so a command started from it reports its own peak.
"""

import json
import os
import sys
import time


def main() -> None:
    fd, command = int(sys.argv[1]), sys.argv[2:]
    os.set_inheritable(fd, False)  # the command never holds the report's pipe open
    started = time.perf_counter()
    try:
        pid = os.posix_spawnp(command[0], command, os.environ)
    except OSError as error:
        print(f"{command[0]}: {error}", file=sys.stderr)
        sys.exit(127)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - started
    report = {
        "wall": wall,
        "status": os.waitstatus_to_exitcode(status),
        "maxrss_kb": usage.ru_maxrss,
        "cpu": usage.ru_utime + usage.ru_stime,
    }
    with os.fdopen(fd, "w") as out:
        json.dump(report, out)
    code = report["status"]
    sys.exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()

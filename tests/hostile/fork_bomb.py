"""A fork bomb: every process forks without end, each child forking too, and starts threads
that never end (the run's bound on processes and threads must stop it).

It starts only where a hard bound of at most MOST is already on it (its pids cgroup's limit,
or RLIMIT_NPROC on a uid that is not root), else it exits 3 saying so: a test of the suite
must never take the machine it runs on, whatever went wrong in the suite.
"""

import contextlib
import os
import resource
import sys
import threading
import time
from pathlib import Path

from _common import out_dir

MOST = 4096  # the suite's bounds are far below: a system's own `ulimit -u` is no bound here


def bounded() -> str:
    """What bounds this process's descendants to MOST at most ("" where nothing does)."""
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    if os.getuid() != 0 and nproc != resource.RLIM_INFINITY and nproc <= MOST:
        return f"RLIMIT_NPROC {nproc}"
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        root = "/sys/fs/cgroup/pids" if "pids" in controllers.split(",") else \
            "/sys/fs/cgroup" if controllers == "" else ""
        limit = Path(root, path.lstrip("/"), "pids.max")
        found = limit.read_text().strip() if root and limit.is_file() else ""
        if found.isdigit() and int(found) <= MOST:
            return f"pids.max {found}"
    return ""


def idle() -> None:
    while True:
        time.sleep(60)


out_dir()
if not bounded():
    print("fork_bomb: no hard bound on processes here: not started", file=sys.stderr)
    sys.exit(3)
while True:
    with contextlib.suppress(RuntimeError):  # "can't start new thread": the bound holds
        threading.Thread(target=idle, daemon=True).start()
    try:
        os.fork()  # parent and child go on alike
    except OSError:
        time.sleep(0.001)

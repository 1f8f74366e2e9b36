"""Containment of a run: Linux namespaces where the kernel allows them, else the marker scan.

With namespaces (`unshare --pid --fork --mount-proc --net --mount`, then tests/harness/nsinit.py
as PID 1) a run cannot leave anything behind (when PID 1 ends, the kernel ends every process
of the namespace, whatever its environment or session), cannot meet another run on a port or a
/tmp path (its own loopback; its own /tmp, an overlay through which the old one shows),
cannot reach the network, and cannot write outside its run directory (the suite's own files
are read-only to it). Where unshare is refused (e.g.
an unprivileged Docker grader), runs fall back to the environment-marker scan of
tests/harness/runner.py, and the run cache never runs two runs of one submission at once.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.harness.procfs import live_processes

NSINIT = Path(__file__).resolve().parent / "nsinit.py"
NAMESPACES = "namespaces"
MARKER_SCAN = "marker-scan"
FORCE_VAR = "CAPSTONE_CONTAINMENT"  # "marker-scan" forces the fallback (to test it)
_FLAGS = ("--pid", "--fork", "--mount-proc", "--net", "--mount")


@functools.lru_cache(maxsize=1)
def _unshare_prefix() -> tuple[str, ...] | None:
    """The unshare command that works here (as root, or in a user namespace), or None."""
    exe = shutil.which("unshare")
    if exe is None or os.environ.get(FORCE_VAR) == MARKER_SCAN:
        return None
    for extra in ((), ("--user", "--map-root-user")):
        prefix = (exe, *extra, *_FLAGS)
        try:
            probe = subprocess.run([*prefix, sys.executable, "-I", "-c", "pass"],
                                   capture_output=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return prefix
    return None


def mode() -> str:
    """Which containment runs get on this machine: NAMESPACES or MARKER_SCAN."""
    return NAMESPACES if _unshare_prefix() is not None else MARKER_SCAN


def wrap(argv: list[str], run_dir: Path, report: Path) -> list[str]:
    """`argv` as started inside its own namespaces (unchanged under the marker scan)."""
    prefix = _unshare_prefix()
    if prefix is None:
        return argv
    return [*prefix, sys.executable, "-I", str(NSINIT), "--run", str(run_dir),
            "--report", str(report), "--", *argv]


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def wrapper_pids(leader: int) -> set[int]:
    """The unshare process and nsinit (host pids): the suite's, not the submission's."""
    try:
        return {leader, *_children(leader)}
    except (OSError, ValueError):
        return {leader}


def host_pids(leader: int) -> dict[int, int]:
    """Namespace pid -> host pid of every process in the PID namespace below `leader` (the
    unshare process); empty when there is none (under the marker scan)."""
    try:
        ns = os.readlink(f"/proc/{_children(leader)[0]}/ns/pid")
    except (OSError, IndexError, ValueError):
        return {}
    found = {}
    for pid, [status] in live_processes("status"):
        try:
            if os.readlink(f"/proc/{pid}/ns/pid") != ns:
                continue
        except OSError:
            continue
        for line in status.decode(errors="replace").splitlines():
            if line.startswith("NSpid:"):
                found[int(line.split()[-1])] = pid
    return found

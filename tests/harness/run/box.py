"""The box the suite runs in: what the machine grants, how many runs fit in it at once, and
whether the kernel's OOM killer struck while a run was alive.

A grader's box (Gradescope: Docker, 768 MB, half a CPU by default) is a cgroup. Its memory
limit and CPU quota are read from the cgroup files of this process (v1: memory.limit_in_bytes,
cpu.cfs_quota_us/cpu.cfs_period_us; v2: memory.max, cpu.max), the tightest along the path to
the root, and combined with what Linux reports (CPUs this process may use, available memory).
`plan()` turns that into how many runs a grading session makes at once, from what a run
really takes (`RUN_MB_GUESS` until one was measured).

OOM kills are counted where the kernel counts them: the cgroups' `oom_kill` (v1
memory.oom_control, v2 memory.events) and /proc/vmstat's machine-wide `oom_kill`. A run that
failed while a counter moved was ended by the box, not by itself (tests/harness/run/runs.py).
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

CGROUP_ROOT = Path("/sys/fs/cgroup")
VMSTAT = Path("/proc/vmstat")  # the machine's counters
# What one run of 4 ranks is assumed to hold (proportional set size, summed over its
# processes) until the session measured one: the reference measures ~240 MB (forked ranks
# share torch's pages), a spawn-style submission ~600 MB (each rank imports torch itself).
RUN_MB_GUESS = 600.0
# What the grading session itself holds: its one pytest process (it reads shards without
# torch) with the runs it has read; helper threads, not xdist workers, make its runs at once.
SUITE_MB = 250.0
HEADROOM = 0.85  # plan within this share of the memory left, for the kernel and page cache
# A run whose processes' resident sizes sum to less than this share of the memory budget is
# measured by that sum (runner.held_mb), not by the exact PSS: 8 such runs fit even so, and
# in a box where memory is short (768 MB: 81 MB) every run is measured exactly.
CHEAP_SHARE = 1 / 8
# Memory one process of a run may allocate (RLIMIT_DATA) when grading: a rank of the
# reference holds ~245 MB of private data, a spawned rank ~260 MB. In a box it is lowered to
# what the box can give one process beside the session, so that a submission that allocates
# without bound fails on its own cap (its fault) before the box runs out (the box's).
PROCESS_MB = 1024
PROCESS_MB_FLOOR = 320  # below this a correct rank may not fit: the box is too small
GRADESCOPE_DEFAULT_MB = 768
UNLIMITED = 2**60


@dataclass(frozen=True)
class Box:
    """What this machine grants the suite (memory in MiB, CPUs as a fraction of cores)."""

    memory_limit_mb: float | None  # the cgroup's limit (None: none set)
    cpu_quota: float | None  # the cgroup's CPU quota in cores (None: none set)
    cpus: int  # CPUs this process may run on
    available_mb: float  # memory free for the suite now: the machine's, or the cgroup's room
    cgroup: str  # "v1", "v2" or "none"

    @property
    def cores(self) -> float:
        """The CPU time the box grants, in cores."""
        return min(float(self.cpus), self.cpu_quota or float(self.cpus))

    @property
    def memory_mb(self) -> float:
        """Memory the suite may use now."""
        return max(self.available_mb, 0.0)

    def describe(self) -> str:
        mem = f"{self.memory_limit_mb:.0f} MB" if self.memory_limit_mb else "no memory limit"
        cpu = f"{self.cpu_quota:g} CPU quota" if self.cpu_quota else "no CPU quota"
        return (f"{mem}, {cpu}, {self.cpus} CPUs, {self.available_mb:.0f} MB free "
                f"(cgroup {self.cgroup})")


def own_cgroups() -> dict[str, str]:
    """controller (or "" for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    out: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                out[c] = path
    return out


def _chain(base: Path, path: str) -> list[Path]:
    """The cgroup directories from this process's up to the mount's root, those that exist
    (in a container with its own cgroup namespace the path is "/" and the mount is its own)."""
    here = base / path.lstrip("/")
    dirs = [here, *here.parents]
    return [d for d in dirs if d.is_relative_to(base) and d.is_dir()]


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _v1_dirs(controller: str) -> list[Path]:
    cg = own_cgroups()
    base = CGROUP_ROOT / controller
    return _chain(base, cg.get(controller, "/")) if base.is_dir() else []


def _v2_dirs() -> list[Path]:
    cg = own_cgroups()
    if not (CGROUP_ROOT / "cgroup.controllers").is_file() or "" not in cg:
        return []
    return _chain(CGROUP_ROOT, cg[""])


def cgroup_version() -> str:
    if _v2_dirs():
        return "v2"
    return "v1" if _v1_dirs("memory") else "none"


def _limited() -> list[tuple[int, int]]:
    """(limit, usage) in bytes of each cgroup with a memory limit from this process's up to
    the root, innermost first (v1, then v2)."""
    found = []
    for d, limit_file, usage_file in (*((d, "memory.limit_in_bytes", "memory.usage_in_bytes")
                                        for d in _v1_dirs("memory")),
                                      *((d, "memory.max", "memory.current")
                                        for d in _v2_dirs())):
        v = _read(d / limit_file)
        if v and v.isdigit() and int(v) < UNLIMITED:
            found.append((int(v), int(_read(d / usage_file) or 0)))
    return found


def _memory_limit() -> float | None:
    limits = [limit for limit, _ in _limited()]
    return min(limits) / 2**20 if limits else None


def _cpu_quota() -> float | None:
    quotas = []
    for d in _v1_dirs("cpu") or _v1_dirs("cpu,cpuacct"):
        q, p = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
        if q and p and q.lstrip("-").isdigit() and int(q) > 0 and int(p) > 0:
            quotas.append(int(q) / int(p))
    for d in _v2_dirs():
        v = _read(d / "cpu.max")
        if v and not v.startswith("max"):
            q, p = v.split()
            quotas.append(int(q) / int(p))
    return min(quotas) if quotas else None


def cgroup_usage_mb() -> float:
    """What this process's (innermost limited) cgroup holds now, MiB (0: unknown)."""
    limited = _limited()
    return limited[0][1] / 2**20 if limited else 0.0


def read_box() -> Box:
    """What this machine grants now (cheap: a few small files)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    limit = _memory_limit()
    room = psutil.virtual_memory().available / 2**20
    if limit is not None:
        room = min(room, limit - cgroup_usage_mb())
    return Box(limit, _cpu_quota(), cpus, room, cgroup_version())


def counters(path: Path) -> dict[str, int]:
    """A kernel file of "name value" lines (memory.stat, memory.oom_control, memory.events,
    /proc/vmstat) as a dict; empty where it cannot be read."""
    out = {}
    for line in (_read(path) or "").splitlines():
        name, _, value = line.partition(" ")
        if value.strip().lstrip("-").isdigit():
            out[name] = int(value)
    return out


def oom_kills() -> int:
    """OOM kills the kernel counted where this process lives. Only differences matter: a run
    failed while this number moved. Below the cgroup mount's root (a box, this machine's own
    sandbox) its cgroups count every kill of their processes, whichever OOM killer struck, so
    a box beside it that runs out does not count; at a root (which, in a container with a
    cgroup namespace of its own, cannot be told from the container's) the machine's too."""
    v1, v2 = _v1_dirs("memory"), _v2_dirs()
    files = [*(d / "memory.oom_control" for d in v1), *(d / "memory.events" for d in v2)]
    below_root = (bool(v1) and v1[0] != CGROUP_ROOT / "memory") or \
        (bool(v2) and v2[0] != CGROUP_ROOT)
    return sum(counters(f).get("oom_kill", 0) for f in files) + \
        (0 if below_root else counters(VMSTAT).get("oom_kill", 0))


@dataclass(frozen=True)
class Plan:
    """How a grading session uses its box."""

    runs: int  # runs at once: the session's pytest process and its helper threads compute
    #            them (tests/harness/run/helpers.py), no xdist workers
    run_mb: float  # what one run was taken to need
    why: str


def plan(box: Box, run_mb: float = RUN_MB_GUESS) -> Plan:
    """Two runs at once where two CPUs' worth of quota and the memory of two runs beside
    the session fit in the box; else one at a time."""
    runs = 2 if box.cores >= 1.75 and box.memory_mb >= session_mb(2, run_mb) else 1
    why = f"{box.describe()}: {runs} run(s) of ~{run_mb:.0f} MB at once"
    return Plan(runs, run_mb, why)


def session_mb(runs: int, run_mb: float = RUN_MB_GUESS) -> float:
    """The memory a grading session making `runs` runs at once needs: its one pytest
    process and those runs, within the planner's headroom."""
    return (SUITE_MB + max(1, runs) * run_mb) / HEADROOM


def process_cap_mb(box: Box, wanted: float = PROCESS_MB) -> int:
    """What one process of a run may allocate in this box: `wanted`, or less where the box
    could not hold that beside the grading session."""
    fits = box.memory_mb * HEADROOM - SUITE_MB
    return int(max(min(wanted, fits), PROCESS_MB_FLOOR))


class MemoryBudget:
    """A memory semaphore shared by the xdist workers and helper threads of a session (a file
    lock and a JSON file of reservations): a run starts when its estimate fits beside the
    runs under way. A run never waits for itself: the first one always starts. `exclusive`
    waits until no other run is under way and keeps the others out: a rerun alone."""

    def __init__(self, directory: Path, capacity_mb: float) -> None:
        from filelock import FileLock

        self.lock = FileLock(str(directory / "budget.lock"))
        self.file = directory / "budget.json"
        with self.lock:
            if not self.file.exists():
                self._write({"capacity_mb": capacity_mb, "held": {}, "peaks": []})

    def _state(self) -> dict[str, Any]:
        import json

        return dict(json.loads(self.file.read_text()))

    def _write(self, state: dict[str, Any]) -> None:
        import json

        self.file.write_text(json.dumps(state))

    def estimate_mb(self) -> float:
        """What a run takes: the largest this session measured, else RUN_MB_GUESS."""
        with self.lock:
            peaks = self._state()["peaks"]
        return max(peaks) if peaks else RUN_MB_GUESS

    @contextlib.contextmanager
    def reserve(self, key: str, exclusive: bool = False, poll_s: float = 0.1
                ) -> Iterator[None]:
        import time

        want = math.inf if exclusive else self.estimate_mb()
        while True:
            with self.lock:
                state = self._state()
                held = {k: v for k, v in state["held"].items() if psutil.pid_exists(v[1])}
                used = sum(v[0] for v in held.values())
                if not held or used + want <= state["capacity_mb"]:
                    held[key] = [want if math.isfinite(want) else 1e18, os.getpid()]
                    state["held"] = held
                    self._write(state)
                    break
            time.sleep(poll_s)
        try:
            yield
        finally:
            with self.lock:
                state = self._state()
                state["held"].pop(key, None)
                self._write(state)

    def measured(self, peak_mb: float) -> None:
        """Record a run's measured peak: later estimates use the largest."""
        if peak_mb > 0:
            with self.lock:
                state = self._state()
                state["peaks"] = [*state["peaks"], peak_mb][-50:]
                self._write(state)


def protect_self() -> None:
    """Make the suite's own process the OOM killer's last choice (root may lower it; others
    cannot, and then runs' processes still go first: they raise theirs, see runner.py)."""
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
        f.write("-900")

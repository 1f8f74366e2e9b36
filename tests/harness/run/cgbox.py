"""A grader's box on any Linux machine where you are root: a cgroup with a memory limit and a
CPU quota (v1 or v2), a command run inside it, and what it took.

    python -m tests.harness.run.cgbox --memory-mb 768 --cpus 0.5 -- bash run_autograder

prints the command's wall time, the box's peak memory and the OOM kills the kernel counted in
it. Gradescope's default autograder box is 768 MB and half a CPU; README's "Grading a class"
gives what grading takes in boxes of 768 MB / 0.5 CPU, 1.5 GB / 1 CPU and 3 GB / 2 CPUs, as
this command measured it. The suite's own box tests (tests/test_box.py) use `CgBox` too.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from tests.harness.run.box import CGROUP_ROOT, cgroup_version, counters, own_cgroups

PERIOD_US = 100_000


@dataclass
class Measured:
    returncode: int
    wall_s: float
    peak_mb: float  # the largest working set sampled (usage less inactive page cache)
    oom_kills: int
    peak_with_cache_mb: float  # the kernel's own peak, page cache included


class CgBox:
    """A cgroup of `memory_mb` and `cpus` below this process's own (removed on close)."""

    def __init__(self, memory_mb: float, cpus: float | None = None) -> None:
        self.version = cgroup_version()
        name = f"capstone-box-{uuid.uuid4().hex[:8]}"
        own = own_cgroups()
        limit = str(int(memory_mb * 2**20))
        self.dirs: list[Path] = []
        if self.version == "v2":
            d = CGROUP_ROOT / own[""].lstrip("/") / name
            d.mkdir()
            self.dirs = [d]
            (d / "memory.max").write_text(limit)
            with contextlib.suppress(OSError):
                (d / "memory.swap.max").write_text("0")
            if cpus:
                (d / "cpu.max").write_text(f"{int(cpus * PERIOD_US)} {PERIOD_US}")
        elif self.version == "v1":
            mem = CGROUP_ROOT / "memory" / own.get("memory", "/").lstrip("/") / name
            mem.mkdir()
            self.dirs = [mem]
            (mem / "memory.limit_in_bytes").write_text(limit)
            with contextlib.suppress(OSError):  # no swap beyond the limit, where swap exists
                (mem / "memory.memsw.limit_in_bytes").write_text(limit)
            if cpus:
                ctl = "cpu" if (CGROUP_ROOT / "cpu").is_dir() else "cpu,cpuacct"
                cpu = CGROUP_ROOT / ctl / own.get(ctl, own.get("cpu", "/")).lstrip("/") / name
                cpu.mkdir()
                self.dirs.append(cpu)
                (cpu / "cpu.cfs_period_us").write_text(str(PERIOD_US))
                (cpu / "cpu.cfs_quota_us").write_text(str(int(cpus * PERIOD_US)))
        else:
            raise OSError("no cgroup file system here")

    def enter(self) -> None:
        """Move the calling process into the box (a preexec function for subprocesses)."""
        for d in self.dirs:
            (d / "cgroup.procs").write_text(str(os.getpid()))

    def working_set_mb(self) -> float:
        """Usage less the page cache the kernel may drop (what `docker stats` reports)."""
        d = self.dirs[0]
        stat = counters(d / "memory.stat")
        for usage_file, inactive in (("memory.usage_in_bytes", "total_inactive_file"),
                                     ("memory.current", "inactive_file")):
            with contextlib.suppress(OSError, ValueError):
                usage = int((d / usage_file).read_text())
                return max(usage - stat.get(inactive, 0), 0) / 2**20
        return 0.0

    def peak_mb(self) -> float:
        d = self.dirs[0]
        for name in ("memory.max_usage_in_bytes", "memory.peak"):
            with contextlib.suppress(OSError, ValueError):
                return int((d / name).read_text()) / 2**20
        return 0.0

    def oom_kills(self) -> int:
        d = self.dirs[0]
        return max(counters(d / name).get("oom_kill", 0)
                   for name in ("memory.oom_control", "memory.events"))

    def run(self, argv: list[str], timeout_s: float | None = None, **kwargs: object
            ) -> Measured:
        t0 = time.monotonic()
        peak = 0.0
        with subprocess.Popen(argv, preexec_fn=self.enter, **kwargs) as proc:  # type: ignore[call-overload]
            while proc.poll() is None:
                peak = max(peak, self.working_set_mb())
                if timeout_s is not None and time.monotonic() - t0 > timeout_s:
                    proc.kill()
                time.sleep(0.1)
            if kwargs.get("stdout") is not None:
                proc.communicate()
        return Measured(proc.returncode, time.monotonic() - t0, peak, self.oom_kills(),
                        self.peak_mb())

    def close(self) -> None:
        """Remove the box once its processes are gone (they are killed if not)."""
        for d in self.dirs:
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                with contextlib.suppress(OSError):
                    pids = (d / "cgroup.procs").read_text().split()
                    for pid in pids:
                        with contextlib.suppress(ProcessLookupError, ValueError):
                            os.kill(int(pid), 9)
                    d.rmdir()
                    break
                time.sleep(0.1)

    def __enter__(self) -> CgBox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def usable() -> str:
    """"" when a box can be made here, else why not."""
    try:
        with CgBox(256, 0.5):
            return ""
    except OSError as e:
        return f"cannot make a cgroup box here ({e}): needs root and a writable cgroup fs"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.harness.run.cgbox",
                                 description="run a command in a cgroup box, as a grader would")
    ap.add_argument("--memory-mb", type=float, default=768)
    ap.add_argument("--cpus", type=float, default=0.5)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        ap.error("give the command after --")
    with CgBox(a.memory_mb, a.cpus) as b:
        m = b.run(cmd)
    print(f"box {a.memory_mb:.0f} MB / {a.cpus:g} CPU: exit {m.returncode}, "
          f"{m.wall_s:.1f} s, peak working set {m.peak_mb:.0f} MB "
          f"({m.peak_with_cache_mb:.0f} MB with page cache), OOM kills {m.oom_kills}",
          file=sys.stderr)
    return m.returncode


if __name__ == "__main__":
    sys.exit(main())

"""What the box did to a run besides killing it: memory pressure and CPU starvation.

A box too small or too slow for a correct submission does not always make the kernel's OOM
killer strike. It may reclaim instead (the box sits at its memory limit and every page of
torch's libraries is read again and again: thrashing), or throttle a CPU quota so hard that
four `import torch` do not reach their first collective within the bound. Both are the box's
doing. They are read from the kernel's own counters, along this process's cgroups (runs are
its children and live in the same box):

- memory: times the box hit its limit (v1 `memory.failcnt`, v2 `memory.events` `max`), its
  peak (v1 `memory.max_usage_in_bytes`, v2 `memory.peak`), and the time tasks stalled on
  memory (PSI: v2 `memory.pressure`, else the machine's `/proc/pressure/memory`, "full");
- CPU: times the quota throttled the box and for how long, and the CPU time the box used
  (v1 `cpu.stat` and `cpuacct.usage`, v2 `cpu.stat`).

`starved(...)` turns a run's deltas into the facts that excuse it, or none: a program that
hangs by itself in a roomy box is never excused, nor one that sleeps in a throttled box (it
uses none of the CPU the box grants).
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass
from pathlib import Path

from tests.harness.run.box import _read, _v1_dirs, _v2_dirs, counters

# Thrashing: tasks stalled on memory for at least this share of the run's wall time.
STALL_SHARE = 0.05
# CPU starvation: the run used at least this share of the CPU time the quota granted (a
# program that sleeps or waits on a peer uses almost none).
BUSY_SHARE = 0.5
NEAR_LIMIT = 0.95  # a peak this close to the limit is "at the limit" where PSI is missing


@dataclass(frozen=True)
class Counters:
    limit_mb: float = 0.0  # the innermost memory limit (0: none)
    limit_hits: int = 0
    peak_mb: float = 0.0  # the box's own peak (page cache included), where the kernel keeps it
    stall_us: int = -1  # memory "full" stall, microseconds (-1: the kernel reports none)
    quota: float = 0.0  # CPU quota in cores (0: none)
    periods: int = 0  # quota periods the box ran in
    throttled: int = 0  # periods in which it used up its quota
    throttled_us: int = 0
    cpu_us: int = -1  # CPU time used by the box (-1: unknown)


def _int(text: str | None) -> int | None:
    return int(text) if text and text.strip().lstrip("-").isdigit() else None


def _psi(path: Path) -> int | None:
    """The `full` line's total (microseconds) of a pressure file."""
    for line in (_read(path) or "").splitlines():
        if line.startswith("full "):
            with contextlib.suppress(ValueError, IndexError):
                return int(line.rsplit("total=", 1)[1])
    return None


def read() -> Counters:
    """The counters now, of the innermost memory-limited and CPU-limited cgroups."""
    c: dict[str, float] = {}
    for d in _v1_dirs("memory"):
        limit = _int(_read(d / "memory.limit_in_bytes"))
        if limit and limit < 2**60:
            c.update(limit_mb=limit / 2**20,
                     limit_hits=_int(_read(d / "memory.failcnt")) or 0,
                     peak_mb=(_int(_read(d / "memory.max_usage_in_bytes")) or 0) / 2**20)
            break
    for d in _v2_dirs():
        limit = _int(_read(d / "memory.max"))
        if limit:
            c.update(limit_mb=limit / 2**20,
                     limit_hits=counters(d / "memory.events").get("max", 0),
                     peak_mb=(_int(_read(d / "memory.peak")) or 0) / 2**20)
            stall = _psi(d / "memory.pressure")
            if stall is not None:
                c["stall_us"] = stall
            break
    if "stall_us" not in c:
        stall = _psi(Path("/proc/pressure/memory"))
        c["stall_us"] = -1 if stall is None else stall
    for d in _v1_dirs("cpu") or _v1_dirs("cpu,cpuacct"):
        q, p = _int(_read(d / "cpu.cfs_quota_us")), _int(_read(d / "cpu.cfs_period_us"))
        if q and p and q > 0:
            stat = counters(d / "cpu.stat")
            usage = _int(_read(d / "cpuacct.usage"))
            if usage is None:  # cpuacct mounted on its own
                acct = [x for x in _v1_dirs("cpuacct") if x.name == d.name]
                usage = _int(_read(acct[0] / "cpuacct.usage")) if acct else None
            c.update(quota=q / p, periods=stat.get("nr_periods", 0),
                     throttled=stat.get("nr_throttled", 0),
                     throttled_us=stat.get("throttled_time", 0) // 1000,
                     cpu_us=-1 if usage is None else usage // 1000)
            break
    for d in _v2_dirs():
        v = _read(d / "cpu.max")
        if v and not v.startswith("max"):
            q2, p2 = v.split()
            stat = counters(d / "cpu.stat")
            c.update(quota=int(q2) / int(p2), periods=stat.get("nr_periods", 0),
                     throttled=stat.get("nr_throttled", 0),
                     throttled_us=stat.get("throttled_usec", 0),
                     cpu_us=stat.get("usage_usec", -1))
            break
    return Counters(**c)  # type: ignore[arg-type]


def since(before: Counters, after: Counters | None = None) -> dict[str, float]:
    """What happened in the box between two readings (a run's), as a dict for Outcome."""
    a = after or read()
    out = asdict(a)
    for key in ("limit_hits", "periods", "throttled", "throttled_us"):
        out[key] = getattr(a, key) - getattr(before, key)
    for key in ("stall_us", "cpu_us"):
        b, x = getattr(before, key), getattr(a, key)
        out[key] = x - b if b >= 0 and x >= 0 else -1
    return out


def starved(stress: dict[str, float], wall_s: float, reached_collective: bool,
            timed_out: bool = True) -> str:
    """The facts that make a failed run the box's doing, or "" (the program's own). A quota
    excuses only a run stopped at the bound: one that failed by itself before it (a
    MemoryError, an exception) did so however fast the box let it run."""
    if not stress or wall_s <= 0:
        return ""
    facts = []
    limit, hits = stress.get("limit_mb", 0.0), stress.get("limit_hits", 0)
    stall_ms = stress.get("stall_us", -1) / 1000
    peak = stress.get("peak_mb", 0.0)
    if limit and hits > 0 and (stall_ms >= STALL_SHARE * wall_s * 1000
                               or (stall_ms < 0 and peak >= NEAR_LIMIT * limit)):
        stalled = f", tasks stalled on memory for {stall_ms / 1000:.1f}s" if stall_ms >= 0 \
            else ""
        facts.append(f"the box sat at its {limit:.0f} MB memory limit ({hits:.0f} times, peak "
                     f"{peak:.0f} MB{stalled})")
    quota, cpu_ms = stress.get("quota", 0.0), stress.get("cpu_us", -1) / 1000
    if quota and timed_out and stress.get("throttled", 0) > 0 and not reached_collective:
        # The CPU the box used, against what its quota granted; where no accounting is at
        # hand (v1 with cpuacct mounted apart), the share of periods whose quota ran out.
        used = cpu_ms / (quota * wall_s * 1000) if cpu_ms >= 0 else 0.0
        periods = stress.get("periods", 0)
        busy = max(used, stress["throttled"] / periods if periods else 0.0)
        if busy >= BUSY_SHARE:
            facts.append(f"the box's {quota:g} CPU quota throttled it "
                         f"{stress['throttled']:.0f} times ({stress['throttled_us'] / 1e6:.1f}s) "
                         f"while it used {busy:.0%} of the CPU the box grants, and no rank "
                         "reached its first collective")
    return "; ".join(facts)


# What a Python with torch takes to start on a full CPU of an ordinary machine at its slow
# end (0.8-2.4 s measured here): a box that starts it slower gets bounds scaled to match.
STARTUP_REF_S = 2.5
RERUN_SCALE = 2.0  # a run the box starved is rerun alone with this much more time
MAX_CAP_MB = 8192  # the largest per-process data cap the probe tries


def _import_torch(cap_mb: int | None) -> float | None:
    """Seconds `python -c "import torch"` takes with `cap_mb` of data per process, or None
    when it cannot import under that cap."""
    import resource
    import subprocess
    import sys
    import time

    def limit() -> None:
        if cap_mb:
            resource.setrlimit(resource.RLIMIT_DATA, (cap_mb * 2**20, cap_mb * 2**20))
    t0 = time.monotonic()
    try:
        subprocess.run([sys.executable, "-c", "import torch; torch.ones(2).sum()"], check=True,
                       timeout=300, stdin=subprocess.DEVNULL, capture_output=True,
                       preexec_fn=limit)
    except (subprocess.SubprocessError, OSError):
        return None
    return time.monotonic() - t0


def in_a_box() -> bool:
    """A memory limit or a CPU quota on this process's cgroups: only there do runs start
    slower than on an ordinary machine, or meet a per-process cap a torch may not fit."""
    c = read()
    return bool(c.limit_mb or c.quota)


def probe(directory: Path, cap_mb: int | None = None) -> dict[str, float]:
    """How python with torch starts here, under the box's quota and the runs' cap on each
    process's data: `startup_s`, and `cap_mb`, the cap runs get. A torch that cannot even
    import under the cap (PyPI's CUDA build maps ~1 GB of private segments) gets the
    smallest cap, doubling, under which it can: a correct program must be able to start.
    Measured once per session (the first worker to ask; the others read
    `directory/startup.json`)."""
    import json

    from filelock import FileLock

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "startup.json"
    with FileLock(str(path) + ".lock"):
        if path.is_file():
            return dict(json.loads(path.read_text()))
        cap, took = cap_mb, _import_torch(cap_mb)
        while took is None and cap and cap < MAX_CAP_MB:
            cap = min(cap * 2, MAX_CAP_MB)
            took = _import_torch(cap)
        found = {"startup_s": STARTUP_REF_S if took is None else took,  # no torch: no scaling
                 "cap_mb": float(cap or 0), "asked_cap_mb": float(cap_mb or 0)}
        path.write_text(json.dumps(found))
        return found


def bound_factor(startup: float) -> float:
    """How much longer runs may take here than on an ordinary machine (never less)."""
    return max(1.0, startup / STARTUP_REF_S)


def bound_line(directory: Path, run_timeout_s: float, hang_after_s: float) -> str:
    """The session report's line on the bounds used, once they were measured."""
    import json

    path = directory / "startup.json"
    if not path.is_file():
        return (f"run bound {run_timeout_s:.0f}s, hang watch {hang_after_s:.1f}s (no memory "
                "limit or CPU quota here: not scaled)")
    found = json.loads(path.read_text())
    start = float(found["startup_s"])
    f = bound_factor(start)
    line = (f"run bound {run_timeout_s * f:.0f}s, hang watch {hang_after_s * f:.1f}s "
            f"(x{f:.2f}: python with torch starts in {start:.1f}s here, "
            f"{STARTUP_REF_S:g}s on an ordinary CPU)")
    if found.get("cap_mb", 0) > found.get("asked_cap_mb", 0) > 0:
        line += (f"; each run process may allocate {found['cap_mb']:.0f} MB, not "
                 f"{found['asked_cap_mb']:.0f}: this torch cannot import under less")
    return line

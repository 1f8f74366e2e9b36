"""The whole suite's wall time, beside the `import torch` floor measured in the same minutes,
and optionally beside another revision's suite run in turns with this one (this machine is
shared: its speed drifts by tens of percent within an hour, so only same-script ratios compare).

    python bench/suite.py [--against REV [--same-tests]] [--rounds 1] [--workers 2]

Each round runs README's test command (`python -m pytest -n 2`) in this checkout, then, with
`--against`, in a worktree of REV (same venv); `import torch` is timed before each suite run.
`--same-tests` also runs, in this checkout, only the tests REV has too (by node id): what the
tests both have cost now, apart from what the tests added since cost.
Prints a JSON row per suite run (with the CPU time its processes used, and how many of the
machine's cores that kept busy on average) and the medians, then the worker-seconds each test
module took (setup, call and teardown of its tests, from pytest's --durations=0; medians over
the rounds), side by side per checkout: a regression shows in the module where it starts.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from record import Figure, save

ROOT = Path(__file__).resolve().parents[1]


def import_floor(n: int = 5) -> float:
    """Median wall time of `python -c "import torch"`."""
    times = []
    for _ in range(n):
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-c", "import torch"], check=True)
        times.append(time.monotonic() - t0)
    return statistics.median(times)


def children_cpu_s() -> float:
    """CPU-seconds (user + sys) of every child process reaped so far."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def machine_busy_s() -> float:
    """CPU-seconds the whole machine has spent busy (every process, this suite's and any
    other's): an upper bound on the suite's CPU where the reaped tree's is a lower one (a
    warm start's forks are the fork server's children, and a killed namespace's are no
    one's)."""
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)


def collected(checkout: Path) -> list[str]:
    """The node ids README's test command collects in `checkout`."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider"], cwd=checkout, capture_output=True,
                          text=True)
    return [ln.strip() for ln in proc.stdout.splitlines() if "::" in ln]


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)s (?:setup|call|teardown)\s+([^:\s]+)::")


def per_module(report: str) -> dict[str, float]:
    """Worker-seconds per test module, summed from pytest's `--durations=0` lines."""
    out: dict[str, float] = {}
    for line in report.splitlines():
        if m := _DURATION.match(line.strip()):
            out[m[2]] = out.get(m[2], 0.0) + float(m[1])
    return out


def suite(checkout: Path, workers: int, ids: list[str] | None = None
          ) -> tuple[float, float, float, str, dict[str, float]]:
    """Wall time of the suite in `checkout` (only `ids`, if given), the CPU time (user + sys)
    of its processes, the machine's busy CPU time meanwhile, pytest's last line (and its
    failures) and the worker-seconds per module. The CPU time is that of every process reaped
    up the tree: a lower bound, since what a SIGKILLed run's namespace held and what a warm
    start's forks used are not handed up; the machine's is an upper bound."""
    t0, cpu0, busy0 = time.monotonic(), children_cpu_s(), machine_busy_s()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-n", str(workers), "-q",
                           "-p", "no:cacheprovider", "--durations=0", *(ids or [])],
                          cwd=checkout, capture_output=True, text=True)
    wall, cpu = time.monotonic() - t0, children_cpu_s() - cpu0
    busy = machine_busy_s() - busy0
    lines = [ln for ln in proc.stdout.splitlines() if " in " in ln and "passed" in ln]
    failed = [ln for ln in proc.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    return (wall, cpu, busy, "; ".join([lines[-1].strip("= ") if lines
                                        else f"exit {proc.returncode}", *failed]),
            per_module(proc.stdout))


def print_modules(modules: dict[str, list[dict[str, float]]]) -> None:
    """One line per test module: its median worker-seconds in each checkout, costliest first."""
    names = sorted({m for runs in modules.values() for r in runs for m in r})
    med = {k: {m: statistics.median(r.get(m, 0.0) for r in runs) for m in names}
           for k, runs in modules.items() if runs}
    first = next(iter(med))
    print("\nworker-seconds per module (medians): " + " | ".join(med))
    for m in sorted(names, key=lambda m: -med[first][m]):
        print(f"{m:<52} " + " ".join(f"{v[m]:8.1f}" for v in med.values()))
    print(f"{'total':<52} " + " ".join(f"{sum(v.values()):8.1f}" for v in med.values()))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--against", metavar="REV", help="another revision, run in turns")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--same-tests", action="store_true",
                    help="with --against: also this checkout on REV's tests only")
    a = ap.parse_args()
    if a.same_tests and not a.against:
        ap.error("--same-tests compares with a revision: give --against REV")
    with tempfile.TemporaryDirectory() as tmp:
        checkouts = {"this checkout": ROOT}
        if a.against:
            other = Path(tmp) / "other"
            subprocess.run(["git", "worktree", "add", "--detach", str(other), a.against],
                           cwd=ROOT, check=True, capture_output=True)
            checkouts[a.against] = other
        only: dict[str, list[str]] = {}
        if a.same_tests:
            mine, theirs = set(collected(ROOT)), collected(other)
            only[f"{a.against}'s tests"] = [t for t in theirs if t in mine]
            print(json.dumps({"tests_here": len(mine), f"tests_at_{a.against}": len(theirs),
                              "both": len(only[f"{a.against}'s tests"])}), flush=True)
            checkouts[f"{a.against}'s tests"] = ROOT
        rows: dict[str, list[tuple[float, float]]] = {k: [] for k in checkouts}
        modules: dict[str, list[dict[str, float]]] = {k: [] for k in checkouts}
        try:
            for _ in range(a.rounds):
                for name, path in checkouts.items():
                    floor = import_floor()
                    wall, cpu, busy, last, mods = suite(path, a.workers, only.get(name))
                    rows[name].append((wall, floor))
                    modules[name].append(mods)
                    print(json.dumps({"suite": name, "wall_s": round(wall, 1),
                                      "cpu_s": round(cpu, 1), "cores_busy": round(cpu / wall, 2),
                                      "machine_cpu_s": round(busy, 1),
                                      "machine_cores_busy": round(busy / wall, 2),
                                      "import_torch_s": round(floor, 2),
                                      "floors": round(wall / floor, 1), "pytest": last}),
                          flush=True)
        finally:
            if a.against:
                subprocess.run(["git", "worktree", "remove", "--force", str(other)], cwd=ROOT,
                               capture_output=True)
        figures = []
        for name, r in rows.items():
            wall = statistics.median(w for w, _ in r)
            floors = statistics.median(w / f for w, f in r)
            print(f"{name:>16}: suite {wall:6.1f} s, {floors:5.1f} x the import-torch floor "
                  f"(medians of {len(r)})")
            figures.append(Figure(f"README's test command (`pytest -n {a.workers}`), the suite "
                                  f"of {name}", f"{wall:.1f} s, {floors:.1f}x the `import "
                                  f"torch` floor (medians of {len(r)})"))
        save("suite", figures)
        print_modules(modules)
    return 0


if __name__ == "__main__":
    sys.exit(main())

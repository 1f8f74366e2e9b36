"""The whole suite's wall time, beside the `import torch` floor measured in the same minutes,
and optionally beside another revision's suite run in turns with this one (this machine is
shared: its speed drifts by tens of percent within an hour, so only same-script ratios compare).

    python bench/suite.py [--against REV [--same-tests]] [--rounds 1] [--workers 2]

Each round runs README's test command (`python -m pytest -n 2`) in this checkout, then, with
`--against`, in a worktree of REV (same venv); `import torch` is timed before each suite run.
`--same-tests` also runs, in this checkout, only the tests REV has too (by node id): what the
tests both have cost now, apart from what the tests added since cost.
Prints a JSON row per suite run (with the CPU time its processes used, and how many of the
machine's cores that kept busy on average) and the medians.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def import_floor(n: int = 5) -> float:
    """Median wall time of `python -c "import torch"`."""
    times = []
    for _ in range(n):
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-c", "import torch"], check=True)
        times.append(time.monotonic() - t0)
    return statistics.median(times)


def _children_cpu_s() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def collected(checkout: Path) -> list[str]:
    """The node ids README's test command collects in `checkout`."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider"], cwd=checkout, capture_output=True,
                          text=True)
    return [ln.strip() for ln in proc.stdout.splitlines() if "::" in ln]


def suite(checkout: Path, workers: int, ids: list[str] | None = None
          ) -> tuple[float, float, str]:
    """Wall time of the suite in `checkout` (only `ids`, if given), the CPU time (user + sys)
    of its processes, and pytest's last line. The CPU time is that of every process reaped
    up the tree: a lower bound, since what a SIGKILLed run's namespace held is not handed up."""
    t0, cpu0 = time.monotonic(), _children_cpu_s()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-n", str(workers), "-q",
                           "-p", "no:cacheprovider", *(ids or [])], cwd=checkout,
                          capture_output=True, text=True)
    wall, cpu = time.monotonic() - t0, _children_cpu_s() - cpu0
    lines = [ln for ln in proc.stdout.splitlines() if " in " in ln and "passed" in ln]
    return wall, cpu, lines[-1].strip("= ") if lines else f"exit {proc.returncode}"


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
        try:
            for _ in range(a.rounds):
                for name, path in checkouts.items():
                    floor = import_floor()
                    wall, cpu, last = suite(path, a.workers, only.get(name))
                    rows[name].append((wall, floor))
                    print(json.dumps({"suite": name, "wall_s": round(wall, 1),
                                      "cpu_s": round(cpu, 1), "cores_busy": round(cpu / wall, 2),
                                      "import_torch_s": round(floor, 2),
                                      "floors": round(wall / floor, 1), "pytest": last}),
                          flush=True)
        finally:
            if a.against:
                subprocess.run(["git", "worktree", "remove", "--force", str(other)], cwd=ROOT,
                               capture_output=True)
        for name, r in rows.items():
            wall = statistics.median(w for w, _ in r)
            floors = statistics.median(w / f for w, f in r)
            print(f"{name:>16}: suite {wall:6.1f} s, {floors:5.1f} x the import-torch floor "
                  f"(medians of {len(r)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

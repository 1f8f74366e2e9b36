"""What the suite's observer costs, measured side by side in this script.

- one run: the reference's base run (4 ranks, 20 steps, 2 checkpoints) through the suite's
  runner, in its namespaces, with the observer loaded and without (`Watch(observe=...)`);
- the suite: `pytest -n 2 -k invariant` with and without `--no-observe` (the same runs are
  made either way; without the observer the observed checks skip).

Commands run round-robin so that load on this shared machine falls on both alike; each figure
is the median of --repeat runs.

    python bench/observer.py [--repeat 5] [--suite-repeat 3] [--json bench/results/observer.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from record import Figure, save  # noqa: E402

from tests.harness.run.runner import Watch, run_command  # noqa: E402
from tests.harness.run.runs import BASE  # noqa: E402


def one_run(tmp: Path, observe: bool, i: int) -> float:
    out = tmp / f"{'on' if observe else 'off'}-{i}" / "out"
    o = run_command([sys.executable, "-m", "capstone", "--out", str(out), *BASE.flags(None)],
                    out, 120, ROOT, watch=Watch(observe=observe, contain=True))
    if o.returncode != 0:
        raise SystemExit(f"the base run failed: {o.reason()}")
    return o.wall_s


def suite(observe: bool) -> float:
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
            "-k", "invariant", *([] if observe else ["--no-observe"])]
    t0 = time.monotonic()
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(proc.stdout[-2000:])
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--suite-repeat", type=int, default=3)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    runs: dict[bool, list[float]] = {True: [], False: []}
    suites: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as d:
        for i in range(a.repeat):
            for observe in (True, False):
                runs[observe].append(one_run(Path(d), observe, i))
    for _ in range(a.suite_repeat):
        for observe in (True, False):
            suites[observe].append(suite(observe))
    result = {}
    for label, data in (("base run", runs), ("pytest -n 2 -k invariant", suites)):
        if not data[True]:  # --repeat 0 or --suite-repeat 0: not measured
            continue
        on, off = statistics.median(data[True]), statistics.median(data[False])
        result[label] = {"observed_s": on, "unobserved_s": off, "ratio": on / off}
        print(f"{label:<28} observed {on:6.2f} s   unobserved {off:6.2f} s   "
              f"ratio {on / off:.2f}x   (medians of {len(data[True])})")
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(result, indent=2) + "\n")
    of = {"base run": a.repeat, "pytest -n 2 -k invariant": a.suite_repeat}
    save("observer", [Figure(f"the observer's cost: {label}, observed / not",
                             f"{r['ratio']:.2f}x ({r['observed_s']:.2f} / "
                             f"{r['unobserved_s']:.2f} s, medians of {of[label]})",
                             "<= 1.2x" if label == "base run" else "")
                      for label, r in result.items()])


if __name__ == "__main__":
    main()

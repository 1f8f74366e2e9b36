"""How long CI's test tiers take on this machine, beside the `import torch` floor measured just
before, so that a slow hour shows as such.

    python bench/tiers.py --ci [--log ci.log]        # the whole of .ci/run, every tier timed
    python bench/tiers.py [--tier styles --tier corpus ...] [--workers 2]   # single tiers

`--ci` runs `bash .ci/run` itself (CI=true, as CI runs it; it installs into this checkout's
.venv first), whose `tier` function writes each tier's seconds to $CAPSTONE_TIER_LOG: the
tiers are read from the script CI runs, never listed twice. Targets (issue 60): README's test
command (the `default` tier) <= 112x `import torch`, the whole `.ci/run` <= 45 minutes.
Records docs/figures/tiers.json (bench/figures.py). `--tier default` is README's test
command alone; `--tier programs` is not a marker: name its parts (`--tier styles ...`).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from record import Figure, save
from suite import import_floor

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_X = 112  # README's test command, in floors of `import torch`
CI_MIN = 45  # the whole .ci/run, minutes
SUMMARY = re.compile(r"=* ?(\d+ passed.*) in [\d.]+s")


def tier(name: str, workers: int) -> tuple[float, str]:
    """One tier's wall time and pytest's summary line ("N passed ...")."""
    marker = [] if name == "default" else ["-m", name]
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", *marker, "-n", str(workers), "-q",
                           "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - t0
    found = [m[1] for m in map(SUMMARY.search, proc.stdout.splitlines()[-5:]) if m]
    if proc.returncode != 0 or not found:
        raise SystemExit(f"the {name} tier failed (exit {proc.returncode}):\n"
                         f"{proc.stdout[-3000:]}")
    return wall, found[-1]


def _default_figure(wall: float, floor: float, said: str) -> Figure:
    return Figure("README's test command (`python -m pytest -n 2`) / `import torch`",
                  f"{wall / floor:.0f}x ({wall:.0f} s / {floor:.2f} s; {said})",
                  f"<= {DEFAULT_X}x")


def whole_ci(keep: Path | None = None) -> list[Figure]:
    """`bash .ci/run` as CI runs it, each tier's time from its log, and the whole; its output
    (the programs tier's slowest tests among it) kept in `keep` where given."""
    floor = import_floor()
    with tempfile.NamedTemporaryFile("r", suffix=".tiers") as log:
        t0 = time.monotonic()
        proc = subprocess.run(["bash", ".ci/run"], cwd=ROOT, text=True, capture_output=True,
                              env={**os.environ, "CI": "true", "CAPSTONE_TIER_LOG": log.name},
                              stdin=subprocess.DEVNULL)
        wall = time.monotonic() - t0
        rows = [ln.split() for ln in Path(log.name).read_text().splitlines() if ln.strip()]
    if keep is not None:
        keep.write_text(proc.stdout + proc.stderr)
    said = {m[1] for m in map(SUMMARY.search, proc.stdout.splitlines()) if m}
    figures = []
    if proc.returncode != 0:  # the tiers it got through are still measured: say where it ended
        print(f".ci/run failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n"
              f"{proc.stderr[-2000:]}", file=sys.stderr)
        # .ci/run's `tier` logs a tier's time before it exits on its status: the failed tier
        # is the last one listed (none listed: the install, the lint or the types failed)
        figures.append(Figure("`bash .ci/run`", f"FAILED (exit {proc.returncode}) after "
                              f"{wall / 60:.1f} min, in the last tier listed below"))
    for name, seconds in rows:
        s = float(seconds)
        print(f"{name}: {s:.0f} s", flush=True)
        if name == "default":
            figures.append(_default_figure(s, floor, "in .ci/run"))
        figures.append(Figure(f"`.ci/run` tier {name}", f"{s:.0f} s = {s / 60:.1f} min"))
    if proc.returncode == 0:
        figures.append(Figure("`bash .ci/run` (install, lint, types and every tier)",
                              f"{wall / 60:.1f} min ({wall:.0f} s; `import torch` "
                              f"{floor:.2f} s before it; {len(said)} pytest summaries)",
                              f"<= {CI_MIN} min"))
    print(f".ci/run: {wall / 60:.1f} min; import torch {floor:.2f} s", flush=True)
    return figures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ci", action="store_true", help="time the whole of .ci/run, per tier")
    ap.add_argument("--tier", action="append", default=[],
                    help="a marker of pyproject.toml, or `default` (default: styles, corpus)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--log", type=Path, help="with --ci: keep .ci/run's output in this file "
                    "(where the time went: the programs tier's 30 slowest tests)")
    a = ap.parse_args()
    if a.ci:
        figures = whole_ci(a.log)
        save("tiers", figures, command="python bench/tiers.py --ci")
        return 1 if figures and figures[0].value.startswith("FAILED") else 0
    figures = []
    for name in a.tier or ["styles", "corpus"]:
        floor = import_floor()
        wall, said = tier(name, a.workers)
        print(f"{name}: {wall:.1f} s ({said}), import torch {floor:.2f} s", flush=True)
        if name == "default":
            figures.append(_default_figure(wall, floor, said))
        figures.append(Figure(f"`python -m pytest {'' if name == 'default' else f'-m {name} '}"
                              f"-n {a.workers}`", f"{wall:.0f} s = {wall / 60:.1f} min ({said}; "
                              f"`import torch` {floor:.2f} s before it)"))
    save("tiers", figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How long each of CI's test tiers takes on this machine (`.ci/run` runs them in turn), beside
the `import torch` floor measured just before each, so that a slow hour shows as such.

    python bench/tiers.py [--tier styles --tier corpus ...] [--workers 2]

Targets: the styles tier (the style space) under 15 minutes (issue 50). Records
docs/figures/tiers.json (bench/figures.py). The default suite is `--tier default`.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

from record import Figure, save
from suite import import_floor

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"styles": "< 15 min"}
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tier", action="append", default=[],
                    help="a marker of pyproject.toml, or `default` (default: styles, corpus)")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    figures = []
    for name in a.tier or ["styles", "corpus"]:
        floor = import_floor()
        wall, said = tier(name, a.workers)
        print(f"{name}: {wall:.1f} s ({said}), import torch {floor:.2f} s", flush=True)
        figures.append(Figure(f"`python -m pytest {'' if name == 'default' else f'-m {name} '}"
                              f"-n {a.workers}`", f"{wall:.0f} s = {wall / 60:.1f} min ({said}; "
                              f"`import torch` {floor:.2f} s before it)",
                              TARGETS.get(name, "")))
    save("tiers", figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""README's test command as a newcomer runs it: on K fresh clones of this checkout's HEAD, each
in a fresh venv installed by README's own line, one after another (issue 60: the suite passes
the same way on every fresh clone).

    python bench/fresh.py [--clones 5]

For each clone: `git clone` (no hard links: a clone as a newcomer's), `python3 -m venv`, the
pip line README gives, then `import torch` timed (median of 5) in that venv and README's
`python -m pytest -n auto` timed. Prints a JSON row per clone; records docs/figures/fresh.json
(bench/figures.py): how many clones passed, whether every clone ran the same tests, and each
run's time in floors of `import torch` measured just before it.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from record import Figure, save

ROOT = Path(__file__).resolve().parents[1]
# README's lines for a new machine: the test one, split at its last `&&` (set up, then run)
README_TEST = re.compile(r"^(python3 -m venv \.venv && .*) && (python -m pytest .*)$", re.M)
COUNTS = re.compile(r"(\d+) (passed|failed|errors?|xfailed|xpassed|skipped)")


def readme_test_command() -> tuple[str, str]:
    """README's set-up part and its test part."""
    m = README_TEST.search((ROOT / "README.md").read_text())
    if m is None:
        raise SystemExit("README.md gives no `python3 -m venv ... && python -m pytest ...` line")
    return m[1], m[2]


def one_clone(where: Path, setup: str, test: str) -> dict[str, object]:
    subprocess.run(["git", "clone", "--quiet", "--no-local", str(ROOT), str(where)], check=True)
    t0 = time.monotonic()
    subprocess.run(["bash", "-c", f"{setup} --quiet"], cwd=where, check=True,
                   stdout=subprocess.DEVNULL)
    install = time.monotonic() - t0
    py = where / ".venv" / "bin" / "python"
    floors = []
    for _ in range(5):
        t = time.monotonic()
        subprocess.run([str(py), "-c", "import torch"], check=True)
        floors.append(time.monotonic() - t)
    floor = statistics.median(floors)
    t0 = time.monotonic()
    proc = subprocess.run(["bash", "-c", f". .venv/bin/activate && {test} -q"], cwd=where,
                          capture_output=True, text=True)
    wall = time.monotonic() - t0
    last = [ln for ln in proc.stdout.splitlines() if " in " in ln and ("passed" in ln
                                                                       or "failed" in ln)]
    counts = {k.rstrip("s"): int(n) for n, k in COUNTS.findall(last[-1] if last else "")}
    failed = [ln for ln in proc.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    return {"exit": proc.returncode, "counts": counts, "failed": failed,
            "wall_s": round(wall, 1), "import_torch_s": round(floor, 2),
            "x_import": round(wall / floor), "install_s": round(install, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clones", type=int, default=5)
    a = ap.parse_args()
    setup, test = readme_test_command()
    rows = []
    for i in range(a.clones):
        where = Path(tempfile.mkdtemp(prefix="capstone-fresh-")) / "capstone"
        try:
            row = one_clone(where, setup, test)
        finally:
            shutil.rmtree(where.parent, ignore_errors=True)
        rows.append(row)
        print(json.dumps({"clone": i + 1, **row}), flush=True)
    passed = sum(r["exit"] == 0 for r in rows)
    counts = {json.dumps(r["counts"], sort_keys=True) for r in rows}
    xs = [int(str(r["x_import"])) for r in rows]
    figures = [
        Figure(f"README's test command (`{test}`) on fresh clones in fresh venvs",
               f"{passed} of {len(rows)} passed; "
               + ("the same tests each time: " + next(iter(counts)) if len(counts) == 1
                  else f"different counts: {sorted(counts)}"),
               f"{len(rows)} of {len(rows)}, the same count each time"),
        Figure("its time / `import torch` (each clone's, measured just before it)",
               f"median {statistics.median(xs)}x (from {min(xs)}x to {max(xs)}x; "
               f"`import torch` {min(float(str(r['import_torch_s'])) for r in rows):.2f}-"
               f"{max(float(str(r['import_torch_s'])) for r in rows):.2f} s)", "<= 112x"),
    ]
    for f in figures:
        print(f"{f.what}: {f.value}")
    save("fresh", figures)
    return 0 if passed == len(rows) and len(counts) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())

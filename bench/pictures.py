"""What showing the run costs a grading: `python -m tests.grade_class` on failing students
(`no_broadcast`, `deadlock_at_step_5`), with the timelines and pictures (this checkout) and
without (the suite as of --base-rev, in a temporary git worktree), round-robin so that load on
this shared machine falls on both alike; medians of --repeat.

    python bench/pictures.py [--base-rev c9b3ca5] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from record import Figure, save

ROOT = Path(__file__).resolve().parents[1]
STUDENTS = ("no_broadcast", "deadlock_at_step_5")


def grade(checkout: Path, subs: Path, out: Path) -> float:
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.monotonic()
    # the sample submissions import the reference package (a flag older checkouts lack)
    visible = ["--reference-visible"] if "--reference-visible" in (
        checkout / "tests" / "grade_class.py").read_text() else []
    # the entry's python3 is this interpreter, as for a grader in its activated venv (an
    # older checkout takes PATH's: outside the venv, one without torch, every run failing);
    # an older checkout's conftest.py registers the suite's options itself: without this
    # checkout's pytest plugin, which would have registered them first
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent),
                                                  os.environ["PATH"]])}
    if checkout != ROOT:
        env["PYTEST_ADDOPTS"] = (env.get("PYTEST_ADDOPTS", "") + " -p no:capstone-impl").strip()
    subprocess.run([sys.executable, "-m", "tests.grade_class", str(subs), "--out", str(out),
                    "--suite-seed", "7", *visible], cwd=checkout, check=True,
                   capture_output=True, env=env)
    if any("did not complete" in r.read_text() for r in (out / "students").rglob("results.json")):
        raise SystemExit(f"grade_class of {checkout} did not grade: see {out}/students/*/")
    return time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-rev", default="c9b3ca5",
                    help="the suite before timelines and pictures")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base, subs = Path(tmp) / "base", Path(tmp) / "class"
        subprocess.run(["git", "worktree", "add", "--detach", str(base), a.base_rev], cwd=ROOT,
                       check=True, capture_output=True)
        try:
            for s in STUDENTS:
                shutil.copytree(ROOT / "tests" / "submissions" / s, subs / s)
            times: dict[str, list[float]] = {"with": [], "without": []}
            for i in range(a.repeat):
                times["with"].append(grade(ROOT, subs, Path(tmp) / f"with{i}"))
                times["without"].append(grade(base, subs, Path(tmp) / f"without{i}"))
            pictures = len(list((Path(tmp) / "with0" / "feedback").rglob("*.png")))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT,
                           capture_output=True)
    w, wo = statistics.median(times["with"]), statistics.median(times["without"])
    print(f"grade_class, 2 failing students: with timelines and {pictures} pictures {w:.1f} s, "
          f"without {wo:.1f} s, ratio {w / wo:.2f}x (medians of {a.repeat})")
    save("pictures", [Figure(f"grade_class on 2 failing students with timelines and {pictures} "
                             f"pictures / `{a.base_rev}` without them",
                             f"{w / wo:.2f}x ({w:.1f} / {wo:.1f} s, medians of {a.repeat})",
                             "<= 1.1x")])
    return 0


if __name__ == "__main__":
    sys.exit(main())

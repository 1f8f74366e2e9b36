"""Grading one submission on this machine, as the autograder and grade_class grade it
(`tests.harness.platforms.session.grade`: the graded modules in a pytest session of their own, the
runs at once the box fits, `--run-timeout 30`), per containment: namespaces where unshare is
allowed, and the run-user containment (as in a Docker grader that refuses unshare).

    python bench/grading.py [SUBMISSION_DIR ...] [--containment namespaces run-user]
                            [--against REV [--rounds 3]] [--exercises tp,accum [--rounds 3]]

Defaults: the reference, `deadlock_at_step_5` and `ring` of tests/submissions. Prints a JSON
row per grading: wall time, score. `--against REV` grades with REV's suite too (a temporary
git worktree, this venv; the submission's `capstone` imported from that checkout), in turns
with this checkout's, and prints each checkout's median and the ratio to REV. `--exercises`
grades each submission in turns without and with the lesson's exercises, and prints the
ratio (issue 33's bound: 1.5x).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from record import Figure, save  # noqa: E402
from suite import children_cpu_s  # noqa: E402  (bench/, this script's folder)

from tests.harness.platforms.session import Grading, grade  # noqa: E402
from tests.harness.run.contain import FORCE_VAR  # noqa: E402

DEFAULT = [ROOT / "tests" / "submissions" / n for n in ("reference", "deadlock_at_step_5",
                                                        "ring")]


def lost_tests(results: dict[str, object]) -> dict[str, object]:
    """The tests that did not earn their points, with the first line of why (a grading of a
    correct submission that loses points is a finding, not noise)."""
    tests = results.get("tests")
    lost = {t["name"]: str(t.get("output", "")).split("\n", 1)[0][:300]
            for t in tests if isinstance(t, dict) and t.get("score") != t.get("max_score")
            } if isinstance(tests, list) else {}
    return {"lost": lost} if lost else {}


@contextlib.contextmanager
def worktree(rev: str) -> Iterator[Path]:
    """A temporary git worktree of `rev` (this venv runs it)."""
    with tempfile.TemporaryDirectory() as tmp:
        other = Path(tmp) / "other"
        subprocess.run(["git", "worktree", "add", "--detach", str(other), rev], cwd=ROOT,
                       check=True, capture_output=True)
        try:
            yield other
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(other)], cwd=ROOT,
                           capture_output=True)


def grade_with(checkout: Path, sub: Path, mode: str, name: str,
               extra: Sequence[str] = ()) -> dict[str, Any]:
    """One grading of `sub` by the suite of `checkout` (its bench/grading.py, in a process of
    its own), as a row: wall time, score, CPU of every process it made."""
    # The same submission, graded by each checkout's suite: its capstone (the reference's)
    # from that checkout too.
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    cpu0 = children_cpu_s()
    proc = subprocess.run([sys.executable, str(checkout / "bench" / "grading.py"),
                           str(sub.resolve()), "--containment", mode, *extra],
                          cwd=checkout, env=env, capture_output=True, text=True)
    rows = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode or not rows:
        raise SystemExit(f"{name} failed to grade {sub}:\n{proc.stderr[-2000:]}")
    return {**rows[-1], "suite": name, "cpu_s": round(children_cpu_s() - cpu0, 1)}


def side_by_side(a: argparse.Namespace) -> int:
    """This checkout and REV's, one grading each in turn (load falls on both alike)."""
    walls: dict[tuple[str, str, str], list[float]] = {}
    cpus: dict[tuple[str, str, str], list[float]] = {}
    with worktree(a.against) as other:
        checkouts = {"this checkout": ROOT, a.against: other}
        for _ in range(a.rounds):
            for sub in a.submissions:
                for mode in a.containment:
                    for name, path in checkouts.items():
                        row = grade_with(path, sub, mode, name)
                        walls.setdefault((sub.name, mode, name), []).append(row["wall_s"])
                        cpus.setdefault((sub.name, mode, name), []).append(row["cpu_s"])
                        print(json.dumps(row), flush=True)
    figures = []
    for sub in a.submissions:
        for mode in a.containment:
            here, there = (statistics.median(walls[(sub.name, mode, n)]) for n in checkouts)
            c_here, c_there = (statistics.median(cpus[(sub.name, mode, n)]) for n in checkouts)
            print(f"{sub.name} ({mode}): {here:.1f} s here, {there:.1f} s at {a.against}: "
                  f"{here / there:.2f}x wall; CPU {c_here:.1f} s against {c_there:.1f} s: "
                  f"{c_here / c_there:.2f}x (medians of {a.rounds})")
            figures.append(Figure(
                f"grading `{sub.name}` as the autograder and grade_class do ({mode}), this "
                f"checkout / `{a.against}`, in turns",
                f"{here / there:.2f}x wall ({here:.1f} / {there:.1f} s), {c_here / c_there:.2f}x"
                f" CPU ({c_here:.1f} / {c_there:.1f} CPU-s), medians of {a.rounds}",
                "<= 1.0x (no slower)"))
    save("grading", figures)
    return 0


def with_exercises(a: argparse.Namespace) -> int:
    """The same submission graded in turns without and with the exercises (namespaces)."""
    from tests.harness.report.grading import exercises_of

    chosen = exercises_of(a.exercises)
    walls: dict[tuple[str, bool], list[float]] = {}
    for _ in range(a.rounds):
        for sub in a.submissions:
            for ex in (False, True):
                with tempfile.TemporaryDirectory() as tmp:
                    t0 = time.monotonic()
                    results = grade(sub.resolve(), Path(tmp) / "results.json",
                                    Grading(exercises=chosen if ex else (),
                                            sees_reference=True))  # the samples
                    wall = time.monotonic() - t0
                walls.setdefault((sub.name, ex), []).append(wall)
                print(json.dumps({"submission": sub.name, "exercises": list(chosen) if ex
                                  else [], "wall_s": round(wall, 1),
                                  "score": results["score"], **lost_tests(results)}), flush=True)
    figures = []
    for sub in a.submissions:
        plain, both = (statistics.median(walls[(sub.name, ex)]) for ex in (False, True))
        print(f"{sub.name}: {plain:.1f} s without the exercises, {both:.1f} s with "
              f"{', '.join(chosen)}: {both / plain:.2f}x (medians of {a.rounds})")
        figures.append(Figure(f"grading `{sub.name}` with {', '.join(chosen)} / without, in "
                              "turns (namespaces)", f"{both / plain:.2f}x ({both:.1f} / "
                              f"{plain:.1f} s, medians of {a.rounds})", "<= 1.5x"))
    save("grading_exercises", figures)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("submissions", nargs="*", type=Path, default=DEFAULT)
    ap.add_argument("--containment", nargs="+", default=["namespaces", "run-user"])
    ap.add_argument("--against", metavar="REV", help="another revision, graded in turns")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--exercises", default="", help="e.g. tp,accum: with and without them")
    ap.add_argument("--keep-runs", type=Path, metavar="DIR",
                    help="keep the grading's runs in DIR (its pytest --basetemp), for "
                         "bench/grading_floor.py to start them again bare")
    a = ap.parse_args()
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
    if a.against:
        return side_by_side(a)
    if a.exercises:
        return with_exercises(a)
    # The entry is Gradescope's `python3 main.py`: this interpreter's, as tests.autograder's
    # rehearsal has it (outside the venv, PATH's python3 has no torch: every run would fail)
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
    if a.keep_runs:
        os.environ["PYTEST_ADDOPTS"] = f"--basetemp={a.keep_runs.resolve()}"
    for mode in a.containment:
        if mode == "namespaces":
            os.environ.pop(FORCE_VAR, None)
        else:
            os.environ[FORCE_VAR] = mode
        for sub in a.submissions:
            with tempfile.TemporaryDirectory() as tmp:
                t0 = time.monotonic()
                results = grade(sub.resolve(), Path(tmp) / "results.json",
                                Grading(sees_reference=True))  # the samples import it
                wall = time.monotonic() - t0
            print(json.dumps({"submission": sub.name, "containment": mode,
                              "wall_s": round(wall, 1), "score": results["score"],
                              **lost_tests(results)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

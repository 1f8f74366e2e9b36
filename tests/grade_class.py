"""Grade a whole class: one subfolder per student, one grading session per student.

    python -m tests.grade_class SUBMISSIONS/ --out grades/ [--entry "python3 main.py"] [-j K]

Each subfolder of SUBMISSIONS is a student (its name is the `student` column); the entry
command runs inside it. Students are graded one after another (or K at once with -j when the
machine has the cores and runs are contained in namespaces), with a progress bar and ETA.
Run it again and it resumes: a student with a results file is not graded twice (delete
grades/students/NAME to regrade one). It writes:

- grades/grades.csv: student, score, points per invariant, first violation;
- grades/feedback/NAME.md: per invariant, the verdict, the first violation and its likely
  causes in the lesson's terms; for each failed invariant a picture of what the runs did and
  the timelines of its runs (Chrome trace JSON, for Perfetto) in grades/feedback/NAME/;
- grades/summary.md and summary.png: how many students fail each invariant;
- grades/students/NAME/: that student's results.json and the session's log.

A submission that crashes, hangs, floods its output or leaves processes behind costs only
its own row: every run is bounded and contained, and so is each student's whole session.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import replace
from pathlib import Path
from typing import Any

from tqdm import tqdm

from tests.harness import contain
from tests.harness.class_report import write_csv, write_feedback, write_summary
from tests.harness.session import Grading, grade


def students(submissions: Path) -> list[Path]:
    return sorted(p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith("."))


def graded(results: Path) -> dict[str, Any] | None:
    """A finished student's results (resume), or None."""
    try:
        data = json.loads(results.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "score" in data else None


def grade_class(submissions: Path, out: Path, g: Grading, jobs: int = 1,
                progress: bool = True) -> dict[str, dict[str, Any]]:
    """Grade every student not graded yet; write the CSV, feedback and summary."""
    if not submissions.is_dir():
        raise SystemExit(f"{submissions}: not a folder of submissions (one subfolder per "
                         "student)")
    everyone = students(submissions)
    grades: dict[str, dict[str, Any]] = {}
    todo = []
    for s in everyone:
        done = graded(out / "students" / s.name / "results.json")
        if done is None:
            todo.append(s)
        else:
            grades[s.name] = done
    if jobs > 1 and contain.mode() != contain.NAMESPACES:
        print("grade_class: runs cannot be kept apart here (no namespaces): grading one "
              "student at a time", file=sys.stderr)
        jobs = 1
    if jobs > 1:
        g = replace(g, workers=0)  # K sessions share the cores: no xdist inside each

    def one(student: Path) -> tuple[str, dict[str, Any]]:
        d = out / "students" / student.name
        return student.name, grade(student, d / "results.json", g, log=d / "pytest.log")

    bar = tqdm(total=len(everyone), initial=len(everyone) - len(todo), unit="student",
               desc="grading", disable=not progress)
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        for fut in as_completed([pool.submit(one, s) for s in todo]):
            name, results = fut.result()
            grades[name] = results
            bar.set_postfix_str(f"{name}: {results.get('score', 0):.4g}")
            bar.update()
    bar.close()
    (out / "feedback").mkdir(parents=True, exist_ok=True)
    for name, results in grades.items():
        write_feedback(out, name, results, out / "students" / name)
    write_csv(out / "grades.csv", grades)
    write_summary(out, grades)
    return grades


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.grade_class",
                                 description="grade a folder of submissions, one per student")
    ap.add_argument("submissions", type=Path, help="one subfolder per student")
    ap.add_argument("--out", type=Path, default=Path("grades"))
    ap.add_argument("--entry", default="python3 main.py",
                    help="command that runs a submission, inside its folder")
    ap.add_argument("-j", "--jobs", type=int, default=1,
                    help="students graded at once (default 1; each session then uses the "
                         "xdist workers the box fits)")
    ap.add_argument("--run-timeout", type=float, default=30.0)
    ap.add_argument("--suite-seed", type=int, default=None,
                    help="one seed for the whole class (default: a fresh one per student)")
    ap.add_argument("--session-timeout", type=float, default=600.0,
                    help="seconds one student's whole session may take (default 600)")
    ap.add_argument("--no-observe", action="store_true",
                    help="submissions are not Python programs: no observed checks")
    a = ap.parse_args(argv)
    if a.jobs > (os.cpu_count() or 1):
        print(f"grade_class: -j {a.jobs} on {os.cpu_count()} cores: runs will be slower, "
              "not faster", file=sys.stderr)
    g = Grading(a.entry, a.run_timeout, None, a.suite_seed, a.session_timeout,
                observe=not a.no_observe)
    grades = grade_class(a.submissions, a.out, g, a.jobs)
    print(f"{len(grades)} students graded: {a.out / 'grades.csv'}, {a.out / 'feedback'}/, "
          f"{a.out / 'summary.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

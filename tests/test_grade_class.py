"""A class graded end to end: broken students cost only their own rows, a second run resumes,
and the CSV, feedback files and summary are written."""

from __future__ import annotations

import csv
import sys

import pytest

from tests.grade_class import grade_class
from tests.harness.grading import WEIGHTS
from tests.harness.session import Grading

STUDENTS = {
    "crasher": "raise SystemExit('ImportError: no module named zero')\n",
    "hanger": "import time\ntime.sleep(3600)\n",
    "flooder": "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n",
}


@pytest.mark.long
@pytest.mark.slow
def test_a_class_of_broken_students_is_graded_and_resumed(tmp_path):
    subs = tmp_path / "submissions"
    for name, code in STUDENTS.items():
        (subs / name).mkdir(parents=True)
        (subs / name / "main.py").write_text(code)
    out = tmp_path / "grades"
    # one process per student's session (workers=0): xdist inside a session is the grade-file
    # tests' and the autograder's to show; here three sessions already go at once
    g = Grading(entry=f"{sys.executable} main.py", run_timeout_s=0.5, suite_seed=0,
                session_timeout_s=120, file_mb=4, workers=0)
    grades = grade_class(subs, out, g, jobs=3, progress=False)
    assert set(grades) == set(STUDENTS) and all(r["score"] == 0 for r in grades.values())
    with open(out / "grades.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["student"] for r in rows] == sorted(STUDENTS)
    assert list(rows[0]) == ["student", "score", *WEIGHTS, "first_violation", "not_graded"]
    assert all(r["not_graded"] == "" for r in rows)
    assert all(r["first_violation"] for r in rows)
    hang = (out / "feedback" / "hanger.md").read_text()
    assert "FAILED" in hang and "bound" in hang and "no module named zero" not in hang
    assert "no module named zero" in (out / "feedback" / "crasher.md").read_text()
    assert (out / "summary.png").stat().st_size > 0
    assert f"| no_deadlock | {len(STUDENTS)} |" in (out / "summary.md").read_text()
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("students/*/results.json")}
    again = grade_class(subs, out, g, jobs=3, progress=False)  # resumes: nobody is graded twice
    assert again.keys() == grades.keys()
    assert {p: p.stat().st_mtime_ns for p in out.glob("students/*/results.json")} == stamps

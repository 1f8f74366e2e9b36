"""A class of four graded every way an instructor can (minutes: `pytest -m platforms`,
which .ci/run runs): `grade_class` over a Gradescope-shaped export with
submission_metadata.yml (as submitit jobs on this machine), the Gradescope autograder zip,
PrairieLearn's grader and the GitHub Classroom steps run as the actions run them. One suite
seed: every way gives the same grades; Classroom gives an invariant's points only when all
its checks pass (its command grader scores an exit code), as every platform does under the
default grading policy.

grade_class's other ways are one grading code under another dispatch, each checked where it
is cheaper: a plain folder one at a time by README's runnable block (tests/test_docs.py),
several at once by tests/test_grade_class.py (a class of broken students, three at once),
and submitit's jobs against one at a time there too; grading this class by them again here
cost 8 gradings (~2 minutes of CI) and checked nothing more."""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.autograder import unpack
from tests.grade_class import grade_class
from tests.harness.platforms.session import Grading
from tests.harness.report.grading import WEIGHTS
from tests.test_autograder import run_autograder, run_prairielearn
from tests.test_classroom import _template, classroom_points, grade_in_classroom

# 16 gradings (about 5 minutes on 2 CPUs): past the suite's 300 s per test
pytestmark = [pytest.mark.platforms, pytest.mark.long, pytest.mark.slow,
              pytest.mark.timeout(2400)]
ROOT = Path(__file__).resolve().parents[1]
CLASS = ("reference", "ring", "no_broadcast", "deadlock_at_step_5")
PEOPLE = {"reference": [("Ada Lovelace", "1815")],
          "ring": [("Grace Hopper", "1906"), ("Alan Turing", "1912")],  # a group of two
          "no_broadcast": [("Edsger Dijkstra", "1930")],
          "deadlock_at_step_5": [("Barbara Liskov", "1939")]}


def _export(root: Path) -> Path:
    """The class as Gradescope exports it: a folder per submission id, and the metadata."""
    lines = ["---"]
    for i, name in enumerate(CLASS):
        sid = f"submission_{9000 + i}"
        shutil.copytree(ROOT / "tests" / "submissions" / name, root / sid)
        lines += [f"{sid}:", "  :submitters:"]
        for person, number in PEOPLE[name]:
            lines += [f"  - :name: {person}", f"    :sid: '{number}'",
                      f"    :email: {number}@example.edu"]
        lines += ["  :created_at: 2026-11-30 23:00:00.000000000 -08:00", "  :score: 0.0"]
    (root / "submission_metadata.yml").write_text("\n".join(lines) + "\n")
    return root


def test_a_class_gets_the_same_grades_on_every_platform(tmp_path):
    pytest.importorskip("submitit", reason="the [class] extra (pip install -e '.[class]')")
    export = _export(tmp_path / "export")
    by_id = {f"submission_{9000 + i}": name for i, name in enumerate(CLASS)}
    g = Grading(entry=f"{sys.executable} main.py", suite_seed=0,
                sees_reference=True)  # the sample class imports the reference package
    ways: dict[str, dict[str, float]] = {}
    out = tmp_path / "jobs"
    graded = grade_class(export, out, g, progress=False, executor="local", jobs=2)
    ways["grade_class"] = {by_id[k]: r["score"] for k, r in graded.items()}
    with open(out / "grades.csv") as f:
        rows = {r["student"]: r for r in csv.DictReader(f)}
    for name, people in PEOPLE.items():  # a row per student, a group's alike
        for person, number in people:
            assert rows[person]["sid"] == number
            assert float(rows[person]["score"]) == pytest.approx(ways["grade_class"][name],
                                                                 abs=0.01)
    zip_path = tmp_path / "ag.zip"
    subprocess.run([sys.executable, "-m", "tests.autograder", "--suite-seed", "0", "--out",
                    str(zip_path)], cwd=ROOT, check=True, capture_output=True)
    pl_dir = tmp_path / "pl"
    subprocess.run([sys.executable, "-m", "tests.autograder", "--platform", "prairielearn",
                    "--suite-seed", "0", "--out", str(pl_dir)], cwd=ROOT, check=True,
                   capture_output=True)
    template = _template(tmp_path / "classroom", "--suite-seed", "0")
    ways["autograder"], ways["prairielearn (x100)"], ways["classroom"] = {}, {}, {}
    whole: dict[str, float] = {}
    for name in CLASS:
        sub = ROOT / "tests" / "submissions" / name
        ways["autograder"][name] = run_autograder(unpack(zip_path, tmp_path / f"gs-{name}",
                                                         sub))["score"]
        pl, _ = run_prairielearn(pl_dir, sub, tmp_path / f"pl-{name}")
        assert pl["gradable"] is True
        ways["prairielearn (x100)"][name] = pl["score"] * 100
        reported, model = grade_in_classroom(template, sub, tmp_path / f"cr-{name}")
        ways["classroom"][name] = reported["points"]
        whole[name] = classroom_points(model)
    first = ways["grade_class"]
    assert first["reference"] == first["ring"] == 100
    assert first["no_broadcast"] == 100 - WEIGHTS["equal_rank_norms"] - WEIGHTS[
        "single_process_parity"]
    for label, scores in ways.items():  # Classroom's all-or-none is the default policy's
        assert scores == pytest.approx(first, abs=0.01), (label, scores, first)
    assert whole == pytest.approx(first, abs=0.01), (whole, first)

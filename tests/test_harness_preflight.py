"""The grader's own set-up is tried before any student is charged: a bare `python3` in an
entry is the suite's interpreter, and an interpreter that cannot run a submission (no torch)
stops the grading with one line saying what to fix, and nobody gets a score."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.platforms.preflight import SetupError, check_entry, entry_for


@pytest.fixture(scope="module")
def no_torch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python without the suite's packages: a fresh venv of the base interpreter (as the
    system's python3 is, next to a venv that was never activated)."""
    venv = tmp_path_factory.mktemp("bare") / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python3"
    assert subprocess.run([python, "-c", "import torch"], capture_output=True).returncode
    return python


def test_a_bare_python_in_the_entry_is_the_suites_interpreter():
    assert entry_for("python3 main.py") == f"{sys.executable} main.py"
    assert entry_for("python main.py --x 'a b'", "/opt/py") == "/opt/py main.py --x 'a b'"
    assert entry_for("bash run.sh") == "bash run.sh"  # not an interpreter: as written
    check_entry(entry_for("python3 main.py"))  # the suite's own: torch, numpy, the observer


def test_an_interpreter_without_torch_is_refused_with_what_to_fix(no_torch):
    with pytest.raises(SetupError, match=r"No module named 'torch'.*--python .venv/bin/python"):
        check_entry(f"{no_torch} main.py")


def test_a_class_graded_with_it_stops_and_nobody_is_scored(no_torch, tmp_path):
    """tests/hostile's scenario for a whole class: `grade_class --python` naming a Python
    without torch grades no one (every student would otherwise score 0 for the machine)."""
    subs = tmp_path / "class"
    for name in ("ada", "bob"):
        (subs / name).mkdir(parents=True)
        (subs / name / "main.py").write_text("print('never run')\n")
    done = subprocess.run([sys.executable, "-m", "tests.grade_class", str(subs), "--out",
                           str(tmp_path / "grades"), "--python", str(no_torch),
                           "--suite-seed", "0"], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1], timeout=120)
    assert done.returncode == 2, done.stderr
    [line] = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert line.startswith("grade_class: not grading: ") and "torch" in line, line
    assert not (tmp_path / "grades" / "grades.csv").exists()
    assert not list((tmp_path / "grades").glob("students/*/results.json"))

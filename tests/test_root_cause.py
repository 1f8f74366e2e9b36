"""Causes before consequences: a submission that deadlocks in step 5, or whose rank 1 raises
in step 3, is told so where the run's ending is checked (no_deadlock: the blocking calls, the
exception with its rank and line), and every check that needed that run to finish says so in
one line ("not checked: the base run did not finish (...)"), with no statement drawn from a
step the run never finished or a fault it never reached. Their points stay lost: failing a
run on purpose gains nothing."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.harness.platforms.session import Grading, grade
from tests.harness.report.grading import NOT_CHECKED

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.long, pytest.mark.slow]


def _graded(tmp_path: Path, program: Path) -> dict[str, str]:
    sub = tmp_path / "sub"
    sub.mkdir()
    shutil.copy(program, sub / "main.py")
    if program.parent.name == "hostile":  # index_error.py starts its ranks by tutorial.py
        shutil.copy(program.with_name("tutorial.py"), sub)
    results = grade(sub, tmp_path / "results.json",  # programs that import the reference
                    Grading(entry=f"{sys.executable} main.py", sees_reference=True).resolved())
    assert results["score"] < 50
    return {t["name"].split("/")[-1]: t["output"] for t in results["tests"]
            if t.get("status") == "failed"}


def _consequences(failed: dict[str, str]) -> dict[str, str]:
    """Every failed test but the ones that check how the runs ended."""
    return {n: o for n, o in failed.items() if "no_deadlock" not in n}


def _assert_resume_not_started(failed: dict[str, str], cause: str) -> None:
    """The resume from step 10 of a base run that never got there is not started: its ending
    is told as the base run's consequence (not as a failed resume of its own)."""
    resumed = next(o for n, o in failed.items() if "no_deadlock" in n and "[resumed]" in n)
    assert resumed.startswith(
        f"resumed run not started: not checked: the base run did not finish ({cause}"), resumed
    assert "\n" not in resumed, resumed


@pytest.mark.grades  # a grading session that sits out a deadlock (seconds): graders' tier
def test_a_deadlock_is_told_once_and_what_it_broke_in_one_line_each(tmp_path, reference_only):
    failed = _graded(tmp_path, ROOT / "tests" / "submissions" / "deadlock_at_step_5" /
                     "main.py")
    ending = next(o for n, o in failed.items() if "no_deadlock" in n and "[base]" in n)
    assert "blocked in recv(src=1)" in ending
    _assert_resume_not_started(failed, "deadlock")
    for name, out in _consequences(failed).items():
        assert "not checked: " in out and "likely" not in out, (name, out)
        if "[base]" in name:
            assert out.split(": ", 1)[1].startswith("not checked: the base run did not "
                                                    "finish (deadlock"), (name, out)
            assert "\n" not in out, (name, out)
    text = "\n".join(failed.values())
    assert "of the gradient is reduced" not in text and "guard never fired" not in text
    # Told once (issue 73, point 6): where each rank sat, a long line, is in the results file
    # only in the failure of the ending that no_deadlock checks (and the cause's own line at
    # the top); every consequence names it "deadlock" and points there.
    results = json.loads((tmp_path / "results.json").read_text())
    said = {t["name"].split("/")[-1]: str(t["output"]) for t in results["tests"]}
    blocked: dict[str, str] = {}
    for run in ("base", "single"):  # both deadlock in step 5, each blocked its own way
        own = next(n for n in said if "no_deadlock" in n and f"[{run}]" in n)
        blocked[run] = said[own].split("found deadlock: ", 1)[1].split(" (every rank sat")[0]
        assert "blocked in recv(src=1) at sub/main.py:" in blocked[run], said[own]
        assert [n for n, o in said.items() if blocked[run] in o] == [own], (run, blocked)
    assert results["output"].count(blocked["base"]) == 1, results["output"]  # the cause, once
    briefly = 0
    for name, out in said.items():
        for run in ("base", "single", "resumed"):  # the runs no_deadlock checks the ends of
            if f"the {run} run did not finish" in out:
                briefly += 1
                assert out.endswith(f"{NOT_CHECKED}the {run} run did not finish (deadlock); "
                                    "see no_deadlock"), (name, out)
    assert briefly >= 8, said  # the consequences of the base and single runs' deadlocks


@pytest.mark.grades  # a grading session whose ranks start torch each (seconds): graders' tier
def test_a_crash_is_told_by_its_exception_rank_and_line(tmp_path, reference_only):
    failed = _graded(tmp_path, ROOT / "tests" / "hostile" / "index_error.py")
    ending = next(o for n, o in failed.items() if "no_deadlock" in n and "[base]" in n)
    # the base run's reason: the exit code, then the student's line, not a peer's error
    assert "found 1 (exit code 1: rank 1 raised IndexError: list index out of range at " \
        "sub/main.py:" in ending, ending
    assert "(`_ = offsets[len(steps) - 1]" in ending.splitlines()[0], ending
    _assert_resume_not_started(failed, "exit code 1: rank 1 raised IndexError")
    # with the few lines of the submission around it, the line that raised marked
    assert "where it raised:" in ending, ending
    assert next(ln for ln in ending.splitlines() if ln.startswith(">")).endswith(
        "_ = offsets[len(steps) - 1]  # step 3: no such offset"), ending
    for name, out in _consequences(failed).items():
        assert "not checked: " in out and "likely" not in out, (name, out)
        if "[base]" in name:
            assert "not checked: the base run did not finish (exit code 1: rank 1 raised " \
                   "IndexError" in out, (name, out)
        if "fault_rollback" in name or "over N" in out:  # told without starting those runs
            assert " run not started: not checked: the base run did not finish" in out, \
                (name, out)
    assert "guard never fired" not in "\n".join(failed.values())


def test_ranks_that_raise_the_same_open_the_feedback_with_one_cause(tmp_path, reference_only):
    """tests/hostile/same_error.py: four fork-context Process ranks raise the same KeyError;
    their tracebacks and multiprocessing's "Process ForkProcess-N:" headers interleave on
    stderr. The feedback opens with the one cause, once, for ranks 0-3."""
    from tests.harness.report.class_report import feedback

    sub = tmp_path / "sub"
    sub.mkdir()
    shutil.copy(ROOT / "tests" / "hostile" / "same_error.py", sub / "main.py")
    results = grade(sub, tmp_path / "results.json",
                    Grading(entry=f"{sys.executable} main.py").resolved())
    page = feedback("student", results)
    cause = "ranks 0-3 raised KeyError: 'betas' at sub/main.py:20"
    went = page.split("## What went wrong", 1)[1].split("\n## ", 1)[0]
    assert cause in went, went
    assert page.split("## What went wrong", 1)[0].count(cause) == 0, page  # told once, there
    assert "ForkProcess" not in page and "ForkProcess" not in json.dumps(results)


@pytest.mark.grades  # a grading session (seconds): the hold-out mistakes' tier
def test_ranks_that_write_no_metrics_are_told_as_the_contract_first(tmp_path, reference_only):
    """Issue 63, finding 2: only rank 0 logs (tests/holdout/only_rank0_logs.py). The missing
    files are the cause, told first as the contract violation they are, where the run's
    ending is checked; every check that would read them says so in one line, and nothing
    is inferred from their absence (no "ranks rolled back differently")."""
    failed = _graded(tmp_path, ROOT / "tests" / "holdout" / "only_rank0_logs.py")
    ending = next(o for n, o in failed.items() if "no_deadlock" in n and "[base]" in n)
    assert "ranks 1-3 wrote no metrics file: run contract v1 asks every rank" in ending, ending
    for name, out in _consequences(failed).items():
        assert "not checked: the " in out and "wrote no metrics file" in out, (name, out)
        assert "\n" not in out and "likely" not in out, (name, out)
    assert "rolled back differently" not in "\n".join(failed.values())

"""The Gradescope results file: weights shared per module, totals, missing reports."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from tests.harness.report.grading import (
    CONFIG_VAR,
    EXERCISES,
    INVARIANTS,
    LIKELY,
    NOT_CHECKED,
    NOT_GRADED,
    WEIGHTS,
    exercises_of,
    graded_name,
    selected_exercises,
    write_results,
)
from tests.harness.report.ledger import decimal_sum


def test_weights_total_100_and_only_graded_modules_count():
    assert sum(v for k, v in WEIGHTS.items() if k not in EXERCISES) == 100
    assert graded_name("tests/test_exercise_accumulation.py::test_x") == "accumulation"
    assert graded_name("tests/test_exercises.py::test_x") is None  # the reference's units
    assert graded_name("tests/test_invariant_no_deadlock.py::test_x[base]") == "no_deadlock"
    assert graded_name("tests/test_fault_rollback.py::test_y[nan-12]") == "rollback"
    assert graded_name("tests/test_fault_mutants.py::test_z") is None
    assert graded_name("tests/test_zero.py::test_w") is None


def test_scores_split_per_module_and_add_up_exactly(tmp_path):
    collected = {f"tests/test_invariant_single_process_parity.py::t[{i}]": "single_process_parity"
                 for i in range(3)}
    collected["tests/test_invariant_zero1_memory.py::t"] = "zero1_memory"
    outcomes = {n: {"status": "passed", "output": ""} for n in collected}
    results = write_results(tmp_path / "r.json", collected, outcomes, 1.5)
    assert results["score"] == WEIGHTS["single_process_parity"] + WEIGHTS["zero1_memory"]
    assert json.loads((tmp_path / "r.json").read_text()) == results
    # the ledger's shares of 10 points over 3 checks: 3.3334 + 3.3333 + 3.3333, not 3 x 3.3333
    assert [t["max_score"] for t in results["tests"]] == \
        [3.3334, 3.3333, 3.3333, WEIGHTS["zero1_memory"]]
    assert decimal_sum(t["score"] for t in results["tests"]) == Decimal(
        WEIGHTS["single_process_parity"] + WEIGHTS["zero1_memory"])


def test_a_test_that_never_reported_scores_0(tmp_path):
    collected = {"tests/test_invariant_no_deadlock.py::t": "no_deadlock"}
    results = write_results(tmp_path / "r.json", collected, {}, 0.0)
    [test] = results["tests"]
    assert (results["score"], test["status"], test["output"]) == \
        (0, "failed", "did not run to completion")


def test_checks_turned_off_cost_no_points(tmp_path):
    """Under --no-observe the observed tests skip: the rest still add up to 100."""
    collected = {f"tests/test_invariant_{m}.py::t": m for m in INVARIANTS if m != "rollback"}
    collected["tests/test_fault_rollback.py::t"] = "rollback"
    collected["tests/test_invariant_zero1_memory.py::measured"] = "zero1_memory"
    outcomes = {n: {"status": "passed", "output": ""} for n in collected}
    for n in ("tests/test_invariant_communication.py::t",
              "tests/test_invariant_zero1_memory.py::measured"):
        outcomes[n] = {"status": "skipped", "output": "the observer is off (--no-observe)"}
    results = write_results(tmp_path / "r.json", collected, outcomes, 1.0)
    assert results["score"] == 100
    off = [t for t in results["tests"] if t["max_score"] == 0]
    assert len(off) == 2 and all(t["output"].startswith("not graded") for t in off)


def test_a_test_the_machine_could_not_grade_is_neither_passed_nor_failed(tmp_path):
    """Its points stay out of reach (no scaling hides it), no status, and the output says so
    first; the class report flags the student for a regrade."""
    from tests.harness.report.class_report import feedback, per_invariant, write_csv

    collected = {f"tests/test_invariant_{m}.py::t": m for m in INVARIANTS if m != "rollback"}
    outcomes = {n: {"status": "passed", "output": ""} for n in collected}
    why = f"{NOT_GRADED}base run: the grading machine ran out of memory (limit 768 MB)"
    outcomes["tests/test_invariant_no_deadlock.py::t"] = {"status": "skipped", "output": why}
    results = write_results(tmp_path / "r.json", collected, outcomes, 1.0)
    [spoiled] = [t for t in results["tests"] if "no_deadlock" in t["name"]]
    assert spoiled["score"] == 0 and spoiled["max_score"] == WEIGHTS["no_deadlock"]
    assert "status" not in spoiled
    assert results["score"] == 100 - WEIGHTS["rollback"] - WEIGHTS["no_deadlock"]
    assert results["output"].startswith("SCORE INCOMPLETE: 1 of ")  # what Gradescope shows
    assert per_invariant(results)["no_deadlock"]["not_graded"].startswith("base run")
    assert "## no_deadlock: NOT GRADED" in feedback("ada", results)
    write_csv(tmp_path / "g.csv", {"ada": results})
    import csv

    with open(tmp_path / "g.csv") as f:
        [row] = list(csv.DictReader(f))
    assert row["not_graded"] == "no_deadlock" and row["student"] == row["submission"] == "ada"


def test_the_class_median_is_the_median(tmp_path):
    from tests.harness.report.class_report import write_summary

    write_summary(tmp_path, {"a": {"score": 100.0, "tests": []},
                             "b": {"score": 90.0, "tests": []}})
    assert "Median score 95;" in (tmp_path / "summary.md").read_text()


def test_the_cause_is_told_once_first_and_the_class_is_grouped_by_it(tmp_path):
    """A deadlocking student: no_deadlock's cause once, first; what it broke one line each,
    counted under the cause in the class summary, not under each invariant."""
    from tests.harness.report.class_report import feedback, root_causes, write_summary

    cause = "ranks issue different collectives; deadlock: rank 0 blocked in recv(src=1)"
    tests = [{"name": "tests/test_invariant_no_deadlock.py::t[base]", "score": 0.0,
              "max_score": 10.0, "status": "failed",
              "output": f"termination of the base run: deadlock\n{LIKELY}{cause}"}]
    for name in ("monotonic_loss", "zero1_memory", "communication"):
        tests.append({"name": f"tests/test_invariant_{name}.py::t", "score": 0.0,
                      "max_score": 10.0, "status": "failed",
                      "output": f"{name} of the base run: {NOT_CHECKED}the base run did not "
                                "finish (deadlock); see no_deadlock",
                      "extra_data": {"not_checked": True}})
    deadlocked = {"score": 0.0, "output": "", "tests": tests}
    assert root_causes(deadlocked) == [cause]
    page = feedback("ada", deadlocked)
    assert page.index("## What went wrong") < page.index("## no_deadlock")
    assert page.count(cause) == 2  # the cause, then its invariant's likely line
    assert "\n\nnot checked: the base run did not finish (deadlock); see no_deadlock\n" in page
    ok = {"score": 100.0, "output": "", "tests": [dict(t, score=10.0, status="passed")
                                                  for t in tests]}
    write_summary(tmp_path, {"ada": deadlocked, "bob": dict(deadlocked), "cy": ok})
    summary = (tmp_path / "summary.md").read_text()
    assert f"| {cause} | 2 | ada, bob |" in summary
    assert "| zero1_memory | 0 |" in summary and "| no_deadlock | 2 |" in summary


def _deadlocked_outcomes(collected: dict[str, str]) -> dict[str, dict[str, Any]]:
    """A submission that deadlocks on purpose in its base run: no_deadlock fails, every
    other check is "not checked" (conftest.holds' words)."""
    outcomes = {n: {"status": "failed", "not_checked": True,
                    "output": "a check: not checked: the base run did not "
                    "finish (deadlock: ...); see no_deadlock"} for n in collected}
    outcomes["tests/test_invariant_no_deadlock.py::t"] = {
        "status": "failed", "output": "no_deadlock: 1 violation(s)"}
    return outcomes


def test_a_run_failed_on_purpose_earns_nothing_for_what_it_kept_from_running(tmp_path):
    """Default policy: a check whose run did not finish fails and earns 0, so stopping a run
    is never worth more than finishing it wrong; the output states the policy."""
    collected = {f"tests/test_invariant_{m}.py::t": m for m in INVARIANTS}
    results = write_results(tmp_path / "r.json", collected, _deadlocked_outcomes(collected), 1.0)
    assert results["score"] == 0
    assert all(t["status"] == "failed" for t in results["tests"])
    assert f"{len(INVARIANTS) - 1} check(s) were not checked" in results["output"]
    assert "each earns 0% of its points" in results["output"]


def test_the_instructor_may_give_not_checked_checks_a_share_of_their_points(tmp_path,
                                                                            monkeypatch):
    collected = {f"tests/test_invariant_{m}.py::t": m for m in INVARIANTS}
    config = tmp_path / "grading.json"
    config.write_text(json.dumps({"not_checked_credit": 0.5}))
    monkeypatch.setenv(CONFIG_VAR, str(config))
    results = write_results(tmp_path / "r.json", collected, _deadlocked_outcomes(collected), 1.0)
    assert results["score"] == pytest.approx((100 - WEIGHTS["no_deadlock"]) / 2)
    assert "each earns 50% of its points" in results["output"]
    config.write_text(json.dumps({"not_checked_credit": 2}))
    with pytest.raises(ValueError, match="not_checked_credit"):
        write_results(tmp_path / "r.json", collected, {}, 1.0)


def test_exercises_are_graded_only_where_a_grading_selects_them(tmp_path, monkeypatch):
    from tests.harness.platforms.session import Grading, graded_modules, pytest_command

    assert not any("test_exercise_" in m for m in graded_modules())
    assert any(m.endswith("test_exercise_accumulation.py")
               for m in graded_modules(exercises=("accum",)))
    assert exercises_of("accum, accumulation") == ("accumulation",)
    with pytest.raises(ValueError, match="unknown exercise"):
        exercises_of("pipeline")
    config = tmp_path / "grading.json"
    config.write_text(json.dumps({"exercises": ["accumulation"]}))
    assert selected_exercises(config) == ("accumulation",)
    monkeypatch.delenv(CONFIG_VAR, raising=False)
    assert selected_exercises() == ()
    cmd = pytest_command(tmp_path / "r.json", Grading(grading_config=config, runs_at_once=1))
    assert any(c.endswith("test_exercise_accumulation.py") for c in cmd)
    cmd = pytest_command(tmp_path / "r.json", Grading(runs_at_once=1))
    assert not any("test_exercise_" in c for c in cmd)


def test_a_grading_with_both_seeds_given_is_the_same_grading_every_time(tmp_path):
    """A grading draws its suite seed and its fault seed afresh unless given (a real grading:
    no answer replay); the hold-outs are graded under both given (tests/holdout/), so that a
    verdict is the mistake's and never a draw's."""
    from tests.harness.platforms.session import Grading, pytest_command

    cmd = pytest_command(tmp_path / "r.json", Grading(runs_at_once=1, suite_seed=0,
                                                      fault_seed=7))
    assert cmd[cmd.index("--suite-seed") + 1] == "0"
    assert cmd[cmd.index("--fault-seed") + 1] == "7"
    fresh = pytest_command(tmp_path / "r.json", Grading(runs_at_once=1))
    assert "--suite-seed" not in fresh and "--fault-seed" not in fresh


def test_the_autograder_ships_the_exercises_it_grades():
    from tests.autograder import contents, parse_build_args

    a, weights = parse_build_args(["--out", "x", "--exercises", "accum", "--suite-seed", "1"],
                                  "p", "d", "o")
    generated, files = contents(a.entry, a.run_timeout, weights, a.visibility,
                                exercises=a.exercises)
    assert json.loads(generated["grading.json"])["exercises"] == ["accumulation"]
    assert any(f.name == "test_exercise_accumulation.py" for f in files)
    _, plain = contents("python3 main.py", 30, {}, {})
    assert not any(f.name.startswith("test_exercise_") for f in plain)


def test_the_class_report_shows_an_exercise_column_only_when_graded(tmp_path):
    from tests.harness.report.class_report import INVARIANTS, columns

    def results(names: list[str]) -> dict[str, Any]:
        return {"score": 10.0, "tests": [{"name": f"tests/test_{n}.py::t", "score": 10.0,
                                          "max_score": 10.0, "status": "passed"}
                                         for n in names]}
    plain = {"ann": results(["invariant_no_deadlock"])}
    assert columns(plain) == INVARIANTS
    graded = {"ann": results(["invariant_no_deadlock", "exercise_accumulation"])}
    assert columns(graded) == (*INVARIANTS, "accumulation")


def test_a_submission_is_graded_once_per_options_and_whole(tmp_path, monkeypatch):
    """graded_once: the tests that read one submission's results model share one session, of
    a copy of it; other options are another session; a session that left no results is
    graded again."""
    from pathlib import Path

    from tests.harness.platforms import session

    calls: list[tuple[str, int | None]] = []

    def fake_grade(submission: Path, results: Path, g: session.Grading) -> dict[str, Any]:
        assert submission != sub and (submission / "main.py").read_text() == "print(1)\n"
        calls.append((submission.name.split("-")[0], g.suite_seed))  # a copy is graded
        if g.suite_seed == 7:
            raise KeyboardInterrupt  # killed midway: nothing is kept
        results.write_text(json.dumps({"score": 80.0, "seed": g.suite_seed}))
        return {}

    monkeypatch.setattr(session, "grade", fake_grade)
    sub = tmp_path / "no_broadcast"
    sub.mkdir()
    (sub / "main.py").write_text("print(1)\n")
    cache = tmp_path / "graded"
    first = session.graded_once(cache, sub, session.Grading(suite_seed=0))
    assert first == session.graded_once(cache, sub, session.Grading(suite_seed=0))
    assert first == {"score": 80.0, "seed": 0} and calls == [("no_broadcast", 0)]
    assert session.graded_once(cache, sub, session.Grading(suite_seed=1))["seed"] == 1
    with pytest.raises(KeyboardInterrupt):
        session.graded_once(cache, sub, session.Grading(suite_seed=7))
    with pytest.raises(KeyboardInterrupt):
        session.graded_once(cache, sub, session.Grading(suite_seed=7))
    assert calls == [("no_broadcast", 0), ("no_broadcast", 1), ("no_broadcast", 7),
                     ("no_broadcast", 7)]


@pytest.mark.parametrize("module", ["tests.grade_class", "tests.autograder"])
def test_each_option_that_takes_exercises_names_every_one(module, capsys):
    """`--exercises` lists every exercise by name, short form and flag, as exercises_of
    reads them: tensor parallelism was missing from grade_class's help."""
    import importlib

    from tests.harness.report.grading import EXERCISE_FORMS

    assert set(EXERCISE_FORMS) == set(EXERCISES)
    with pytest.raises(SystemExit):
        importlib.import_module(module).main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name, (short, flag) in EXERCISE_FORMS.items():
        assert f"{name} ({short}: {flag})" in text, (module, name)
        assert exercises_of(short) == exercises_of(name) == (name,)


def _failed_report(nodeid: str, exc: BaseException) -> pytest.TestReport:
    try:
        raise exc
    except BaseException:
        info = pytest.ExceptionInfo.from_current()
    return pytest.TestReport(nodeid, ("x.py", 0, "t"), {}, "failed", info.getrepr(), "call", [])


def test_the_suites_own_error_is_never_charged_as_a_failed_check(tmp_path, monkeypatch):
    """A checker's KeyError (or a fixture's error) is not graded, the suite's to fix: the
    score is marked incomplete, the student's output holds no traceback; an assert or a
    check's pytest.fail stays the submission's failure."""
    import types

    from tests.harness.report.plugin import SuiteReport

    monkeypatch.delenv(CONFIG_VAR, raising=False)
    report = SuiteReport(types.SimpleNamespace(workerinput={}))  # type: ignore[arg-type]
    broken = "tests/test_invariant_monotonic_loss.py::t[base]"
    failed = "tests/test_invariant_equal_rank_norms.py::t[base]"
    report.pytest_runtest_logreport(_failed_report(broken, KeyError("loss")))
    report.pytest_runtest_logreport(_failed_report(failed, pytest.fail.Exception(
        "parameter norms: rank 1 step 0", pytrace=False)))
    out = report.outcomes
    assert out[broken]["output"].startswith(f"{NOT_GRADED}the suite failed, not the submission")
    assert "KeyError: 'loss'" in out[broken]["output"] and "Traceback" not in out[broken]["output"]
    assert out[failed]["output"] == "parameter norms: rank 1 step 0"
    assert report.suite_errors == [f"{broken} (call): KeyError: 'loss'"]
    results = write_results(tmp_path / "r.json", {broken: "monotonic_loss",
                                                  failed: "equal_rank_norms"}, out, 1.0)
    [spoiled] = [t for t in results["tests"] if t["name"] == broken]
    assert "status" not in spoiled and results["output"].startswith("SCORE INCOMPLETE")


def test_no_output_holds_xdists_worker_header():
    from tests.harness.report.plugin import _failure_text

    report = _failed_report("a.py::t", RuntimeError("x"))
    report.longrepr = "[gw1] linux -- Python 3.11.7 /venv/bin/python\nthe real words"
    assert _failure_text(report) == "the real words"


def test_a_runs_words_cannot_make_a_failed_check_read_as_not_checked(tmp_path, monkeypatch):
    """Issue 72: a check is "not checked" by the suite's own mark (the consequence line's
    `not_checked`), never by its output's words, which hold a run's text: a violation whose
    found value reads "x: not checked: y" earns no not-checked credit."""
    from tests.harness.report.grading import NOT_CHECKED

    collected = {f"tests/test_invariant_{m}.py::t": m for m in INVARIANTS}
    forged = {n: {"status": "failed", "output": f"rank 0 step 3: expected 1, found 'x: "
                  f"{NOT_CHECKED}y'"} for n in collected}
    config = tmp_path / "grading.json"
    config.write_text(json.dumps({"not_checked_credit": 0.5}))
    monkeypatch.setenv(CONFIG_VAR, str(config))
    results = write_results(tmp_path / "r.json", collected, forged, 1.0)
    marked = write_results(tmp_path / "m.json", collected, _deadlocked_outcomes(collected), 1.0)
    assert results["score"] == 0.0 and "were not checked" not in results["output"]
    assert marked["score"] > 0.0  # the suite's own mark still earns the course's share

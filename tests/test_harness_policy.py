"""The grading policy: an invariant holds or it does not (the default), or each check earns
its share (`per_check`). Scores are a function of the tests' statuses, so the properties are
drawn over every way a grading's checks can come out."""

from __future__ import annotations

import csv
import json
import os
import tempfile
from decimal import Decimal
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tests.harness.report.class_report import feedback, rescored, write_csv, write_summary
from tests.harness.report.grading import (
    CONFIG_VAR,
    INVARIANTS,
    NOT_CHECKED,
    WEIGHTS,
    grading_policy,
    per_invariant,
    write_results,
)
from tests.harness.report.ledger import decimal_sum, points, units
from tests.harness.report.policy import INVARIANT, NOT_EARNED, PER_CHECK, apply_policy

ROOT = Path(__file__).resolve().parents[1]
# A check comes out passed, failed, not checked (its run did not finish) or skipped.
OUTCOMES = ("passed", "failed", "not_checked", "skipped")


def _outcome(kind: str) -> dict[str, Any]:
    outcomes: dict[str, dict[str, Any]] = {
        "passed": {"status": "passed", "output": ""},
        "failed": {"status": "failed", "output": "a check: 1 violation(s)"},
        "not_checked": {"status": "failed", "not_checked": True,
                        "output": f"a check: {NOT_CHECKED}the base run did not finish"},
        "skipped": {"status": "skipped", "output": "the observer is off"}}
    return outcomes[kind]


gradings = st.dictionaries(st.sampled_from(INVARIANTS),
                           st.lists(st.sampled_from(OUTCOMES), min_size=1, max_size=7),
                           min_size=1)


def _grade(tmp_path: Any, checks: dict[str, list[str]]) -> dict[str, Any]:
    collected, outcomes = {}, {}
    for module, kinds in checks.items():
        for i, kind in enumerate(kinds):
            nodeid = f"tests/test_invariant_{module}.py::test_c[{i}]"
            collected[nodeid], outcomes[nodeid] = module, _outcome(kind)
    return write_results(tmp_path / "results.json", collected, outcomes, 1.0)


def _graded_under(policy: str, credit: float, checks: dict[str, list[str]],
                  weights: dict[str, float] | None = None) -> dict[str, Any]:
    """write_results (the function that writes results.json) on a drawn grading, under
    `policy` and `credit` from a grading file, as an instructor's course sets them."""
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "grading.json"
        config.write_text(json.dumps({"policy": policy, "not_checked_credit": credit,
                                      **({"weights": weights} if weights else {})}))
        with mock.patch.dict(os.environ, {CONFIG_VAR: str(config)}):
            return _grade(Path(tmp), checks)


def _csv_row(results: dict[str, Any]) -> dict[str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        write_csv(Path(tmp) / "grades.csv", {"ada": results})
        with open(Path(tmp) / "grades.csv") as f:
            return next(csv.DictReader(f))


@given(gradings, st.sampled_from([0.0, 0.5, 1.0 / 3, 1.0]),
       st.dictionaries(st.sampled_from(INVARIANTS),
                       st.integers(1, 40) | st.sampled_from([1 / 3, 2.5, 7.125])))
# the case: five passing modules of 6 and 7 checks, whose rounded shares summed to
# 50.001 (seven tests of 20 points showed 2.8571 each: 19.9997)
@example({"monotonic_loss": ["passed"] * 6, "equal_rank_norms": ["passed"] * 6,
          "zero1_memory": ["passed"] * 6, "byte_exact_resume": ["passed"] * 6,
          "no_deadlock": ["passed"] * 7}, 0.0, {})
@example({"zero1_memory": ["passed"] * 6 + ["failed"]}, 0.0, {})  # the moments kept whole
@example({"communication": ["passed", "failed", "not_checked"]}, 1.0, {})
@example({m: ["passed"] * 7 for m in INVARIANTS}, 1.0 / 3, {"rollback": 1 / 3})
@example({"communication": ["not_checked", "passed", "skipped"],
          "rollback": ["skipped"]}, 1.0 / 3, {})
def test_a_property_is_never_worth_more_than_its_checks_together(checks, credit, weights):
    """The ledger, through the function that writes results.json: under either policy the
    tests' max_scores add up to their module's points, their scores to the module's score
    and to the total, the modules to the total and to the grading's whole, exactly, as the
    decimals a student adds up (Gradescope's rows, grades.csv's columns); a grading where
    everything passed is exactly its whole. Under `invariant` a module earns the least any
    of its checks earned; under `per_check` their mean: never less."""
    graded = {policy: _graded_under(policy, credit, checks, weights)
              for policy in (INVARIANT, PER_CHECK)}
    strict, partial = graded[INVARIANT], graded[PER_CHECK]
    # the grading's whole (100 with the default weights), to the ledger's unit
    whole = decimal_sum([points(units(sum(weights.get(m, WEIGHTS[m]) for m in checks)))])
    for results in (strict, partial):
        tests = [t for t in results["tests"] if t["max_score"]]
        assert decimal_sum(t["score"] for t in results["tests"]) == decimal_sum(
            [results["score"]])
        rows = per_invariant(results)
        assert decimal_sum(r["score"] for r in rows.values()) == decimal_sum(
            [results["score"]])
        recorded = results["extra_data"]["points"]
        for module, row in rows.items():
            mine = [t for t in tests if f"_{module}.py::" in t["name"]]
            assert decimal_sum(t["max_score"] for t in mine) == decimal_sum(
                [row["max_score"]]) == decimal_sum([recorded[module]])
            assert decimal_sum(t["score"] for t in mine) == decimal_sum([row["score"]])
        if tests:  # skipped modules' points are given back: still out of the whole
            assert decimal_sum(recorded.values()) == whole
        if tests and all(t["status"] == "passed" for t in tests):
            assert results["score"] == float(whole)
        row = _csv_row(results)
        assert sum(Decimal(row[m]) for m in rows) == Decimal(row["score"])
        assert f"# ada: {row['score']} / 100" in feedback("ada", results)
    assert strict["score"] <= partial["score"]
    for module, kinds in checks.items():
        live = [k for k in kinds if k != "skipped"]
        earned = per_invariant(strict).get(module, {}).get("score", 0.0)
        if "failed" in live:
            assert earned == 0, f"{module} earned {earned} with a failed check"
        elif live and len(set(live)) == 1:
            assert earned == per_invariant(partial)[module]["score"]
    # rescoring reads statuses only: back and forth gives the same file
    assert apply_policy(apply_policy(strict, PER_CHECK, credit), INVARIANT, credit) == strict
    assert apply_policy(strict, PER_CHECK, credit)["score"] == partial["score"]


def test_a_real_gradings_results_add_up(tmp_path, monkeypatch):
    """A grading with a module of 7 checks (20 / 7 points each) and one of 3 (10 / 3):
    the max_scores show the ledger's shares, not 2.8571 seven times."""
    monkeypatch.delenv(CONFIG_VAR, raising=False)
    checks = {m: ["passed"] for m in INVARIANTS}
    checks["zero1_memory"], checks["monotonic_loss"] = ["passed"] * 7, ["passed"] * 3
    results = _grade(tmp_path, checks)
    assert results["score"] == 100
    shares = sorted(t["max_score"] for t in results["tests"] if "zero1" in t["name"])
    assert shares == [2.8571] * 4 + [2.8572] * 3
    assert json.loads((tmp_path / "results.json").read_text())["score"] == 100


def test_by_default_one_failed_check_loses_the_whole_module(tmp_path, monkeypatch):
    """The issue's case: six checks a formula satisfies pass, the observed one finds the
    moments whole. Default: 0 of zero1_memory's points, and the passing checks say why."""
    monkeypatch.delenv(CONFIG_VAR, raising=False)
    checks = {m: ["passed"] for m in INVARIANTS}
    checks["zero1_memory"] = ["passed"] * 6 + ["failed"]
    results = _grade(tmp_path, checks)
    assert grading_policy() == INVARIANT
    assert results["score"] == 100 - WEIGHTS["zero1_memory"]
    assert results["extra_data"]["policy"] == INVARIANT
    assert f"grading policy '{INVARIANT}'" in results["output"]
    [passed_but_lost] = {t["output"] for t in results["tests"]
                         if "zero1_memory" in t["name"] and t["status"] == "passed"}
    assert passed_but_lost.startswith(f"{NOT_EARNED}zero1_memory fails through test_c[6]")
    row = per_invariant(results)["zero1_memory"]
    assert (row["lost"], row["checks"], row["score"]) == (["test_c[6]"], 7, 0)


def test_per_check_is_the_instructors_choice_in_the_grading_file(tmp_path, monkeypatch):
    config = tmp_path / "grading.json"
    config.write_text(json.dumps({"policy": PER_CHECK}))
    monkeypatch.setenv(CONFIG_VAR, str(config))
    checks = {m: ["passed"] for m in INVARIANTS}
    checks["zero1_memory"] = ["passed"] * 6 + ["failed"]
    results = _grade(tmp_path, checks)
    assert results["score"] == pytest.approx(100 - WEIGHTS["zero1_memory"] / 7, abs=1e-3)
    assert not any(NOT_EARNED in t["output"] for t in results["tests"])
    config.write_text(json.dumps({"policy": "partial"}))
    with pytest.raises(ValueError, match="policy 'partial'; use one of invariant, per_check"):
        grading_policy()


def test_the_class_reports_say_which_check_and_which_policy(tmp_path, monkeypatch):
    """The feedback page and grades.csv name the check an invariant was lost through;
    summary.md names the policy and the class under the other one."""
    monkeypatch.delenv(CONFIG_VAR, raising=False)
    checks = {m: ["passed"] for m in INVARIANTS}
    checks["communication"] = ["passed", "failed", "passed"]
    whole = _grade(tmp_path, checks)
    ok = _grade(tmp_path, {m: ["passed"] for m in INVARIANTS})
    page = feedback("ada", whole)
    assert "communication lost through test_c[1] (1 of 3 checks; the other 2 passed, but " \
           "an invariant's points are earned only when every check of it holds)" in page
    write_csv(tmp_path / "grades.csv", {"ada": whole, "bob": ok})
    with open(tmp_path / "grades.csv") as f:
        rows = {r["student"]: r for r in csv.DictReader(f)}
    assert rows["ada"]["lost_through"] == "communication: test_c[1]"
    assert rows["ada"]["communication"] == "0" and rows["bob"]["lost_through"] == ""
    write_summary(tmp_path, {"ada": whole, "bob": ok})
    summary = (tmp_path / "summary.md").read_text()
    partial = 100 - WEIGHTS["communication"] / 3
    assert f"Grading policy '{INVARIANT}'" in summary
    assert f"Under '{PER_CHECK}' the class would have median {(100 + partial) / 2:.4g}" \
        in summary
    lenient = rescored(whole, PER_CHECK)
    assert lenient["score"] == pytest.approx(partial, abs=1e-3)
    assert "communication failed checks: test_c[1] (1 of 3; grading policy 'per_check'" \
        in feedback("ada", lenient)


@pytest.mark.platforms  # a whole grading (seconds), shared with the platforms tier's writers
@pytest.mark.slow
def test_a_real_gradings_results_json_adds_up(graded_once):
    """A real grading session (the sample class's forgotten broadcast, two invariants lost,
    modules of several checks each): the results.json it wrote adds up exactly, row by row, as a
    student adds it up on Gradescope and an instructor in grades.csv, and PrairieLearn's
    points are the same figures."""
    from tests.harness.platforms.prairielearn import to_prairielearn

    results = graded_once(ROOT / "tests" / "submissions" / "no_broadcast", suite_seed=0)
    graded = [t for t in results["tests"] if t["max_score"]]
    assert {len([t for t in graded if f"_{m}.py::" in t["name"]]) for m in INVARIANTS} - {1}
    assert decimal_sum(t["max_score"] for t in graded) == 100
    assert decimal_sum(t["score"] for t in graded) == decimal_sum([results["score"]])
    rows = per_invariant(results)
    assert decimal_sum(r["max_score"] for r in rows.values()) == 100
    for module, row in rows.items():
        assert decimal_sum([row["max_score"]]) == decimal_sum(
            [results["extra_data"]["points"][module]]) == decimal_sum([WEIGHTS[module]])
    csv_row = _csv_row(results)
    assert sum(Decimal(csv_row[m]) for m in rows) == Decimal(csv_row["score"])
    assert Decimal(csv_row["score"]) == 100 - WEIGHTS["equal_rank_norms"] - WEIGHTS[
        "single_process_parity"]
    pl = to_prairielearn(results)
    assert decimal_sum(t["points"] for t in pl["tests"]) == decimal_sum([results["score"]])

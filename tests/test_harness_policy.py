"""The grading policy: an invariant holds or it does not (the default), or each check earns
its share (`per_check`). Scores are a function of the tests' statuses, so the properties are
drawn over every way a grading's checks can come out."""

from __future__ import annotations

import json
from typing import Any

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
from tests.harness.report.policy import INVARIANT, NOT_EARNED, PER_CHECK, apply_policy

# A check comes out passed, failed, not checked (its run did not finish) or skipped.
OUTCOMES = ("passed", "failed", "not_checked", "skipped")


def _outcome(kind: str) -> dict[str, str]:
    return {"passed": {"status": "passed", "output": ""},
            "failed": {"status": "failed", "output": "a check: 1 violation(s)"},
            "not_checked": {"status": "failed",
                            "output": f"a check: {NOT_CHECKED}the base run did not finish"},
            "skipped": {"status": "skipped", "output": "the observer is off"}}[kind]


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


@given(gradings, st.sampled_from([0.0, 0.5, 1.0]))
@example({"zero1_memory": ["passed"] * 6 + ["failed"]}, 0.0)  # the moments kept whole
@example({"communication": ["passed", "failed", "not_checked"]}, 1.0)
def test_a_property_is_never_worth_more_than_its_checks_together(checks, credit):
    """Under `invariant` a module earns the least any of its checks earned; under
    `per_check` their mean: never less, equal where the checks agree; the tests' scores
    add up to the total either way."""
    tests = []
    for module, kinds in checks.items():
        for i, kind in enumerate(kinds):
            out = _outcome(kind)
            tests.append({"name": f"tests/test_invariant_{module}.py::test_c[{i}]", "score": 0.0,
                          "max_score": 0.0 if kind == "skipped" else 10.0 / len(kinds),
                          **({} if kind == "skipped" else {"status": out["status"]}),
                          "output": out["output"]})
    results = {"score": 0.0, "tests": tests}
    strict, partial = apply_policy(results, INVARIANT, credit), apply_policy(results,
                                                                            PER_CHECK, credit)
    assert strict["score"] <= partial["score"] + 1e-9
    for row in (strict, partial):
        assert sum(t["score"] for t in row["tests"]) == pytest.approx(row["score"], abs=1e-3)
    for module, kinds in checks.items():
        live = [k for k in kinds if k != "skipped"]
        mine = [t for t in strict["tests"] if f"_{module}.py::" in t["name"]]
        earned = sum(t["score"] for t in mine)
        if "failed" in live:
            assert earned == 0, f"{module} earned {earned} with a failed check"
        elif live and len(set(live)) == 1:
            assert earned == pytest.approx(sum(t["score"] for t in partial["tests"]
                                               if f"_{module}.py::" in t["name"]), abs=1e-3)
    # rescoring reads statuses only: back and forth gives the same file
    assert apply_policy(apply_policy(strict, PER_CHECK, credit), INVARIANT, credit) == strict


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
    import csv

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

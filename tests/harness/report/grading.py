"""Scores for a Gradescope `results.json`: the weights live here and only here.

Each graded test module carries a weight, shown shared equally among its tests; under the
default grading policy a module's weight is earned only when all of its tests pass
(policy.py). Modules not listed (unit tests of the reference, self-tests of the suite, the
mutant catalogue) are not graded. Each module's tests also carry a Gradescope visibility. An
instructor overrides any of these without editing this file: a JSON file
`{"weights": {...}, "visibility": {...}, "policy": "per_check"}` named by $CAPSTONE_GRADING
(the Gradescope autograder ships one, tests/autograder.py writes it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tests.harness.diagnose.diagnosis import told_once
from tests.harness.report.escape import one_line as one_line  # read from here by the reports
from tests.harness.report.ledger import points, scaled, split, units
from tests.harness.report.policy import (
    DESCRIBE,
    INVARIANT,
    apply_policy,
    check_name,
    checked,
    is_not_checked,
    module_of,
)
from tests.harness.report.policy import (
    NOT_CHECKED as NOT_CHECKED,  # the checks' words, read from here by conftest.py
)

# Points follow what the capstone composes, so that a mistake that removes a lesson's point
# costs at least what a slip in the composition costs (a forgotten initial broadcast: 15):
# ZeRO-1's sharded state and the data-parallel work and traffic are the two lessons it is
# built on (20 each: the moments kept whole, or every rank on the whole batch, score 80);
# the checkpoint's byte-exact resume and the guard's rollback are the next two (15 each: a
# guard that never looked at the numbers scores 85); the run's numbers (monotonic loss and
# parity with one rank, 10 each; equal norms, 5) and its clean end (5) check the whole.
WEIGHTS: dict[str, float] = {
    "monotonic_loss": 10,
    "equal_rank_norms": 5,
    "zero1_memory": 20,
    "byte_exact_resume": 15,
    "no_deadlock": 5,
    "single_process_parity": 10,
    "rollback": 15,
    "communication": 20,
}
# The lesson's exercises (contract v1's optional flags): graded only where the grading
# selects them (`--exercises`, the grading file's "exercises", `-k exercise`), each module
# with its own weight on top of the invariants' 100.
EXERCISES: dict[str, float] = {
    "tensor_parallel": 10,  # exercise 1: --tensor-parallel T
    "accumulation": 10,  # exercise 2: --micro-batches M
}
INVARIANTS = tuple(WEIGHTS)  # what every grading grades
WEIGHTS.update(EXERCISES)
# Gradescope's: "visible", "hidden", "after_due_date", "after_published".
VISIBILITY: dict[str, str] = {name: "visible" for name in WEIGHTS}
VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")
CONFIG_VAR = "CAPSTONE_GRADING"
LIKELY = "likely: "  # starts each likely-cause line of a test's output (class_report reads it)
# No verdict either way (the grader's machine or set-up, or a run the suite could not see):
# no points and no charge; the reason says whose it is and what to do.
NOT_GRADED = "NOT GRADED (no verdict, no charge: the reason says what to do): "
WENT_WRONG = "What went wrong:\n"  # opens the text of a failed grading
# The order a student should read failures in: how the run ended and what the ranks did first
# (later failures are often their consequences), then the numbers.
ROOT_CAUSE_ORDER = ("no_deadlock", "communication", "equal_rank_norms", "single_process_parity",
                    "monotonic_loss", "zero1_memory", "byte_exact_resume", "rollback",
                    *EXERCISES)


def graded_name(nodeid: str) -> str | None:
    """The weight key of a test node id, or None for ungraded tests."""
    name = module_of(nodeid)
    return name if name in WEIGHTS else None


def grading_config() -> tuple[dict[str, float], dict[str, str]]:
    """Weights and visibility per module: the defaults above, with $CAPSTONE_GRADING's."""
    weights, visibility = dict(WEIGHTS), dict(VISIBILITY)
    path = os.environ.get(CONFIG_VAR)
    if path:
        data = json.loads(Path(path).read_text())
        for key, table in (("weights", weights), ("visibility", visibility)):
            unknown = set(data.get(key, {})) - set(WEIGHTS)
            if unknown:
                raise ValueError(f"{path}: {key} for unknown modules {sorted(unknown)}; "
                                 f"known: {sorted(WEIGHTS)}")
            table.update(data.get(key, {}))
        bad = {v for v in visibility.values() if v not in VISIBILITIES}
        if bad:
            raise ValueError(f"{path}: visibility {sorted(bad)}; use one of {VISIBILITIES}")
    return weights, visibility


# Each exercise's short form and the flag it is graded with.
EXERCISE_FORMS = {"tensor_parallel": ("tp", "--tensor-parallel 2"),
                  "accumulation": ("accum", "--micro-batches 4")}
SHORT_EXERCISES = {short: name for name, (short, _) in EXERCISE_FORMS.items()}
EXERCISE_NAMES = ", ".join(f"{name} ({short}: {flag})"  # as an option's help names them
                           for name, (short, flag) in EXERCISE_FORMS.items())


def exercises_of(names: Any) -> tuple[str, ...]:
    """The exercises a grading selects, checked: names from EXERCISES (short forms "tp" and
    "accum" too), from a list or a comma-separated string."""
    if isinstance(names, str):
        names = [n for n in names.split(",") if n.strip()]
    out = tuple(dict.fromkeys(SHORT_EXERCISES.get(n.strip(), n.strip()) for n in names or []))
    unknown = [n for n in out if n not in EXERCISES]
    if unknown:
        raise ValueError(f"unknown exercise(s) {unknown}: choose from {sorted(EXERCISES)}")
    return out


def selected_exercises(path: Path | None = None) -> tuple[str, ...]:
    """The exercises the grading file (`path`, else $CAPSTONE_GRADING) selects: its
    "exercises" list; none without one (the default grading is the invariants')."""
    path = path or (Path(os.environ[CONFIG_VAR]) if os.environ.get(CONFIG_VAR) else None)
    if path is None:
        return ()
    return exercises_of(json.loads(path.read_text()).get("exercises", []))


def not_checked_credit() -> float:
    """The course's grading policy for a check whose run did not finish (told "not checked:
    the base run did not finish ..."): the share of its points it earns, from
    $CAPSTONE_GRADING's `not_checked_credit` (default 0: a run that fails, on purpose or not,
    earns nothing for the checks it kept from running)."""
    path = os.environ.get(CONFIG_VAR)
    value = json.loads(Path(path).read_text()).get("not_checked_credit", 0.0) if path else 0.0
    if not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{path}: not_checked_credit {value!r}; give a share of the points "
                         "from 0 (none, the default) to 1 (all)")
    return float(value)


def grading_policy() -> str:
    """How a module's checks add up to its points (policy.py): $CAPSTONE_GRADING's `policy`,
    "invariant" (the default: all or nothing) or "per_check" (each check its share)."""
    path = os.environ.get(CONFIG_VAR)
    return checked(json.loads(Path(path).read_text()).get("policy") if path else None,
                   str(path))


def write_results(path: Path, collected: dict[str, str], outcomes: dict[str, dict[str, Any]],
                  elapsed_s: float, suite_seed: int = 0,
                  extra: dict[str, Any] | None = None, note: str = "") -> dict[str, Any]:
    """Write results.json; a graded test that never reported counts as failed (score 0).

    The scores follow the grading policy (`grading_policy()`, policy.py): by default a
    module's points are earned only when every one of its tests passes. A skipped test (the
    observed checks under --no-observe) is listed with no points, and the weights of what did
    run are scaled to keep the same total: turning a check off for a course does not cost its
    students points. A test the grading machine could not grade (its run was OOM-killed
    twice, or it reached for the reference nobody said it may use) keeps its points out of
    reach, is not marked failed, and the output says so first: the instructor mends the
    cause it names and regrades. A check whose run did not finish fails and
    earns `not_checked_credit()` of its points (the policy is stated in the output)."""
    weights, visibility = grading_config()
    credit, policy = not_checked_credit(), grading_policy()
    not_graded = {n for n in collected
                  if str(outcomes.get(n, {}).get("output", "")).startswith(NOT_GRADED)}
    skipped = {n for n in collected if outcomes.get(n, {}).get("status") == "skipped"
               and n not in not_graded}
    per_module: dict[str, int] = {}
    for nodeid, name in collected.items():
        if nodeid not in skipped:
            per_module[name] = per_module.get(name, 0) + 1
    # each live module's worth in whole units, the skipped modules' given back to them
    worth = scaled(sum(weights[m] for m in set(collected.values())) if per_module else 0.0,
                   {m: weights[m] for m in sorted(per_module)})
    caps = {m: split(u, [1.0] * per_module[m]) for m, u in worth.items()}  # its tests' shares
    tests = []
    for nodeid, name in sorted(collected.items()):
        res = outcomes.get(nodeid, {"status": "failed", "output": "did not run to completion"})
        if nodeid in skipped:
            tests.append({"name": nodeid, "score": 0.0, "max_score": 0.0,
                          "output": f"not graded: {res.get('output', '')}",
                          "visibility": visibility[name]})
            continue
        test = {"name": nodeid, "score": 0.0, "max_score": points(caps[name].pop(0))}
        if nodeid not in not_graded:  # no status: neither passed nor failed
            test["status"] = "passed" if res["status"] == "passed" else "failed"
        if res.get("not_checked"):  # the suite's own mark: its run did not get there
            test["extra_data"] = {"not_checked": True}
        tests.append({**test, "output": res.get("output", ""), "visibility": visibility[name]})
    unchecked = sum(t.get("status") == "failed" and is_not_checked(t) for t in tests)
    banner = ""
    if not_graded:
        first = str(outcomes[min(not_graded)]["output"]).removeprefix(NOT_GRADED)
        banner = (f"SCORE INCOMPLETE: {len(not_graded)} of {len(tests)} tests could not be "
                  "graded, through the grader's fault (its machine or its set-up), not the "
                  f"submission's; they {'and their invariants ' if policy == INVARIANT else ''}"
                  "count 0 here until the instructor mends what follows and regrades. "
                  f"{one_line(first, 400)}\n\n")
    if unchecked:
        note = (f"{unchecked} check(s) were not checked because a run they need did not "
                f"finish or left its records unwritten: each earns {credit:.0%} of its "
                "points (the course's grading policy, `not_checked_credit` in the grading "
                "config)." + (f"\n{note}" if note else ""))
    results = {"score": 0.0, "execution_time": round(elapsed_s, 3),
               "output": f"{banner}Graded with suite seed {suite_seed} (every run's data and "
                         f"initial parameters are drawn from it) under the grading policy "
                         f"'{policy}': {DESCRIBE[policy]}." + (f"\n{note}" if note else ""),
               "extra_data": {"suite_seed": suite_seed, "not_graded": sorted(not_graded),
                              # what each graded module is worth here (exact: ledger.py)
                              "points": {m: points(u) for m, u in worth.items()},
                              "not_checked_credit": credit,
                              # what each failed test's picture shows (grade_class draws it)
                              "pictures": {n: o["picture"] for n, o in outcomes.items()
                                           if "picture" in o and n in collected},
                              # the timelines each test read, kept beside this file
                              # (plugin.keep_timelines): grade_class copies these, never a
                              # path named in a test's output, which a run can write
                              "timelines": {n: list(o["kept_timelines"])
                                            for n, o in outcomes.items()
                                            if o.get("kept_timelines") and n in collected},
                              **(extra or {})},
               "tests": tests}
    results = apply_policy(results, policy, credit)
    causes = root_causes(results)
    if causes:  # Gradescope shows this text first: the cause once, before the invariants
        went = WENT_WRONG + "\n".join(
            f"{i}. {one_line(c, 400)}" for i, c in enumerate(causes, 1)) + "\n\n"
        out = str(results["output"])
        results["output"] = out[:len(banner)] + went + out[len(banner):]  # the banner first
    path.write_text(json.dumps(results, indent=2) + "\n")
    return results


def read_order(name: str) -> int:
    """A failed invariant's place in the order a student should read them."""
    return ROOT_CAUSE_ORDER.index(name) if name in ROOT_CAUSE_ORDER else len(ROOT_CAUSE_ORDER)


def per_invariant(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """invariant -> {"score", "max_score", "passed", "first", "likely", "not_graded",
    "checks", "lost"} from a results.json ("not_graded": why the grading machine could not
    grade it, else ""; "checks": how many it has; "lost": the ones that failed)."""
    out: dict[str, dict[str, Any]] = {}
    for t in results.get("tests", []):
        if not t.get("max_score"):
            continue  # not graded (skipped)
        name = graded_name(t["name"]) or t["name"]
        row = out.setdefault(name, {"score": 0.0, "max_score": 0.0, "passed": True,
                                    "first": "", "likely": [], "not_graded": "",
                                    "consequence": True, "checks": 0, "lost": []})
        row["checks"] += 1
        row["score"] = points(units(row["score"]) + units(t.get("score", 0.0)))  # exact sums
        row["max_score"] = points(units(row["max_score"]) + units(t["max_score"]))
        if str(t.get("output", "")).startswith(NOT_GRADED):
            row["not_graded"] = row["not_graded"] or str(t["output"]).removeprefix(NOT_GRADED)
        elif t.get("status") != "passed":
            lines = str(t.get("output", "")).splitlines()
            unchecked = is_not_checked(t)  # the cause is elsewhere
            if row["passed"] or (row["consequence"] and not unchecked):
                row["first"] = lines[0] if lines else ""  # a finding before a consequence
            row["consequence"] = row["consequence"] and unchecked
            row["passed"] = False
            row["lost"].append(check_name(t["name"]))
            for line in lines[1:]:
                if line.startswith(LIKELY):  # each cause once, across the module's tests
                    row["likely"] = told_once([*row["likely"], line.removeprefix(LIKELY)])
    return out


def root_causes(results: dict[str, Any]) -> list[str]:
    """What went wrong, each distinct cause once, in the order a student should read them:
    per failed invariant that was really checked, its most likely cause (or its first
    violation); the invariants that could not be checked add nothing."""
    inv = per_invariant(results)
    causes: list[str] = []
    for name in sorted(inv, key=read_order):
        row = inv[name]
        if row["passed"] or row["consequence"]:
            continue
        cause = row["likely"][0] if row["likely"] else f"{name}: {row['first']}"
        if cause not in causes:
            causes.append(cause)
    return causes

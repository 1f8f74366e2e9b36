"""How a graded module's checks add up to its points: the grading policy.

- "invariant" (the default): an invariant is a property of the run, so its points are earned
  only when every check of its module holds. A program that keeps Adam's moments whole loses
  all of `zero1_memory`, not the share of the one observed check that found it (the file
  checks a formula satisfies pass).
- "per_check": each check earns its own share of the module's points (partial credit).

A check whose run did not finish ("not checked") earns the course's `not_checked_credit`
share under either policy; under "invariant" a module earns the smallest share any of its
checks earned. A check the grading machine could not grade (no status) earns nothing until a
regrade. Scores are recomputed from each test's status alone, so a results.json graded under
one policy is rescored under the other without running anything again (`apply_policy`).
"""

from __future__ import annotations

import re
from typing import Any

from tests.harness.report.ledger import earned, earned_each, points, split, units

INVARIANT = "invariant"
PER_CHECK = "per_check"
POLICIES = (INVARIANT, PER_CHECK)
DEFAULT_POLICY = INVARIANT
DESCRIBE = {
    INVARIANT: "an invariant's points are earned only when every check of it holds",
    PER_CHECK: "each check earns its own share of its invariant's points",
}
# Opens the line a test's output gets when it passed but its invariant's points were lost
# through another check (stripped and written again at every rescoring).
NOT_EARNED = "passed, but not earned: "
NOT_CHECKED = "not checked: "  # a check whose run did not get there (conftest.holds)
_MODULE = re.compile(r"(?:^|/)test_(?:invariant|fault|exercise)_(?P<name>\w+)\.py::")


def module_of(nodeid: str) -> str | None:
    """The graded module a test node id belongs to ("zero1_memory"), or None."""
    m = _MODULE.search(nodeid)
    return m["name"] if m else None


def is_not_checked(test: dict[str, Any]) -> bool:
    """Whether a test of a grade file did not get there, its run having stopped before
    (conftest's consequence lines): the grade file's own mark (`extra_data.not_checked`),
    never its output's words, which hold a run's text (a violation's found value could read
    "x: not checked: y" and earn the course's not-checked credit)."""
    extra = test.get("extra_data")
    return isinstance(extra, dict) and extra.get("not_checked") is True


def checked(policy: Any, where: str = "the grading config") -> str:
    """`policy`, validated: one of POLICIES (None: the default)."""
    if policy is None:
        return DEFAULT_POLICY
    if policy not in POLICIES:
        raise ValueError(f"{where}: policy {policy!r}; use one of {', '.join(POLICIES)} "
                         f"({INVARIANT}: {DESCRIBE[INVARIANT]}; {PER_CHECK}: "
                         f"{DESCRIBE[PER_CHECK]})")
    return str(policy)


def check_name(nodeid: str) -> str:
    """A test's short name, as a student reads it: its function and parameters."""
    return nodeid.rsplit("::", 1)[-1]


def _share(test: dict[str, Any], credit: float) -> float:
    """What one check earns of its points: passed 1, not checked `credit`, otherwise 0
    (failed, or not graded by the machine: no status)."""
    if test.get("status") == "passed":
        return 1.0
    if test.get("status") == "failed" and is_not_checked(test):
        return credit
    return 0.0


def _strip_note(output: str) -> str:
    return "\n".join(ln for ln in output.split("\n") if not ln.startswith(NOT_EARNED))


def _module(test: dict[str, Any]) -> str:
    """The module a results.json test counts for (a session that wrote no grade file lists
    each module as one test, by its name)."""
    return module_of(test["name"]) or test["name"]


def lost_through(tests: list[dict[str, Any]]) -> dict[str, list[str]]:
    """module -> the checks that did not pass (failed, or not graded), in test order."""
    out: dict[str, list[str]] = {}
    for t in tests:
        name = _module(t)
        if t.get("max_score") and t.get("status") != "passed":
            out.setdefault(name, []).append(check_name(t["name"]))
    return out


def apply_policy(results: dict[str, Any], policy: str, credit: float = 0.0) -> dict[str, Any]:
    """`results` (a results.json model) with every test's score and the total recomputed
    under `policy`; its extra_data names the policy. Every figure comes from one ledger of
    whole units (ledger.py): a module is worth extra_data's `points` where the grading
    recorded them, else the sum of its tests' max_score; its tests' max_scores are its worth
    split exactly; under `invariant` the module earns its worth times the least share any
    of its checks earned, split over its tests the same way, under `per_check` each test its
    own share. The tests add up to their module and the modules to the total, exactly."""
    policy = checked(policy)
    tests = [dict(t) for t in results.get("tests", [])]
    live = [t for t in tests if t.get("max_score")]  # skipped checks carry no points
    modules: dict[str, list[dict[str, Any]]] = {}
    for t in live:
        modules.setdefault(_module(t), []).append(t)
    recorded = results.get("extra_data", {}).get("points") or {}
    lost = lost_through(live)
    total = 0
    for name, mine in modules.items():
        worth = (units(recorded[name]) if name in recorded
                 else sum(units(t["max_score"]) for t in mine))
        caps = split(worth, [t["max_score"] for t in mine])
        shares = [_share(t, credit) for t in mine]
        if policy == INVARIANT:
            got = split(earned(worth, min(shares)), caps)
        else:
            got = earned_each(caps, shares)
        for t, cap, score in zip(mine, caps, got, strict=True):
            t["max_score"], t["score"] = points(cap), points(score)
            output = _strip_note(str(t.get("output", "")))
            if policy == INVARIANT and t.get("status") == "passed" and min(shares) < 1.0:
                note = (f"{NOT_EARNED}{name} fails through {', '.join(lost.get(name, []))} "
                        f"(grading policy '{INVARIANT}': {DESCRIBE[INVARIANT]})")
                output = f"{note}\n{output}" if output else note
            t["output"] = output
        total += sum(got)
    out = dict(results, tests=tests, score=points(total))
    out["extra_data"] = {**results.get("extra_data", {}), "policy": policy}
    return out

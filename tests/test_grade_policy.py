"""The mutant catalogue graded as students' submissions, under both grading policies
(`-m grades`, minutes: one grading session per mutant).

A grade must mean what the lesson means: by default (policy `invariant`) no mistake that
removes the lesson's point (ZeRO-1's moments kept whole, every rank on the whole batch, a
guard that never looked at the numbers, one process doing the work) scores above a
forgotten initial broadcast, while the reference scores 100. Each mutant is graded once
(`graded_once`, shared by the xdist workers) and rescored under `per_check` from the same
statuses, so the two policies are compared on the same verdicts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.harness.platforms.session import Grading, graded_once
from tests.harness.report.grading import NOT_GRADED, per_invariant
from tests.harness.report.policy import INVARIANT, PER_CHECK, apply_policy
from tests.mutants.catalogue import MUTANTS

LAUNCHER = Path(__file__).resolve().parent / "mutants" / "launch.py"
pytestmark = [pytest.mark.fault, pytest.mark.grades, pytest.mark.slow]
# The catalogue's mistakes of the invariants (the exercises' are graded where selected).
GRADED = sorted(n for n, m in MUTANTS.items()
                if not {"accumulation", "tensor_parallel"} & set(m.targets))
# Mistakes that remove what the lesson teaches, and the most each may score by default.
LESSON_POINT = {
    "replicated_state": 80, "replicated_moments": 80, "whole_moments": 80,  # moments whole
    "whole_second_moment": 80, "whole_state_zero1_traffic": 80,
    "whole_batch": 90, "whole_batch_no_reduction": 90,  # no data parallelism
    "guard_reads_flag": 90, "no_guard": 90,  # a guard that never looked at the numbers
    "single_process": 80,  # one process did the work behind a fake process group
}
FORGOTTEN_BROADCAST = "no_broadcast"
# Mutants whose ranks the observer cannot see (one process does the work of all): the
# announced fault's check is not graded for them, having nothing to accuse on.
UNSEEN = {"single_process"}
# The invariant a target check is graded under (rank_killed is a test of the rollback module).
MODULE = {"rank_killed": "rollback"}


def _graded(shared_tmp: Path, name: str) -> dict[str, Any]:
    """`name` (a mutant, or "reference") graded once for the whole session, suite seed 0."""
    entry = (f"{sys.executable} -m capstone" if name == "reference"
             else f"{sys.executable} {LAUNCHER} {name}")
    folder = shared_tmp / "policy-submissions" / name
    folder.mkdir(parents=True, exist_ok=True)
    return graded_once(shared_tmp / "policy-grades", folder,
                       Grading(entry=entry, suite_seed=0,
                               sees_reference=True))


def _scores(results: dict[str, Any]) -> dict[str, float]:
    return {p: apply_policy(results, p)["score"] for p in (INVARIANT, PER_CHECK)}


def test_the_reference_scores_100_under_both_policies(shared_tmp):
    assert _scores(_graded(shared_tmp, "reference")) == {INVARIANT: 100, PER_CHECK: 100}


@pytest.mark.parametrize("name", sorted(LESSON_POINT))
def test_no_mistake_that_removes_the_lessons_point_scores_above_a_forgotten_broadcast(
        shared_tmp, record_property, name):
    mine = _graded(shared_tmp, name)
    broadcast = _scores(_graded(shared_tmp, FORGOTTEN_BROADCAST))[INVARIANT]
    scores = _scores(mine)
    record_property("reason", f"{name}: {json.dumps(scores)}; {FORGOTTEN_BROADCAST} "
                              f"{broadcast}")
    assert mine["extra_data"]["policy"] == INVARIANT  # what a grading writes by default
    assert scores[INVARIANT] == mine["score"]
    assert scores[INVARIANT] <= LESSON_POINT[name], (name, scores)
    assert scores[INVARIANT] <= broadcast, (
        f"{name} scores {scores[INVARIANT]}, above a forgotten broadcast ({broadcast})")


@pytest.mark.parametrize("name", GRADED)
def test_every_mistake_loses_its_target_module_whole(shared_tmp, record_property, name):
    """By default the target invariant earns nothing; per check it may keep a share, and a
    mutant never scores more strictly than leniently."""
    results = _graded(shared_tmp, name)
    scores = _scores(results)
    record_property("observed", json.dumps(  # the session's table of scores
        {f"{name} under {policy}": score for policy, score in scores.items()}))
    assert scores[INVARIANT] <= scores[PER_CHECK] < 100
    rows = per_invariant(apply_policy(results, INVARIANT))
    for target in MUTANTS[name].targets:
        row = rows[MODULE.get(target, target)]
        assert not row["passed"] and row["score"] == 0 and row["lost"], (target, row)
    # What the student reads: the mutant's hint, and never the suite's own error. Not graded
    # only where the suite saw none of what a check would accuse on (issue 61: one process
    # behind a fake process group has no rank whose numbers it saw), never as a charge.
    said = "\n".join(str(t.get("output", "")) for t in results["tests"])
    assert MUTANTS[name].hint in said, (name, MUTANTS[name].hint, said[:2000])
    spoiled = {t["name"]: str(t["output"]) for t in results["tests"]
               if str(t.get("output", "")).startswith(NOT_GRADED)}
    unseen = {n for n, out in spoiled.items()
              if out.startswith(f"{NOT_GRADED}the suite could not see whether")}
    assert set(spoiled) == unseen and (not unseen or name in UNSEEN), said[:2000]


def test_ranks_hidden_from_the_observer_gain_no_points_and_no_charge(shared_tmp):
    """Issue 61: a submission that trains correctly where the observer cannot see it
    (tests/hostile/unobserved.py: the ranks in an interpreter started with -I) is neither
    credited nor charged for what its ranks did: those tests are not graded, saying what the
    suite could not see, the score is not 100, and nothing accuses it."""
    folder = shared_tmp / "policy-submissions" / "unobserved"
    folder.mkdir(parents=True, exist_ok=True)
    hostile = Path(__file__).resolve().parent / "hostile" / "unobserved.py"
    results = graded_once(shared_tmp / "policy-grades", folder,
                          Grading(entry=f"{sys.executable} {hostile}", suite_seed=0,
                                  sees_reference=True))
    unseen = [t for t in results["tests"] if str(t.get("output", "")).startswith(
        f"{NOT_GRADED}the suite could not see the ranks")]
    assert unseen and results["score"] < 100, results["output"][:2000]
    said = "\n".join(str(t.get("output", "")) for t in results["tests"])
    for accusation in ("never started", "one process did", "read the --inject flag"):
        assert accusation not in said, (accusation, said[:3000])
    assert results["output"].startswith("SCORE INCOMPLETE"), results["output"][:500]

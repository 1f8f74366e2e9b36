"""The hold-out mistakes (tests/holdout/): each graded as a submission is caught, and the first
cause its feedback tells is its own (right) or a class of causes true of it (generic), never
another mistake's name (wrong) (`-m grades`; bench/holdout.py writes the table)."""

from __future__ import annotations

import sys

import pytest

from tests.harness.platforms.session import Grading, grade
from tests.harness.report.grading import root_causes
from tests.holdout.catalogue import FAULT_SEED, GENERIC, HOLDOUTS, RIGHT, SUITE_SEED, Holdout

pytestmark = [pytest.mark.grades, pytest.mark.slow, pytest.mark.long]


@pytest.mark.parametrize("mistake", [
    pytest.param(h, marks=pytest.mark.xfail(strict=True, reason=f"not caught yet: {h.gap}"))
    if h.gap else h for h in HOLDOUTS], ids=lambda h: h.name)
def test_a_holdout_mistake_is_caught_and_told_first_as_itself(tmp_path, reference_only,
                                                              mistake: Holdout):
    # The session's folder; the program is graded in place, where it starts warm
    # (tests/harness/run/warm.py): its verdict is a cold start's (test_harness_warm), and
    # bench/holdout.py grades copies, cold
    sub = tmp_path / "sub"
    sub.mkdir()
    results = grade(sub, tmp_path / "results.json",  # programs that import the reference
                    Grading(entry=f"{sys.executable} {mistake.program}", sees_reference=True,
                                suite_seed=SUITE_SEED, fault_seed=FAULT_SEED).resolved())
    causes = root_causes(results) or [""]
    verdict = mistake.verdict(results["score"], causes[0])
    assert verdict in ((RIGHT,) if mistake.signature else (RIGHT, GENERIC)), \
        (mistake.name, verdict, causes)
    for name in mistake.wrong:  # what a student reads first names no other mistake
        assert not any(name in c for c in causes), (mistake.name, name, causes)

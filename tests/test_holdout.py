"""The hold-out mistakes (tests/holdout/): each graded as a submission is caught, and the first
cause its feedback tells is its own (right), never another mistake's name (wrong). A hint
that names a mistake only on its signature keeps wrong at 0 here (`-m grades`)."""

from __future__ import annotations

import shutil
import sys

import pytest

from tests.harness.platforms.session import Grading, grade
from tests.harness.report.grading import root_causes
from tests.holdout.catalogue import HOLDOUTS, Holdout

pytestmark = [pytest.mark.grades, pytest.mark.slow, pytest.mark.long]


@pytest.mark.parametrize("mistake", HOLDOUTS, ids=lambda h: h.name)
def test_a_holdout_mistake_is_caught_and_told_first_as_itself(tmp_path, reference_only,
                                                              mistake: Holdout):
    sub = tmp_path / "sub"
    sub.mkdir()
    shutil.copy(mistake.program, sub / "main.py")
    results = grade(sub, tmp_path / "results.json",  # programs that import the reference
                    Grading(entry=f"{sys.executable} main.py", sees_reference=True).resolved())
    causes = root_causes(results)
    assert results["score"] < 100 and causes, results["output"][:2000]
    assert mistake.right in causes[0], (mistake.name, causes)
    said = "\n".join(str(t.get("output", "")) for t in results["tests"])
    for name in mistake.wrong:
        assert name not in said, (mistake.name, name, causes)

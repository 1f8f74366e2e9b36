"""Invariant 5: the run terminates by itself: exit 0 within the bound, every rank logged
the last step, and no process of it is left running. A run that is stopped (deadlocked, or at
the bound) is reported with where each rank was blocked and each rank's stack."""

import pytest

from tests.harness.check.checks import check_clean_exit
from tests.harness.run.runs import BASE, RESUMED, SINGLE


@pytest.mark.reads(lambda spec: [spec])
@pytest.mark.parametrize("spec", [BASE, SINGLE, RESUMED], ids=lambda s: s.name)
def test_run_ends_cleanly_within_the_bound(run, holds, spec):
    r = run(spec)
    stacks = r.outcome.stacks and f"each rank's stack when the run was stopped:\n{r.outcome.stacks}"
    source = r.outcome.crash_source and f"where it raised:\n{r.outcome.crash_source}"
    holds(check_clean_exit(r), f"termination of the {spec.name} run", stacks or source)

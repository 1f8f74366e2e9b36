"""Fault injection: a one-shot NaN gradient or loss spike after the first checkpoint is
noticed before a bad update is kept, rolled back to the latest checkpoint, logged, and the
run ends bit-identical to the clean run (same losses, norms and step-20 shard bytes).

Each kind is injected once, at a step between 12 and 19 that the session's seed draws
(nan@12 and spike@15 under seed 0): a program that handles only the steps it was shown
fails the next session."""

import pytest

from tests.harness.checks import check_rollback
from tests.harness.plugin import suite_seed
from tests.harness.runs import BASE, FAULT_KINDS, fault_step, faulted

pytestmark = pytest.mark.fault


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_fault_is_rolled_back_and_run_ends_like_the_clean_run(run, holds, kind):
    step = fault_step(kind, suite_seed())
    holds(check_rollback(run(BASE), run(faulted(kind, step)), kind, step),
          f"rollback of {kind}@{step}")

"""Fault injection: a one-shot NaN gradient or loss spike after the first checkpoint is
noticed before a bad update is kept, rolled back to the latest checkpoint, logged, and the
run ends bit-identical to the clean run (same losses, norms and step-20 shard bytes)."""

import pytest

from tests.harness.checks import check_rollback
from tests.harness.runs import BASE, faulted

pytestmark = pytest.mark.fault


@pytest.mark.parametrize("step", [12, 15, 19])
@pytest.mark.parametrize("kind", ["nan", "spike"])
def test_fault_is_rolled_back_and_run_ends_like_the_clean_run(run, holds, kind, step):
    holds(check_rollback(run(BASE), run(faulted(kind, step)), kind, step),
          f"rollback of {kind}@{step}")

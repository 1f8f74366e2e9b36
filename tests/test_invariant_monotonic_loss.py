"""Invariant 1: the full-batch loss falls at every one of the 20 steps (within float noise),
and every rank logs the same global loss."""

import pytest

from tests.harness.check.checks import check_monotonic_loss
from tests.harness.run.runs import BASE, SINGLE


@pytest.mark.reads(lambda spec: [spec])
@pytest.mark.parametrize("spec", [BASE, SINGLE], ids=lambda s: s.name)
def test_loss_falls_at_every_step(run, holds, spec):
    holds(check_monotonic_loss(run(spec)), f"loss of the {spec.name} run")

"""Invariant 2: at steps 0..20 every rank holds parameters of exactly the same norm
(the initial broadcast and every all-gather left all replicas identical)."""

import pytest

from tests.harness.check.checks import check_equal_norms
from tests.harness.run.runs import BASE, N3


@pytest.mark.reads(lambda spec: [spec])
@pytest.mark.parametrize("spec", [BASE, N3], ids=lambda s: s.name)
def test_every_rank_holds_the_same_parameters(run, holds, spec):
    holds(check_equal_norms(run(spec)), f"parameter norms of the {spec.name} run")

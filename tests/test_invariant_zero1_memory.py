"""Invariant 3: ZeRO-1 memory. Each rank's optimizer state is 12*ceil(P/N) bytes at every
step, the checkpoint shards hold exactly that state and the parameters logged for their step,
and memory per rank shrinks as 1/N (N = 1, 2, 4, and the uneven N = 3)."""

import pytest

from tests.harness.checks import check_memory_scaling, check_zero_memory
from tests.harness.runs import BASE, N2, N3, SINGLE


@pytest.mark.parametrize("spec", [BASE, SINGLE, N2, N3], ids=lambda s: s.name)
def test_optimizer_state_is_12P_over_N(run, holds, spec):
    holds(check_zero_memory(run(spec)), f"ZeRO-1 memory of the {spec.name} run")


def test_memory_per_rank_times_N_is_constant(run, holds):
    runs = {s.world_size: run(s) for s in (SINGLE, N2, N3, BASE)}
    holds(check_memory_scaling(runs), "optimizer bytes x N over N = 1, 2, 3, 4")

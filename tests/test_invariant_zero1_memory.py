"""Invariant 3: ZeRO-1 memory. Each rank's optimizer state is 12*ceil(P/N) bytes at every
step, the checkpoint shards hold exactly that state and the parameters logged for their step,
memory per rank shrinks as 1/N (N = 1, 2, 4, and the uneven N = 3), and so does what each rank
really keeps: the tensor storages alive at two points of the run, as the observer counted them
(at least 12P bytes of it sharded over N = 1, 2, 4), and where Adam's moments live: the
storages that hold the values each rank checkpoints, which must shrink as 1/N."""

import json

import pytest

from tests.harness.check.checks import check_memory_scaling, check_zero_memory
from tests.harness.check.observed_checks import check_measured_memory, persistent_bytes
from tests.harness.check.state_checks import check_state_location, located
from tests.harness.run.runs import BASE, MEM1, N2, N3, SINGLE


@pytest.mark.reads(lambda spec: [spec])
@pytest.mark.parametrize("spec", [BASE, SINGLE, N2, N3], ids=lambda s: s.name)
def test_optimizer_state_is_12P_over_N(run, holds, spec):
    holds(check_zero_memory(run(spec)), f"ZeRO-1 memory of the {spec.name} run")


# The cross-N tests read BASE first: where it did not finish, the other runs are its
# consequence, told without starting them (`run`).
@pytest.mark.long  # several runs, one after another: started first
@pytest.mark.reads(BASE, SINGLE, N2, N3)
def test_memory_per_rank_times_N_is_constant(run, holds):
    runs = {s.world_size: run(s) for s in (BASE, SINGLE, N2, N3)}
    holds(check_memory_scaling(runs), "optimizer bytes x N over N = 1, 2, 3, 4")


@pytest.mark.long  # several runs, one after another: started first
@pytest.mark.reads(BASE, MEM1, N2)
def test_measured_persistent_state_shrinks_by_12P(run, holds, record_property):
    runs = {s.world_size: run(s) for s in (BASE, MEM1, N2)}
    if any(r.observed is None for r in runs.values()):
        pytest.skip("the observer is off (--no-observe)")
    record_property("observed", json.dumps({"persistent_bytes_per_rank": {
        n: persistent_bytes(r) for n, r in sorted(runs.items())}, "logged_optimizer_bytes": {
        n: (r.parsed.records.get(0, {}).get(r.steps) or {}).get("optimizer_bytes")
        for n, r in sorted(runs.items())}}))
    holds(check_measured_memory(runs), "persistent bytes per rank over N = 1, 2, 4")


@pytest.mark.long  # several runs, one after another: started first
@pytest.mark.reads(BASE, MEM1, N2, N3)
def test_adam_moments_live_in_shards(run, holds, record_property):
    runs = {s.world_size: run(s) for s in (BASE, MEM1, N2, N3)}
    if any(r.observed is None for r in runs.values()):
        pytest.skip("the observer is off (--no-observe)")
    record_property("observed", json.dumps({"state_storage_elements_per_rank": {
        n: located(r) for n, r in sorted(runs.items())}}))
    holds(check_state_location(runs), "where exp_avg and exp_avg_sq live over N = 1, 2, 3, 4")

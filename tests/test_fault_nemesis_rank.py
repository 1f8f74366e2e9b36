"""The suite's own NaN never falls on rank 0 (issue 73, point 5): the flag's NaN is rank 0's
(`--inject nan@S`, the contract), so a fault seed that put the suite's there too would let a
guard that judges rank 0's own gradient alone pass every fault of the grading. Each seed
draws a rank in 1..N-1, and that guard (the `rank0_guard` mutant) is caught under every fault
seed, the ones the old draw put on rank 0 (9 and 20) among them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tests.harness.check.checks import check_rollback
from tests.harness.check.fault_checks import check_nemesis
from tests.harness.check.matrix import rollback_probe
from tests.harness.diagnose.diagnosis import diagnose
from tests.harness.observe.violations import summarize
from tests.harness.run.runs import BASE, RunCache, faulted, nemesis_nan, nemesis_of
from tests.mutants.catalogue import MUTANTS

LAUNCHER = Path(__file__).resolve().parent / "mutants" / "launch.py"
# Fault seeds whose NaN the old draw (randrange(world_size)) put on rank 0, and seed 0's.
ON_RANK_0_BEFORE = (9, 20)
FAULT_SEEDS = (0, *ON_RANK_0_BEFORE)


def _fault(seed: int, world_size: int = BASE.world_size) -> tuple[str, int, int]:
    """(kind, step, rank) of the suite's own NaN under the fault seed `seed`."""
    fault = nemesis_of(nemesis_nan(seed, world_size))
    assert fault is not None
    return fault


@given(seed=st.integers(0, 2**32 - 1), world_size=st.integers(2, 8))
@example(seed=9, world_size=4)  # the old draw: step 12 on rank 0
@example(seed=20, world_size=4)  # the old draw: step 19 on rank 0
@example(seed=0, world_size=2)  # seed 0's fixed rank 2: no such rank in a world of 2
def test_the_suite_s_own_nan_is_never_on_rank_0(seed: int, world_size: int) -> None:
    """Under every fault seed the nemesis NaN of the 4-rank run is on a rank other than 0,
    and in a world of N on one of 1..N-1, at a step (12..19) that N does not move."""
    _, step, rank = _fault(seed)
    assert rank != 0, seed
    kind, step_n, rank_n = _fault(seed, world_size)
    assert kind == "nan" and 1 <= rank_n <= world_size - 1, (seed, world_size, rank_n)
    assert step_n == step and 12 <= step <= 19, (seed, step, step_n)


def test_the_draw_keeps_seed_0_s_fault_and_every_seed_s_step() -> None:
    """Seed 0's is step 13 on rank 2; the seeds whose NaN the old draw put on rank 0 keep
    their steps (12 and 19): only the rank was drawn anew."""
    assert _fault(0) == ("nan", 13, 2)
    assert [_fault(s)[1] for s in ON_RANK_0_BEFORE] == [12, 19]


@pytest.mark.fault
@pytest.mark.seeds  # the catalogue's runs, beside its other seeds (test_matrix_seeds.py)
@pytest.mark.long  # a clean run and four faulted ones
def test_a_guard_that_judges_rank_0_alone_is_caught_under_every_fault_seed(
        reference_only: None, run_cache: RunCache) -> None:
    """rank0_guard rolls back the flag's NaN in time (it is rank 0's); the suite's own NaN,
    on another rank under each fault seed, is reduced into the update it keeps, and the
    guard fires a step late: caught, with its hint, under 0, 9 and 20."""
    mutant = MUTANTS["rank0_guard"]
    impl = (sys.executable, str(LAUNCHER), mutant.name)
    base = run_cache.get(impl, BASE)
    probe = rollback_probe(run_cache.seed)
    flagged = check_rollback(base, run_cache.get(impl, faulted(*probe)), *probe)
    assert flagged == [], summarize(flagged)  # the flag's NaN, rank 0's, never catches it
    for seed in FAULT_SEEDS:
        _, step, rank = _fault(seed)
        nemesis = run_cache.get(impl, nemesis_nan(seed))
        found = check_nemesis(nemesis, step, rank) + check_rollback(base, nemesis, "nan", step)
        assert found, f"fault seed {seed}: {mutant.name} passed the NaN on rank {rank}"
        hints = diagnose("rollback", found)
        assert any(mutant.hint in h for h in hints), (seed, hints)

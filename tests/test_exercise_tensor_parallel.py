"""Exercise 1 of the lesson: tensor parallelism of the attention heads (contract v1's optional
`--tensor-parallel T`). A graded module when the grading selects the exercise
(`--exercises tensor_parallel`, or `-k exercise`).

T = 2 on 2 ranks (16 rows) and T = 2 beside data parallelism of 2 on 4 ranks (8 rows per
group), each against the same program's one-rank run on the same 16 rows, on what the ranks
do: the loss at every step, the heads each rank holds (slices of the one-rank weights, found
by value), the all-reduces of the attention output and of the input's gradient over the
group, and the rows each rank computes on; and a T = 2 run checkpoints (a shard per rank),
resumes bit-identically and rolls back a NaN as a plain run does. A program that rejects
the flag (exit 2) is told "exercise not implemented", once per test, and nothing else."""

from __future__ import annotations

import pytest

from tests.harness.check.checks import check_resume, check_rollback
from tests.harness.check.composed_checks import (
    check_composed_counts,
    check_composed_norms,
    check_composed_state,
    told_by_the_groups,
)
from tests.harness.check.tp_checks import (
    check_heads,
    check_tp_loss,
    check_tp_rows,
    check_tp_traffic,
)
from tests.harness.report.plugin import suite_seed
from tests.harness.run.runs import (
    SINGLE,
    TP,
    TP2,
    TP2DP2,
    TP2DP2_RESUMED,
    RunSpec,
    fault_step,
    tp_faulted,
)

FLAG = f"--tensor-parallel {TP}"
SPECS = pytest.mark.parametrize("spec", [TP2, TP2DP2], ids=lambda s: s.name)


@pytest.fixture
def tp(exercise_run):
    """`tp(spec)`: the tensor-parallel run (a program that rejects the flag fails here)."""
    return lambda spec: exercise_run(spec, FLAG)


@pytest.fixture
def observed_tp(tp):
    def get(spec):
        r = tp(spec)
        if r.observed is None:
            pytest.skip("the observer is off (--no-observe)")
        return r
    return get


@pytest.mark.reads(lambda spec: [spec, SINGLE])
@SPECS
def test_the_loss_is_the_one_rank_loss(tp, run, holds, spec):
    holds(check_tp_loss(tp(spec), run(SINGLE), TP, spec.batch_size),
          f"{spec.name} vs one rank, every step")


@pytest.mark.reads(lambda spec: [spec, SINGLE])
@SPECS
def test_each_rank_holds_its_share_of_the_heads(observed_tp, run, holds, spec):
    holds(check_heads(observed_tp(spec), run(SINGLE), TP), f"the heads of the {spec.name} run")


@pytest.mark.reads(lambda spec: [spec])
@SPECS
def test_the_attention_output_and_its_gradient_are_all_reduced(observed_tp, holds, spec):
    holds(check_tp_traffic(observed_tp(spec), TP, spec.batch_size),
          f"all-reduces over the tensor-parallel groups of the {spec.name} run")


@pytest.mark.reads(lambda spec: [spec])
@SPECS
def test_a_group_computes_on_the_same_rows(observed_tp, holds, spec):
    holds(check_tp_rows(observed_tp(spec), TP), f"rows per group in the {spec.name} run")


@pytest.mark.long  # two runs in a row: started first
@pytest.mark.reads(TP2DP2, TP2DP2_RESUMED)
def test_a_tensor_parallel_run_resumes_bit_identically(tp, holds):
    what = f"{TP2DP2.name} resumed from its step-10 checkpoint"
    holds(told_by_the_groups(tp(TP2DP2), TP, check_resume(tp(TP2DP2), tp(TP2DP2_RESUMED), 10),
                             what), what)


def _faulted() -> RunSpec:
    return tp_faulted("nan", fault_step("nan", suite_seed()))


@pytest.mark.long
@pytest.mark.reads(TP2DP2, lambda: [_faulted()])
def test_a_tensor_parallel_run_rolls_back_a_nan(tp, holds):
    step = fault_step("nan", suite_seed())
    faulted = tp(_faulted())  # first: it needs no other run, the resume does
    what = f"rollback of nan@{step} in the {TP2DP2.name} run"
    holds(told_by_the_groups(tp(TP2DP2), TP, check_rollback(tp(TP2DP2), faulted, "nan", step),
                             what), what)


@pytest.mark.reads(lambda spec: [spec, SINGLE])
@SPECS
def test_the_composed_run_reports_the_contracts_counts(tp, run, holds, spec):
    """n_params the model's P; optimizer_bytes 12·ceil(P_local / (N/T)) on every rank."""
    holds(check_composed_counts(tp(spec), run(SINGLE), TP),
          f"n_params and optimizer_bytes of the {spec.name} run")


@pytest.mark.reads(lambda spec: [spec])
@SPECS
def test_the_composed_run_falls_and_each_data_parallel_group_agrees(tp, holds, spec):
    """(a) the loss falls; (b) the ranks of a data-parallel group hold the same parameters."""
    holds(check_composed_norms(tp(spec), TP), f"loss and norms per group of the {spec.name} run")


@pytest.mark.reads(TP2, TP2DP2)
def test_the_composed_runs_moments_shrink_with_the_data_parallel_size(observed_tp, holds):
    """(c) where the state lives: the moments' storages of the tp2dp2 run are half the tp2
    run's (ZeRO-1 over each data-parallel group of 2)."""
    holds(check_composed_state(observed_tp(TP2), observed_tp(TP2DP2), TP),
          "the moments of the tp2dp2 run against the tp2 run's")


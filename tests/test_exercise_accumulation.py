"""Exercise 2 of the lesson: gradient accumulation over M = 4 micro-batches (contract v1's
optional `--micro-batches M`). A graded module when the grading selects the exercise
(`--exercises accumulation`, or `-k exercise`).

The run with `--micro-batches 4` (2 ranks, 4 rows each, 6 steps) is compared with the same
program's run without the flag (the invariants' 2-rank run): each backward pass computes on
B/M rows, the gradient is reduced once per step, the gradient step 1 reduces is the
one-batch gradient element by element, and the losses follow the one-batch run's at every
step. A program that rejects the flag (exit 2) is told
"exercise not implemented", once per test, and nothing else."""

from __future__ import annotations

import pytest

from tests.harness.check.exercise_checks import (
    check_accumulated_gradient,
    check_follows_one_batch,
    check_micro_batches,
    check_one_reduction,
)
from tests.harness.run.runs import MICRO, MICRO_BATCHES, ONE_BATCH

M = MICRO_BATCHES
FLAG = f"--micro-batches {M}"
pytestmark = pytest.mark.reads(MICRO, ONE_BATCH)


@pytest.fixture
def micro(exercise_run):
    """The --micro-batches run (a program that rejects the flag fails here)."""
    return exercise_run(MICRO, FLAG)


@pytest.fixture
def observed_micro(micro, run):
    if micro.observed is None or run(ONE_BATCH).observed is None:
        pytest.skip("the observer is off (--no-observe)")
    return micro


def test_each_backward_computes_on_b_over_m_rows(observed_micro, holds):
    holds(check_micro_batches(observed_micro, MICRO.batch_size, M),
          f"rows per backward pass with {FLAG}")


def test_the_gradient_is_reduced_once_per_step(observed_micro, run, holds):
    holds(check_one_reduction(run(ONE_BATCH), observed_micro, M),
          f"reductions per step with {FLAG} against one batch")


def test_the_accumulated_gradient_is_the_one_batch_gradient(observed_micro, run, holds):
    holds(check_accumulated_gradient(run(ONE_BATCH), observed_micro, M),
          f"step 1's gradient with {FLAG} against one batch")


def test_the_losses_follow_the_one_batch_run(micro, run, holds):
    holds(check_follows_one_batch(run(ONE_BATCH), micro, M), f"{FLAG} vs one batch, every step")

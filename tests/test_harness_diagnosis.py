"""Feedback from violation patterns alone (the mutant test asserts one hint per mutant; these
are the patterns no mutant of the catalogue produces, and the ordering of several causes)."""

from __future__ import annotations

from tests.harness.diagnosis import (
    BROADCAST,
    LOCAL_GUARD,
    NO_ROLLBACK,
    ROWS,
    SUMMED,
    UPDATE,
    diagnose,
)
from tests.harness.violations import Violation


def parity(step: int, key: str, expected: float, found: float) -> Violation:
    return Violation("single_process_parity", 0, step, f"{key} {expected!r} (1 rank) within "
                     "1e-05 rel", found, "4-rank run diverges from 1 rank")


def test_a_loss_that_differs_at_step_1_lists_data_before_broadcast():
    assert diagnose("single_process_parity", [parity(1, "loss", 4.3, 4.1)]) == [ROWS, BROADCAST]


def test_a_loss_that_matches_at_step_1_and_drifts_after_is_the_update():
    assert diagnose("single_process_parity", [parity(2, "loss", 4.0, 4.1)]) == [UPDATE]


def test_a_gradient_norm_N_times_the_single_rank_one_is_a_sum():
    for n in (2, 3, 4, 8):
        found = diagnose("single_process_parity", [parity(1, "grad_norm", 0.5, 0.5 * n)], n)
        assert found[0] == SUMMED


def rollback(rank: int) -> Violation:
    return Violation("rollback", rank, 12, "a rollback event with reason 'nan'", "none")


def test_ranks_that_roll_back_differently_decided_on_local_values():
    assert diagnose("rollback", [rollback(1), rollback(2), rollback(3)], 4) == [LOCAL_GUARD]
    assert diagnose("rollback", [rollback(r) for r in range(4)], 4) == [NO_ROLLBACK]
    assert diagnose("rollback", [], 4) == []

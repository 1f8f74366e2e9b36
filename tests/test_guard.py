"""The divergence guard's decisions and its rollback budget, and the fault grammar."""

from __future__ import annotations

import math

import pytest

from capstone.config import Fault, parse_fault
from capstone.guard import DivergenceError, DivergenceGuard


@pytest.fixture
def guard() -> DivergenceGuard:
    return DivergenceGuard(spike_factor=2.0, max_rollbacks=3)


@pytest.mark.parametrize("loss, grad_norm, expected", [
    (1.0, 0.5, None),
    (math.nan, 0.5, "nan"),
    (math.inf, 0.5, "nan"),
    (1.0, math.nan, "nan"),
    (1.0, math.inf, "nan"),
    (2.0, 0.5, None),  # exactly 2x the previous loss is not yet a spike
    (2.0001, 0.5, "spike"),
])
def test_verdict(guard, loss, grad_norm, expected):
    guard.accept(4, 1.0)
    assert guard.verdict(5, loss, grad_norm) == expected


def test_no_spike_check_without_a_previous_loss(guard):
    assert guard.verdict(11, 1e6, 0.1) is None  # first step after a resume


def test_three_rollbacks_in_a_row_then_give_up(guard):
    for _ in range(3):
        guard.rolled_back(16, 10, "spike")
    with pytest.raises(DivergenceError, match="after 3 rollbacks in a row"):
        guard.rolled_back(16, 10, "spike")


def _three_rollbacks_then_replay(guard: DivergenceGuard, up_to: int) -> None:
    """Roll back three times from step 16 to 10, then replay healthy steps 11..up_to."""
    for _ in range(3):
        guard.rolled_back(16, 10, "spike")
    for step in range(11, up_to + 1):
        guard.accept(step, 1.0)


def test_replaying_up_to_the_failed_step_keeps_the_streak(guard):
    _three_rollbacks_then_replay(guard, up_to=15)
    with pytest.raises(DivergenceError):
        guard.rolled_back(16, 10, "spike")


def test_getting_past_the_failed_step_resets_the_streak(guard):
    _three_rollbacks_then_replay(guard, up_to=16)
    for _ in range(3):
        guard.rolled_back(18, 10, "nan")  # a new streak: no error


def test_nothing_to_roll_back_to(guard):
    with pytest.raises(DivergenceError, match="no checkpoint to roll back to"):
        guard.rolled_back(5, None, "nan")


def test_rollback_forgets_the_replayed_losses(guard):
    for step in range(1, 16):
        guard.accept(step, 10.0 - step * 0.1)
    guard.rolled_back(16, 10, "spike")
    assert max(guard.losses) == 10


@pytest.mark.parametrize("text, fault", [("nan@12", Fault("nan", 12)),
                                         ("spike@1", Fault("spike", 1)),
                                         (" killsave@10 ", Fault("killsave", 10))])
def test_fault_grammar(text, fault):
    assert parse_fault(text) == fault


@pytest.mark.parametrize("text", ["nan", "nan@", "@3", "nan@-1", "nan@0", "boom@3", "NAN@3",
                                  "nan@3@4", ""])
def test_fault_grammar_rejects(text):
    with pytest.raises(ValueError, match="KIND@STEP"):
        parse_fault(text)

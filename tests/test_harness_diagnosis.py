"""Feedback from violation patterns alone (the mutant test asserts one hint per mutant; these
are the patterns no mutant of the catalogue produces, and the ordering of several causes)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

from tests.harness.check.checks import Run
from tests.harness.diagnose.diagnosis import (
    ACCUMULATE,
    BROADCAST,
    LOCAL_GUARD,
    NO_ROLLBACK,
    NOT_RECOVERED,
    ROWS,
    SUMMED,
    TWICE,
    UPDATE,
    diagnose,
)
from tests.harness.observe.violations import Violation


def parity(step: int, key: str, expected: float, found: float) -> Violation:
    return Violation("single_process_parity", 0, step, f"{key} {expected!r} (1 rank) within "
                     "1e-05 rel", found, "4-rank run diverges from 1 rank", kind=f"parity_{key}")


def test_a_loss_that_differs_at_step_1_lists_data_before_broadcast():
    """Loss and gradient both part at step 1, unseen by the observer: both data causes."""
    assert diagnose("single_process_parity", [parity(1, "loss", 4.3, 4.1),
                                              parity(1, "grad_norm", 0.5, 0.6)]) == [
        ROWS, BROADCAST]


def test_a_logged_loss_alone_wrong_is_the_loss_not_the_data():
    """A loss N times the one-rank run's at step 1 is a sum; another loss with the gradient
    agreeing is the logged loss, never the rows or the broadcast (issue 63's hold-out
    loss_summed was told "the ranks train on the wrong rows")."""
    from tests.harness.diagnose.diagnosis import LOSS_ONLY, LOSS_SUMMED

    for n in (2, 4):
        assert diagnose("single_process_parity", [parity(1, "loss", 4.1, 4.1 * n)], n) == [
            LOSS_SUMMED.format(n=n)]
    assert diagnose("single_process_parity", [parity(1, "loss", 4.1, 4.3)], 4) == [LOSS_ONLY]


def test_the_ranks_start_singles_out_the_broadcast_or_the_rows():
    """Issue 63, finding 3: where the observer saw a rank get no parameters before its first
    backward, the step-1 loss is the missing broadcast, never the rows; where every rank got
    P elements, the rows; unseen, both are told as consistent."""
    from tests.harness.check.checks import PARITY_SYNCED, PARITY_UNSYNCED, SYNCED, UNSYNCED

    def step1(why: str, kind: str) -> list[Violation]:
        v = parity(1, "loss", 4.3, 4.1)
        return [Violation(v.invariant, v.rank, v.step, v.expected, v.found, v.message + why,
                          kind=kind), parity(1, "grad_norm", 0.5, 0.6)]
    assert diagnose("single_process_parity", step1(f"; 1, 2, 3: {UNSYNCED} before the first "
                                                   "backward", PARITY_UNSYNCED)) == [BROADCAST]
    assert diagnose("single_process_parity", step1(f"; every rank {SYNCED} before the "
                                                   "first backward", PARITY_SYNCED)) == [ROWS]


def test_a_loss_that_matches_at_step_1_and_drifts_after_is_the_update():
    assert diagnose("single_process_parity", [parity(2, "loss", 4.0, 4.1)]) == [UPDATE]


def test_a_gradient_norm_N_times_the_single_rank_one_is_a_sum():
    for n in (2, 3, 4, 8):
        found = diagnose("single_process_parity", [parity(1, "grad_norm", 0.5, 0.5 * n)], n)
        assert found[0] == SUMMED


def test_each_gradient_cause_is_told_on_its_signature_and_none_without():
    """Issue 63, finding 1: a ratio of 1/N at every step is the division made twice (not one
    shard's norm, ~1/sqrt(N)); below 1 with the loss intact, part of the gradient in the
    norm; above 1 with the loss parting, no reduction; anything else is told as seen, with
    the mistakes it is consistent with, and never one name."""
    from tests.harness.diagnose.diagnosis import GRAD_SEEN, NOT_REDUCED, ONE_SHARD_NORM

    def grads(ratios: list[float]) -> list[Violation]:
        return [parity(s, "grad_norm", 2.0, 2.0 * r) for s, r in enumerate(ratios, 1)]

    for n in (2, 4, 8):
        twice = diagnose("single_process_parity", grads([1 / n] * 5), n)
        assert twice == [TWICE.format(n=n)] and ONE_SHARD_NORM not in twice
    shard = grads([0.52, 0.49, 0.55])  # one shard of four: ~1/sqrt(4), and not 1/4
    assert diagnose("single_process_parity", shard, 4) == [ONE_SHARD_NORM]
    local = [*grads([1.4, 1.6]), parity(2, "loss", 4.0, 4.1)]
    assert diagnose("single_process_parity", local, 4)[0] == NOT_REDUCED
    for odd in ([*grads([0.6]), parity(3, "loss", 4.0, 4.2)],  # below 1, and the loss parts
                grads([1.02, 1.3])):                            # barely above, loss intact
        [seen, *_] = diagnose("single_process_parity", odd, 4)
        assert seen.startswith(GRAD_SEEN.split("{")[0]) and "consistent with" in seen
        assert seen not in (ONE_SHARD_NORM, NOT_REDUCED, SUMMED)


def rollback(rank: int) -> Violation:
    return Violation("rollback", rank, 12, "a rollback event with reason 'nan'", "none",
                     kind="no_rollback_event")


def test_ranks_that_roll_back_differently_decided_on_local_values():
    assert diagnose("rollback", [rollback(1), rollback(2), rollback(3)], 4) == [LOCAL_GUARD]
    assert diagnose("rollback", [rollback(r) for r in range(4)], 4) == [NO_ROLLBACK]
    assert diagnose("rollback", [], 4) == []


def test_a_rollback_that_did_not_cure_the_run_says_what_was_seen():
    ended = Violation("rollback", None, 12, "exit code 0 after the rollback",
                      "exit code 1: rank 0: diverged at step 12, giving up",
                      kind="rollback_exit")
    [hint] = diagnose("rollback", [ended], 4)
    assert hint.startswith(NOT_RECOVERED) and "giving up" in hint


def test_gradients_that_accumulate_are_named_before_a_guess_about_moments():
    from tests.harness.check.checks import _accumulating
    from tests.harness.observe.parse import ParsedRun
    from tests.harness.run.runner import Outcome

    def run(norms: dict[int, float]) -> Run:
        parsed = ParsedRun(Path("."), 1)
        parsed.records = {0: {s: {"step": s, "grad_norm": g} for s, g in norms.items()}}
        return Run("r", 20, 1, Outcome([], ".", 0, False, 0.0), parsed)
    growing = run({s: 0.5 * s for s in range(1, 21)})
    assert _accumulating("byte_exact_resume", growing, run({11: 0.6}), 11, "resumed run")
    assert not _accumulating("byte_exact_resume", growing, run({11: 5.4}), 11, "resumed run")
    flat = run({s: 0.5 for s in range(1, 21)})  # no growth: nothing said about accumulation
    assert not _accumulating("byte_exact_resume", flat, run({11: 0.1}), 11, "resumed run")
    moments = Violation("byte_exact_resume", 0, 11, "grad_norm 5.5 (the original run)", 0.6,
                        "gradients accumulate across steps: ...", kind="accumulating")
    assert diagnose("byte_exact_resume", [moments])[0] == ACCUMULATE


@given(st.lists(st.sampled_from(["rank {} blocked in recv(src={}) at main.py:{}",
                                 "the gradient is reduced {} times per step",
                                 "summed, not averaged"]), min_size=1, max_size=6),
       st.lists(st.integers(0, 99), min_size=3, max_size=3))
@example(["rank {} blocked in recv(src={}) at main.py:{}"] * 2, [1, 1, 153])
def test_one_cause_seen_in_two_runs_is_told_once(templates, numbers):
    """Hints that differ only in numbers (one deadlock in the 4-rank and the one-rank run)
    are told once, the first kept; different causes all stay, in order."""
    from tests.harness.diagnose.diagnosis import told_once

    hints = [t.format(*[n + i for n in numbers][:t.count("{}")])
             for i, t in enumerate(templates)]
    once = told_once(hints)
    assert once == [hints[templates.index(t)] for t in dict.fromkeys(templates)]


def test_one_deadlock_in_the_n_rank_and_the_one_rank_run_is_one_cause():
    """Issue 63, finding 8: rank 0 waits in recv(src=1) in both runs; the one-rank run adds
    that its peer does not exist. One mistake, one line; another deadlock stays."""
    from tests.harness.diagnose.diagnosis import told_once

    four = "deadlock: rank 0 blocked in recv(src=1) at main.py:153; ranks 1-3 in all_reduce"
    one = ("deadlock: rank 0 blocked in recv(src=1) at main.py:153 (there is no rank 1 in a "
           "run of 1)")
    other = "deadlock: rank 0 blocked in send(dst=1) at main.py:160; ranks 1-3 in all_reduce"
    assert told_once([four, one, other]) == [four, other]
    assert told_once([one, four]) == [one]

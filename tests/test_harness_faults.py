"""The faults read from what the ranks computed (synthetic traces): a NaN or a spike that
really happened is seen wherever the program's guard sits; a rollback claimed without one
is the guard reading the flag; the suite's own NaN is confirmed on its rank and step."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from tests.harness.check.fault_checks import (
    FLAG_HINT,
    check_fault_took_effect,
    check_nemesis,
    fault_unseen,
)
from tests.harness.diagnose.diagnosis import diagnose
from tests.harness.observe.traces import Call
from tests.test_harness_observe import observed_run, rank_trace

CLEAN = [4.1, 3.2, 2.6, 2.1, 1.8, 1.5, 1.3]


def _run(kind: str, step: int, losses: list[float], calls: list[Call] | None = None,
         grads_ok: bool = True, rolled: bool = True, steps: list[int] | None = None):
    procs = []
    for r in range(4):
        p = rank_trace(r, 4, list(calls or []))
        p.losses = list(zip(steps or range(1, len(losses) + 1), losses, strict=True))
        p.grads_finite = [(s, grads_ok or s != step) for s in range(1, len(losses) + 1)]
        procs.append(p)
    run = observed_run(procs, 4, len(losses))
    for p in procs:  # the step each backward recorded
        p.backward_steps = [s for s, _ in p.losses]
    if rolled:
        for r in range(4):
            run.parsed.events[r] = [{"event": "rollback", "rank": r, "step": step,
                                     "to_step": 3, "reason": kind}]
    return run


def _guard_call(values: list[float]) -> Call:
    c = Call(0, "all_reduce", 2, 0, "float64", [0, 1, 2, 3], "main.py:50", 0, 1)
    c.values = values
    return c


@given(step=st.integers(4, 6), where=st.sampled_from(["grads", "reduction", "loss"]))
def test_a_nan_that_happened_is_seen_wherever_it_shows(step, where):
    losses = list(CLEAN)
    if where == "loss":
        losses[step - 1] = math.nan
    calls = [_guard_call([1.0, math.nan])] if where == "reduction" else []
    run = _run("nan", step, losses, calls, grads_ok=where != "grads")
    assert check_fault_took_effect(run, "nan", step) == []


@given(step=st.integers(3, 5), factor=st.floats(2.5, 1e4))
def test_a_spike_is_seen_in_a_loss_or_in_what_the_guard_reduces(step, factor):
    losses = list(CLEAN)
    losses[step] = losses[step - 1] * factor  # the loss of the step after the spiked update
    assert check_fault_took_effect(_run("spike", step + 1, losses), "spike", step) == []
    # a guard before the backward: the spiked loss only in the reduction it decides on
    calls = [_guard_call([v, 0.5]) for v in losses]
    no_backward = _run("spike", step + 1, CLEAN, calls)
    assert check_fault_took_effect(no_backward, "spike", step) == []


@given(kind=st.sampled_from(["nan", "spike"]), step=st.integers(3, 6))
def test_a_rollback_without_the_fault_is_the_guard_reading_the_flag(kind, step):
    run = _run(kind, step, CLEAN, [_guard_call([v, 0.5]) for v in CLEAN])
    [v] = check_fault_took_effect(run, kind, step)
    assert v.message.startswith(f"rollback logged at step {step}, but no ")
    assert v.message.endswith(FLAG_HINT) and f"{CLEAN[step - 1]:.4g}" in v.message
    assert "read the --inject flag" in diagnose("rollback", [v])[0]
    [v] = check_fault_took_effect(_run(kind, step, CLEAN, rolled=False), kind, step)
    assert "the guard never fired" in v.message  # no rollback: no points either


@given(kind=st.sampled_from(["nan", "spike"]), step=st.integers(5, 7))
def test_the_replay_after_a_rollback_is_no_spike(kind, step):
    """A guard that reads the flag rolls back to step 3's checkpoint and replays steps 4..:
    step 4's loss, above twice the last step's, is step 4's of the first time, not a fault."""
    falling = [4.1, 3.0, 2.2, 1.6, 1.0, 0.7, 0.5]
    steps = [*range(1, step + 1), *range(4, len(falling) + 1)]
    losses = [falling[s - 1] for s in steps]
    calls = [_guard_call([v, 0.5]) for v in losses]  # what the guard reduces, replayed too
    [v] = check_fault_took_effect(_run(kind, step, losses, calls, steps=steps), kind, step)
    assert v.message.endswith(FLAG_HINT), v.message


def test_the_suites_own_nan_is_confirmed_where_it_was_drawn():
    run = _run("nan", 5, CLEAN)
    assert check_nemesis(run, 5, 2)  # never made: no nemesis record on rank 2
    run.observed.processes[2].nemesis = {"kind": "nan", "step": 5, "rank": 2}
    # a record alone is the rank's word (its process writes its trace): not where the
    # suite's plan never answered
    assert check_nemesis(run, 5, 2)
    run.outcome.plan_fired = True
    assert check_nemesis(run, 5, 2) == []
    [v] = check_nemesis(_run("nan", 5, CLEAN[:3]), 5, 1)
    assert "it reached step 3" in v.message and v.found == "never made"


@given(kind=st.sampled_from(["nan", "spike"]), step=st.integers(3, 6),
       hidden=st.sampled_from(["no_calls", "flight_recorder_only", "before_the_step",
                               "clock_stopped"]))
def test_no_accusation_where_the_suite_saw_none_of_the_numbers(kind, step, hidden):
    """Finding 1 of issue 61: a correct program whose reductions are ProcessGroup methods or
    functional collectives (unseen at the Python level) was told its guard read the flag.
    Where the observer saw no data-carrying call after the fault step's backward (for a NaN)
    or not that step's loss (its step clock stopped: no collective to advance it), the check
    charges nothing and says what it could not see; the same rollback with the numbers
    seen is still the flag."""
    losses, steps = list(CLEAN), None
    if hidden == "clock_stopped":  # every backward after the first counted as step 2
        steps = [1] + [2] * (len(CLEAN) - 1)
    calls: list[Call] = []
    if hidden == "flight_recorder_only":
        calls = [_guard_call([v, 0.5]) for v in CLEAN]
        for c in calls:
            c.source = "flight-recorder"
    elif hidden == "before_the_step":
        calls = [_guard_call([1.0, 0.5])]  # issued at t0 = 0, before every backward below
    run = _run(kind, step, losses, calls, steps=steps)
    for p in run.observed.processes:
        p.backwards = [10 * (i + 1) for i in range(len(losses))]
    if kind == "spike" and hidden != "clock_stopped":
        # a spike shows in the loss, which the observer read at every backward: seen, so
        # a rollback without it is the flag's, whatever calls were hidden
        assert fault_unseen(run, kind, step) is None
        assert any(v.message.endswith(FLAG_HINT) for v in check_fault_took_effect(
            run, kind, step))
        return
    assert check_fault_took_effect(run, kind, step) == []
    why = fault_unseen(run, kind, step)
    assert why is not None and why.startswith(f"the suite could not see whether the {kind}@")
    assert "not seen yet" in why and FLAG_HINT not in why
    # the same run with its reductions seen after each backward: the flag, as before
    seen = _run(kind, step, losses, [_guard_call([v, 0.5]) for v in CLEAN])
    for p in seen.observed.processes:
        p.backwards = [0] * len(losses)
    assert fault_unseen(seen, kind, step) is None
    [v] = check_fault_took_effect(seen, kind, step)
    assert v.message.endswith(FLAG_HINT)
    if kind == "nan":  # a NaN's evidence is the calls after the step's backward, located by
        for p in seen.observed.processes:  # the step it recorded, not by its losses (a loss
            p.losses = []                   # the observer could not read records none)
        assert fault_unseen(seen, kind, step) is None


def test_a_plan_socket_path_too_long_is_told_with_what_to_do(tmp_path):
    """An xdist worker's temporary root nested one level deeper made the in-box catalogue's
    plan sockets fail with the kernel's bare "AF_UNIX path too long"."""
    import pytest

    from tests.harness.run.plan import PlanServer

    deep = tmp_path / ("d" * 110)
    deep.mkdir()
    with pytest.raises(OSError, match=r"over the 107 a Unix socket's path may have: give the "
                                      r"session a shorter temporary root"):
        PlanServer(deep, "nan@3:1")
    served = PlanServer(tmp_path, "nan@3:1")
    served.close()

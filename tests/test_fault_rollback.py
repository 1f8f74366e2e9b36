"""Fault injection: a one-shot NaN gradient or loss spike after the first checkpoint is
noticed before a bad update is kept, rolled back to the latest checkpoint, logged, and the
run ends bit-identical to the clean run (same losses, norms and step-20 shard bytes).

Each kind is injected once, at a step between 12 and 19 that the session's seed draws
(nan@12 and spike@15 under seed 0): a program that handles only the steps it was shown
fails the next session. The fault must show in what the ranks computed (a guard that reads
the flag logs the same rollback and meets no fault), and a NaN the suite makes itself, with
no flag, in one rank's gradients of one drawn step, is rolled back all the same."""

import pytest

from tests.harness.check.checks import check_checkpoint_files, check_rollback
from tests.harness.check.fault_checks import (
    check_fault_took_effect,
    check_killed,
    check_nemesis,
    check_resumed_after_kill,
    fault_unseen,
)
from tests.harness.report.grading import NOT_GRADED
from tests.harness.report.plugin import fault_seed, suite_seed
from tests.harness.run.runs import (
    BASE,
    FAULT_KINDS,
    RunSpec,
    fault_step,
    faulted,
    nemesis_kill,
    nemesis_nan,
    nemesis_of,
    resumed_after,
)

pytestmark = pytest.mark.fault


def _faulted(kind: str) -> RunSpec:
    return faulted(kind, fault_step(kind, suite_seed()))


def _killed(kind: str) -> list[RunSpec]:
    spec = nemesis_kill(fault_seed(), kind)
    return [BASE, spec, resumed_after(spec)] if kind == "killsave" else [BASE, spec]


@pytest.mark.reads(lambda kind: [BASE, _faulted(kind)])
@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_fault_is_rolled_back_and_run_ends_like_the_clean_run(run, holds, kind):
    step = fault_step(kind, suite_seed())
    holds(check_rollback(run(BASE), run(_faulted(kind)), kind, step),
          f"rollback of {kind}@{step}")


@pytest.mark.reads(lambda kind: [BASE, _faulted(kind)])
@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_the_announced_fault_shows_in_the_ranks_numbers(run, holds, kind):
    step = fault_step(kind, suite_seed())
    run(BASE)  # a program whose clean run does not finish: not checked, and no run started
    faulted_run = run(_faulted(kind))
    if faulted_run.observed is None:
        pytest.skip("the observer is off (--no-observe)")
    violations = check_fault_took_effect(faulted_run, kind, step)
    unseen = fault_unseen(faulted_run, kind, step) if not violations else None
    if unseen is not None:  # no evidence either way: never a charge, never an accusation
        pytest.skip(f"{NOT_GRADED}{unseen}")
    holds(violations, f"{kind}@{step} in the numbers")


@pytest.mark.reads(BASE, lambda: [nemesis_nan(fault_seed())])
def test_a_nan_the_program_did_not_ask_for_is_rolled_back(run, holds):
    spec = nemesis_nan(fault_seed())
    kind, step, rank = nemesis_of(spec) or ("nan", 0, 0)
    base = run(BASE)  # first: if it does not finish, this is not checked and not run
    nemesis = run(spec)
    if nemesis.observed is None:
        pytest.skip("the observer is off (--no-observe): the suite cannot make the NaN")
    holds(check_nemesis(nemesis, step, rank) + check_rollback(base, nemesis, kind, step),
          f"the suite's own NaN at step {step} on rank {rank}")


@pytest.mark.long  # killsave: the killed run, then its resume: started first
@pytest.mark.reads.with_args(_killed)  # a function alone would be taken for the test
@pytest.mark.parametrize("kind", ["kill", "killsave"])
def test_a_rank_killed_from_outside_ends_the_run_and_it_resumes_like_the_clean_run(run, holds,
                                                                                  kind):
    """The suite SIGKILLs one rank (never 0) as a drawn step starts, or while it writes its
    shard of a checkpoint: the run ends promptly and non-zero, leaves no process and no
    incomplete checkpoint published, its step-10 checkpoint verifies, and (after the torn
    write) resumed from it the run ends exactly where the clean run ends (steps 11..20, the
    step-20 shards' sha256)."""
    spec = _killed(kind)[1]
    _, step, rank = nemesis_of(spec) or (kind, 0, 1)
    base = run(BASE)  # first: a program whose clean run does not finish is not killed
    killed = run(spec)
    if killed.observed is None:
        pytest.skip("the observer is off (--no-observe): the suite cannot kill a rank")
    holds(check_killed(killed, kind, step, rank) + (
          check_resumed_after_kill(base, run(resumed_after(spec)), 10)
          if kind == "killsave" else check_checkpoint_files(killed, [10], "rollback")),
          f"rank {rank} killed ({kind}) at step {step}")

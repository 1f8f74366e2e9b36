"""Every check by name, as a function of a run getter: the mutant matrix's columns."""

from __future__ import annotations

from collections.abc import Callable

from tests.harness.check.adam_checks import check_adam
from tests.harness.check.checks import (
    Run,
    check_clean_exit,
    check_equal_norms,
    check_monotonic_loss,
    check_parity,
    check_resume,
    check_rollback,
    check_zero_memory,
)
from tests.harness.check.composed_checks import (
    check_composed_counts,
    check_composed_norms,
    check_composed_state,
    told_by_the_groups,
)
from tests.harness.check.exercise_checks import (
    check_accumulated_gradient,
    check_follows_one_batch,
    check_micro_batches,
    check_one_reduction,
    not_implemented,
)
from tests.harness.check.fault_checks import (
    check_fault_took_effect,
    check_killed,
    check_nemesis,
    check_resumed_after_kill,
)
from tests.harness.check.observed_checks import (
    check_genuine_ranks,
    check_measured_memory,
    check_same_sequence,
    check_zero_traffic,
)
from tests.harness.check.state_checks import check_state_location
from tests.harness.check.tp_checks import (
    check_heads,
    check_tp_loss,
    check_tp_rows,
    check_tp_traffic,
)
from tests.harness.check.tp_checks import not_implemented as not_implemented_tp
from tests.harness.check.work_checks import check_data_parallel, check_reduced
from tests.harness.observe.violations import Violation
from tests.harness.run.runs import (
    BASE,
    MEM1,
    MICRO,
    MICRO_BATCHES,
    N2,
    ONE_BATCH,
    RESUMED,
    SINGLE,
    TP,
    TP2,
    TP2DP2,
    TP2DP2_RESUMED,
    RunSpec,
    fault_step,
    faulted,
    nemesis_kill,
    nemesis_nan,
    nemesis_of,
    resumed_after,
    tp_faulted,
)

Getter = Callable[[RunSpec], Run]
KILLS = ("kill", "killsave")


def _killed(run: Getter, kind: str, seed: int) -> list[Violation]:
    """A rank the suite kills (the seed's rank and step), and the resume from step 10."""
    spec = nemesis_kill(seed, kind)
    _, step, rank = nemesis_of(spec) or (kind, 0, 1)
    return check_killed(run(spec), kind, step, rank) + (check_resumed_after_kill(
        run(BASE), run(resumed_after(spec)), 10) if kind == "killsave" else [])


def rollback_probe(seed: int = 0) -> tuple[str, int]:
    """The graded module's NaN: the fault and its step under `seed` (nan@12 under 0)."""
    return "nan", fault_step("nan", seed)


ROLLBACK_PROBE = rollback_probe(0)


def _rollback(run: Getter, seed: int) -> list[Violation]:
    """The graded rollback module's NaNs: the flag's (on rank 0) and the suite's own, with no
    flag, on another rank (a guard that judged rank 0's gradient alone passes the first)."""
    probe = rollback_probe(seed)
    late = run(faulted(*probe))
    own = nemesis_nan(seed)
    _, step, rank = nemesis_of(own) or ("nan", 0, 1)
    return (check_rollback(run(BASE), late, *probe) + check_fault_took_effect(late, *probe)
            + check_nemesis(run(own), step, rank)
            + check_rollback(run(BASE), run(own), "nan", step))


def _accumulation(run: Getter) -> list[Violation]:
    """Exercise 2: one line for a program that rejects --micro-batches, else every check."""
    many = run(MICRO)
    return not_implemented(many, f"--micro-batches {MICRO_BATCHES}") or (
        check_micro_batches(many, MICRO.batch_size, MICRO_BATCHES)
        + check_one_reduction(run(ONE_BATCH), many, MICRO_BATCHES)
        + check_accumulated_gradient(run(ONE_BATCH), many, MICRO_BATCHES)
        + check_follows_one_batch(run(ONE_BATCH), many, MICRO_BATCHES))


def _tensor_parallel(run: Getter, seed: int) -> list[Violation]:
    """Exercise 1: one line for a program that rejects --tensor-parallel, else every check
    on T = 2 over 2 ranks and over 4 (data parallelism of 2 beside it)."""
    out = not_implemented_tp(run(TP2), TP)
    if out:
        return out
    for spec in (TP2, TP2DP2):
        tp = run(spec)
        out += (check_tp_loss(tp, run(SINGLE), TP, spec.batch_size)
                + check_heads(tp, run(SINGLE), TP)
                + check_tp_traffic(tp, TP, spec.batch_size) + check_tp_rows(tp, TP)
                + check_composed_counts(tp, run(SINGLE), TP) + check_composed_norms(tp, TP))
    out += check_composed_state(run(TP2), run(TP2DP2), TP)
    probe = rollback_probe(seed)  # and a T = 2 run resumes and rolls back as a plain one
    composed = run(TP2DP2)
    return out + told_by_the_groups(
        composed, TP, check_resume(composed, run(TP2DP2_RESUMED), 10), "the resume") \
        + told_by_the_groups(composed, TP, check_rollback(
            composed, run(tp_faulted(*probe)), *probe), "the rollback")


# Each check as a function of a run getter and the session's seed (which draws the steps and
# ranks of the faults, as the graded modules draw them).
CHECKS: dict[str, Callable[[Getter, int], list[Violation]]] = {
    "monotonic_loss": lambda run, _: check_monotonic_loss(run(BASE)),
    "equal_rank_norms": lambda run, _: check_equal_norms(run(BASE)),
    "zero1_memory": lambda run, _: check_zero_memory(run(BASE)) + check_state_location(
        {1: run(MEM1), 2: run(N2), 4: run(BASE)}) + check_measured_memory(
        {1: run(MEM1), 2: run(N2), 4: run(BASE)}),
    "communication": lambda run, _: (
        check_genuine_ranks(run(BASE)) + check_same_sequence(run(BASE))
        + check_zero_traffic(run(BASE)) + check_data_parallel(run(BASE), BASE.batch_size)
        + check_reduced(run(BASE))),
    "no_deadlock": lambda run, _: check_clean_exit(run(BASE)),
    "byte_exact_resume": lambda run, _: check_resume(run(BASE), run(RESUMED), 10),
    "single_process_parity": lambda run, _: check_parity(run(BASE), run(SINGLE))
    + check_adam(run(BASE)),
    "rollback": _rollback,
    # Exercise 2 (graded where a grading selects it): --micro-batches 4 against one batch.
    "accumulation": lambda run, _: _accumulation(run),
    # Exercise 1 (graded where a grading selects it): --tensor-parallel 2.
    "tensor_parallel": _tensor_parallel,
    # Not an invariant module of its own: graded under rollback (test_fault_rollback.py).
    "rank_killed": lambda run, seed: [v for kind in KILLS for v in _killed(run, kind, seed)],
}
# The invariants every submission is graded on (the exercises' columns only where a grading
# selects them: a program of contract v1 may reject their flags).
EXERCISE_CHECKS = ("accumulation", "tensor_parallel")
INVARIANT_CHECKS = tuple(k for k in CHECKS if k not in EXERCISE_CHECKS)
# Checks that need only the base run: evaluated for every mutant, since they cost nothing.
# (zero1_memory also measures N = 1 and 2 runs: evaluated where it is a target.)
FROM_BASE_RUN = ("monotonic_loss", "equal_rank_norms", "no_deadlock", "communication")


def evaluate(run: Getter, names: tuple[str, ...], seed: int = 0
             ) -> dict[str, list[Violation]]:
    """The checks `names` on the runs `run` gets; `seed` is the session's (RunCache.seed)."""
    return {name: CHECKS[name](run, seed) for name in names}

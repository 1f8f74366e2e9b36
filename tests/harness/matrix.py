"""Every check by name, as a function of a run getter: the mutant matrix's columns."""

from __future__ import annotations

from collections.abc import Callable

from tests.harness.checks import (
    Run,
    check_clean_exit,
    check_equal_norms,
    check_monotonic_loss,
    check_parity,
    check_resume,
    check_rollback,
    check_zero_memory,
)
from tests.harness.fault_checks import (
    check_fault_took_effect,
    check_killed,
    check_resumed_after_kill,
)
from tests.harness.observed_checks import (
    check_genuine_ranks,
    check_measured_memory,
    check_same_sequence,
    check_zero_traffic,
)
from tests.harness.runs import (
    BASE,
    MEM1,
    N2,
    RESUMED,
    SINGLE,
    RunSpec,
    fault_step,
    faulted,
    nemesis_kill,
    nemesis_of,
    resumed_after,
)
from tests.harness.state_checks import check_state_location
from tests.harness.violations import Violation
from tests.harness.work_checks import check_data_parallel, check_reduced

Getter = Callable[[RunSpec], Run]
KILLS = ("kill", "killsave")


def _killed(run: Getter, kind: str) -> list[Violation]:
    """A rank the suite kills (seed 0's rank and step), and the resume from step 10."""
    spec = nemesis_kill(0, kind)
    _, step, rank = nemesis_of(spec) or (kind, 0, 1)
    return check_killed(run(spec), kind, step, rank) + (check_resumed_after_kill(
        run(BASE), run(resumed_after(spec)), 10) if kind == "killsave" else [])

ROLLBACK_PROBE = ("nan", fault_step("nan", 0))  # the graded module's, under seed 0

CHECKS: dict[str, Callable[[Getter], list[Violation]]] = {
    "monotonic_loss": lambda run: check_monotonic_loss(run(BASE)),
    "equal_rank_norms": lambda run: check_equal_norms(run(BASE)),
    "zero1_memory": lambda run: check_zero_memory(run(BASE)) + check_state_location(
        {1: run(MEM1), 2: run(N2), 4: run(BASE)}) + check_measured_memory(
        {1: run(MEM1), 2: run(N2), 4: run(BASE)}),
    "communication": lambda run: (check_genuine_ranks(run(BASE)) + check_same_sequence(run(BASE))
                                  + check_zero_traffic(run(BASE))
                                  + check_data_parallel(run(BASE), BASE.batch_size)
                                  + check_reduced(run(BASE))),
    "no_deadlock": lambda run: check_clean_exit(run(BASE)),
    "byte_exact_resume": lambda run: check_resume(run(BASE), run(RESUMED), 10),
    "single_process_parity": lambda run: check_parity(run(BASE), run(SINGLE)),
    "rollback": lambda run: check_rollback(run(BASE), run(faulted(*ROLLBACK_PROBE)),
                                           *ROLLBACK_PROBE) + check_fault_took_effect(
        run(faulted(*ROLLBACK_PROBE)), *ROLLBACK_PROBE),
    # Not an invariant module of its own: graded under rollback (test_fault_rollback.py).
    "rank_killed": lambda run: [v for kind in KILLS for v in _killed(run, kind)],
}
# Checks that need only the base run: evaluated for every mutant, since they cost nothing.
# (zero1_memory also measures N = 1 and 2 runs: evaluated where it is a target.)
FROM_BASE_RUN = ("monotonic_loss", "equal_rank_norms", "no_deadlock", "communication")


def evaluate(run: Getter, names: tuple[str, ...]) -> dict[str, list[Violation]]:
    return {name: CHECKS[name](run) for name in names}

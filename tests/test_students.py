"""Independent submissions (tests/students/): each mistake students make is caught by its
target with a hint that names it, and the correct programs pass what their styles exercise.
That the correct zero1.py passes every check is graded cold in the corpus tier
(tests/test_styles.py, `students_zero1`), as a platform grades it; tests/test_autograder.py
grades tests/submissions/ring to 100. Not selected by `-k invariant`."""

from __future__ import annotations

import sys
from dataclasses import replace
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from tests.harness.check.checks import check_monotonic_loss
from tests.harness.check.matrix import evaluate
from tests.harness.diagnose.diagnosis import diagnose
from tests.harness.observe.violations import summarize
from tests.harness.run.runs import BASE

STUDENT = Path(__file__).resolve().parent / "students" / "zero1.py"
STUDENT_NN = STUDENT.with_name("zero1_nn.py")
pytestmark = pytest.mark.fault


def student(mistake: str | None = None) -> tuple[str, ...]:
    return (sys.executable, str(STUDENT), *([mistake] if mistake else []))


@pytest.mark.corpus  # a correct program of another style on two invariants (seconds, its
@pytest.mark.long    # ranks start torch each): the corpus tier, beside the style corpus
def test_a_correct_program_in_a_third_style_passes_what_its_style_exercises(reference_only,
                                                                          run_cache):
    """tests/students/zero1_nn.py: an nn.Module, ranks as subprocesses on port 12355, an
    async reduce-scatter, the loss gathered to rank 0 and broadcast back (rooted calls are
    the same call on every rank), Adam by hand out of place (its state is new tensors every
    step, and still the memory the rank holds)."""
    command = (sys.executable, str(STUDENT_NN))
    found = evaluate(lambda spec: run_cache.get(command, spec), ("zero1_memory",
                                                                 "communication"))
    broken = {k: v for k, v in found.items() if v}
    assert not broken, "\n".join(f"{k}:\n{summarize(v)}" for k, v in broken.items())


def test_its_own_data_may_overshoot_once_and_still_fall(reference_only, run_cache):
    """zero1.py's data and init (its own, as the contract allows) under seed 11: Adam
    overshoots at step 5 (+0.56%) and step 6 takes it back. Not a divergence: it passes,
    while a loss that keeps rising (local_gradient, in the mutant matrix) does not."""
    r = run_cache.get(student(), replace(BASE, name="seed11", seed=11))
    losses = [r.parsed.records[0][s]["loss"] for s in range(1, r.steps + 1)]
    assert any(b > a for a, b in pairwise(losses)), "seed 11 no longer overshoots: pick another"
    assert check_monotonic_loss(r) == []


@pytest.mark.long
def test_state_in_one_flat_storage_passes_zero1_memory(reference_only, run_cache):
    """zero1.py's `flat_state` style: master, exp_avg and exp_avg_sq as views of one buffer of
    3·ceil(P/N) elements (torch.optim.Adam on a view): found where it lives, it shrinks as
    1/N like three separate tensors."""
    found = evaluate(lambda spec: run_cache.get(student("flat_state"), spec), ("zero1_memory",))
    assert not found["zero1_memory"], summarize(found["zero1_memory"])


@pytest.mark.long
@pytest.mark.parametrize("mistake, targets, hint", [
    ("whole_batch", ("communication",), "every rank trained on the whole global batch of 16"),
    ("whole_batch_no_reduction", ("communication",), "never reduced across ranks"),
    ("allreduce_then_slice", ("communication",), "all-reduce where a reduce-scatter suffices"),
    ("grads_never_cleared", ("byte_exact_resume",), "gradients accumulate"),
], ids=["whole_batch", "whole_batch_no_reduction", "allreduce_then_slice",
        "grads_never_cleared"])
def test_an_independent_mistake_is_caught_and_named(reference_only, run_cache, mistake,
                                                     targets, hint):
    found = evaluate(lambda spec: run_cache.get(student(mistake), spec), targets)
    for target in targets:
        assert found[target], f"{mistake} was not caught by {target}"
    hints = [h for t in targets for h in diagnose(t, found[t])]
    assert any(hint in h for h in hints), f"{mistake}: {hint!r} not in {hints}"


def test_a_program_whose_collectives_are_process_group_methods_is_seen_as_any_other(
        reference_only, run_cache):
    """zero1.py's `pg_methods` style (issue 61, finding 1): the same program with every
    collective made by the default ProcessGroup's methods, which torch.distributed's wrapped
    functions never see. The observer sees them at the dispatcher: the same reductions, the
    same step clock, and the announced NaN seen in the numbers the guard reduces, so its
    rollback is judged on them as the functions' style's is (it used to be told it read the
    flag, then "not graded")."""
    from tests.harness.check.fault_checks import check_fault_took_effect, fault_unseen
    from tests.harness.check.observed_checks import check_zero_traffic
    from tests.harness.run.runs import BASE, fault_step, faulted

    step = fault_step("nan", run_cache.seed)
    methods = run_cache.get(student("pg_methods"), faulted("nan", step))
    functions = run_cache.get(student(), faulted("nan", step))
    rolled = [e for e in methods.parsed.events[0] if e.get("event") == "rollback"]
    assert rolled and rolled[0]["reason"] == "nan", methods.outcome.reason()
    assert methods.parsed.records[0][20] == functions.parsed.records[0][20]  # same training
    assert fault_unseen(methods, "nan", step) is None
    assert check_fault_took_effect(methods, "nan", step) == []
    def ops(run: Any) -> list[list[str]]:
        return [[c.op for c in p.collectives()] for p in run.observed.ranks().values()]
    assert ops(methods) == ops(functions)
    clean = run_cache.get(student("pg_methods"), BASE)
    assert check_zero_traffic(clean) == []

"""The style corpus (tests/styles/): correct programs written the ways the ecosystem writes
them, and what the suite infers from a run must hold for each. P is what the ranks'
backward passes differentiate (a flat shard kept as an nn.Parameter is not the model's); the
optimizer state is found wherever Python holds it (numpy too); a crash's cause is told once,
by the rank's own exception or the suite's kill, whatever the launcher; state a program froze
out of the collector's sight (`gc.freeze()`) is still found.

Every program of the corpus is graded cold on every check under `-m corpus` (minutes: a few
runs each, spawn-style and torchrun launchers start torch once per rank; the two whose heads
alone differ from another's, on exercise 1 alone), and on the lesson's exercises it does:
accumulation by a flat buffer, by autograd.grad sums and under DDP's no_sync; the heads by
hand over dist.new_group groups and by DTensor's ColwiseParallel/RowwiseParallel on a
DeviceMesh (dtensor_heads.py), each all-reduce of the pair written as an exchange of
isend/recv with the peer (exchange_heads.py), and the output projection's bias on one rank
of each group (bias_on_first.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.harness.check.matrix import INVARIANT_CHECKS, evaluate
from tests.harness.check.observed_checks import check_zero_traffic, params_with_source
from tests.harness.check.state_checks import WHOLE_HINT
from tests.harness.check.work_checks import check_reduced
from tests.harness.diagnose.diagnosis import diagnose
from tests.harness.observe.violations import summarize
from tests.harness.run.runs import BASE, TP2DP2, nemesis_kill, nemesis_of

STYLES = Path(__file__).resolve().parent / "styles"
CORPUS = ("flat_parameter", "optimizer_class", "process_spawn", "subprocess_ranks",
          "torchrun_ranks", "ddp_hook", "dtensor_heads", "exchange_heads", "frozen_state",
          # the collectives through another API than torch.distributed's functions
          "pg_methods", "functional", "dtensor_zero",
          # the gradients from a torch.func transform, no .backward()
          "func_grads")
# The lesson's exercises each program does (every one accumulates; ddp_hook and func_grads
# reject --tensor-parallel: DDP over a data-parallel group beside head parallelism is not
# written, nor heads under a transform)
EXERCISES_DONE = {name: ("accumulation", "tensor_parallel") for name in CORPUS} | {
    "ddp_hook": ("accumulation",), "func_grads": ("accumulation",)}
pytestmark = pytest.mark.fault


def style(name: str, *mistake: str) -> tuple[str, ...]:
    return (sys.executable, str(STYLES / f"{name}.py"), *mistake)


def test_p_is_what_the_backward_differentiates_not_every_parameter(reference_only,
                                                                    run_cache):
    """torch.optim.Adam over a flat shard nn.Parameter: the process holds 30,080 + 7,520
    elements of nn.Parameter; P is the 30,080 its backward reaches, and every gradient
    element is reduced."""
    run = run_cache.get(style("flat_parameter"), BASE)
    P, source = params_with_source(run)
    assert P == run.parsed.n_params == 30_080, (P, source)
    assert "backward" in source
    assert check_reduced(run) == [] and check_zero_traffic(run) == []


def test_a_flat_parameter_program_that_reduces_80_percent_is_caught(reference_only,
                                                                    run_cache):
    found = check_reduced(run_cache.get(style("flat_parameter", "reduce80"), BASE))
    assert found, "reduce80 reduced 80% of its gradient and passed"
    assert any("only 80% of the gradient is reduced" in h
               for h in diagnose("communication", found)), summarize(found)


@pytest.mark.long
def test_moments_kept_whole_in_numpy_are_found(reference_only, run_cache):
    """optimizer_class.py numpy_moments: full-size moments in numpy arrays, torch views of
    the rank's slice, optimizer_bytes right by construction; held whole, it is caught by
    where the state lives and by the memory it keeps."""
    found = evaluate(lambda spec: run_cache.get(style("optimizer_class", "numpy_moments"),
                                                spec), ("zero1_memory",))["zero1_memory"]
    assert any(v.invariant == "zero1_memory" and "exp_avg" in str(v.expected) + v.message
               for v in found), summarize(found)
    assert WHOLE_HINT in " ".join(diagnose("zero1_memory", found)), summarize(found)


@pytest.mark.long
def test_moments_kept_whole_and_frozen_out_of_the_collectors_sight_are_found(reference_only,
                                                                             run_cache):
    """frozen_state.py frozen_whole: full-size moments in torch tensors that `gc.freeze()`
    took out of `gc.get_objects()`, views of the rank's slice stepped, copies saved: caught
    by where the state lives and by the memory it keeps (the observer notes what a program
    freezes). frozen_state.py itself, frozen the same way, passes every check (corpus tier)."""
    found = evaluate(lambda spec: run_cache.get(style("frozen_state", "frozen_whole"), spec),
                     ("zero1_memory",))["zero1_memory"]
    assert any(v.invariant == "zero1_memory" and "exp_avg" in str(v.expected) + v.message
               for v in found), summarize(found)
    assert WHOLE_HINT in " ".join(diagnose("zero1_memory", found)), summarize(found)


def test_a_rank_the_suite_killed_is_told_as_the_suites_doing(reference_only, run_cache):
    """A fork-style Process launcher: the killed rank's peers raise too (the lost
    connection); the cause is the kill, told once, and no multiprocessing header."""
    spec = nemesis_kill(0, "kill")
    _, step, rank = nemesis_of(spec) or ("kill", 0, 1)
    said = run_cache.get(style("optimizer_class"), spec).outcome.first_error
    assert said == (f"rank {rank} was killed by the suite as step {step} started (the fault "
                    "under test, not the program's error)"), said


def test_ranks_raising_the_same_are_told_once(reference_only, run_cache):
    """Four fork-context ranks raise the same KeyError; their tracebacks and multiprocessing's
    "Process ForkProcess-N:" headers interleave on stderr."""
    program = STYLES.parent / "hostile" / "same_error.py"
    outcome = run_cache.get((sys.executable, str(program)), BASE).outcome
    assert outcome.first_error.startswith(
        "ranks 0-3 raised KeyError: 'betas' at hostile/same_error.py:20"), outcome.first_error
    assert "Process" not in outcome.reason()


# Graded cold in the corpus tier, as a platform grades a submission (the default suite's tests
# start them warm: tests/harness/run/warm.py): the corpus, and the students' zero1.py (which
# does neither exercise)
GRADED_COLD = {name: (STYLES / f"{name}.py", EXERCISES_DONE[name]) for name in CORPUS} | {
    "students_zero1": (STYLES.parent / "students" / "zero1.py", ())}
# Programs that differ from another of the corpus in their heads alone: without
# --tensor-parallel they are flat_parameter.py's ZeRO-1 under mp.spawn (functional.py's
# launcher), so only exercise 1 is theirs to grade (the tier repeats nothing)
HEADS_ONLY = ("dtensor_heads", "exchange_heads")


@pytest.mark.corpus
@pytest.mark.parametrize("name", list(GRADED_COLD))
def test_a_correct_program_of_the_corpus_passes_every_check(reference_only, cold_run_cache, name):
    program, exercises = GRADED_COLD[name]
    checks = ("tensor_parallel",) if name in HEADS_ONLY else INVARIANT_CHECKS + exercises
    found = evaluate(lambda spec: cold_run_cache.get((sys.executable, str(program)), spec),
                     checks, cold_run_cache.seed)
    broken = {k: v for k, v in found.items() if v}
    assert not broken, "\n".join(f"{k}:\n{summarize(v)}" for k, v in broken.items())


@pytest.mark.corpus
def test_a_bias_one_rank_of_each_group_holds_is_that_ranks_own(reference_only, cold_run_cache):
    """Issue 63, finding 6: bias_on_first.py holds the output projection's bias on
    tensor-parallel rank 0 of each group only, a correct layout: its ranks log their own
    `optimizer_bytes` (rank 1 of a group C fewer elements per block), and exercise 1 passes
    on them. (Its invariants are flat_parameter's: without --tensor-parallel the two programs
    are one.)"""
    found = evaluate(lambda spec: cold_run_cache.get(style("bias_on_first"), spec),
                     ("tensor_parallel",), cold_run_cache.seed)["tensor_parallel"]
    assert found == [], summarize(found)
    run = cold_run_cache.get(style("bias_on_first"), TP2DP2)
    logged = {r: recs[max(recs)]["optimizer_bytes"] for r, recs in run.parsed.records.items()}
    assert logged[0] == logged[2] > logged[1] == logged[3], logged  # the layout is not one


def test_accumulating_in_a_flat_buffer_is_the_one_batch_gradient(reference_only, run_cache):
    """Exercise 2 written another way: each micro-batch's gradients added into the flat
    buffer the reduce-scatter reads (the reference accumulates in .grad)."""
    found = evaluate(lambda spec: run_cache.get(style("flat_parameter"), spec),
                     ("accumulation",), run_cache.seed)["accumulation"]
    assert found == [], summarize(found)


def test_micro_batches_summed_in_another_style_are_caught(reference_only, run_cache):
    """The mistake of the mutant accum_summed, written in flat_parameter's style: caught
    by the gradient, with the hint, not by numbers tuned to the reference."""
    found = evaluate(lambda spec: run_cache.get(style("flat_parameter", "sum_micro"), spec),
                     ("accumulation",), run_cache.seed)["accumulation"]
    hints = diagnose("accumulation", found)
    assert any("summed without dividing by M = 4" in h for h in hints), summarize(found)


def test_a_program_without_the_exercise_is_told_so_once(reference_only, run_cache):
    """tests/students/zero1.py rejects --micro-batches (exit 2): every check of exercise 2
    says "exercise not implemented", and nothing else (no crash report, no numbers)."""
    zero1 = (sys.executable, str(STYLES.parent / "students" / "zero1.py"))
    found = evaluate(lambda spec: run_cache.get(zero1, spec), ("accumulation",),
                     run_cache.seed)["accumulation"]
    assert found and {v.message for v in found} == {
        "exercise not implemented: the program rejects --micro-batches 4"}, summarize(found)

"""Wrong compositions of the reference, each a small patch applied in the child process.

A mutant names the invariant(s) it must break; tests/test_fault_mutants.py asserts that
exactly those checks report violations, and prints the mutant x invariant matrix. The
package itself carries no mutant switches: everything here is monkeypatching. The patches
live by what they break: `zero1.py` (ZeRO-1's pieces), `failures.py` (checkpoints, the
guard, dying ranks), `work.py` (each rank's work per step), `exercises.py` (the lesson's
exercises); this module is the catalogue.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tests.mutants import one_process
from tests.mutants.exercises import (
    accum_cleared,
    accum_flag_ignored,
    accum_overlap,
    accum_reduce_each,
    accum_summed,
    tp_all_heads_halved,
    tp_bias_every_rank,
    tp_dp_no_allgather,
    tp_local_n_params,
    tp_moments_whole,
    tp_no_backward_allreduce,
    tp_no_forward_allreduce,
    tp_same_heads,
)
from tests.mutants.failures import (
    checkpoint_in_place,
    checkpoint_without_moments,
    exit_0,
    extra_collective,
    guard_reads_flag,
    loss_only_guard,
    no_guard,
    rank0_guard,
    stale_checkpoint,
    step_count_not_restored,
    unmatched_recv,
    waits_for_dead_peer,
)
from tests.mutants.work import (
    global_batch_split,
    grads_never_cleared,
    reduced_per_micro_batch,
    same_rows,
    whole_batch,
    whole_batch_no_reduction,
)
from tests.mutants.zero1 import (
    allreduce_then_slice,
    ddp_and_zero,
    local_grad_norm,
    local_gradient,
    local_loss,
    no_allgather,
    no_broadcast,
    replicated_moments,
    replicated_state,
    summed_gradients,
    whole_with_temporaries,
)


@dataclass(frozen=True)
class Mutant:
    name: str
    targets: tuple[str, ...]  # the invariants that must catch it
    patch: Callable[[], None]
    extra_flags: tuple[str, ...] = ()  # appended to the contract flags
    main: Callable[[list[str]], int] | None = None  # instead of capstone's own main
    hint: str = ""  # what the feedback must say (harness/diagnose/diagnosis.py), from violations


MUTANTS: dict[str, Mutant] = {m.name: m for m in [
    Mutant("no_broadcast", ("equal_rank_norms", "single_process_parity"), no_broadcast,
           hint="initial broadcast is missing"),
    Mutant("no_allgather", ("equal_rank_norms",), no_allgather, hint="not all-gathered"),
    Mutant("local_gradient", ("single_process_parity",), local_gradient,
           hint="not reduced across ranks"),
    Mutant("summed_gradients", ("single_process_parity",), summed_gradients,
           hint="summed, not averaged"),
    Mutant("replicated_state", ("zero1_memory",), replicated_state, hint="full Adam state"),
    Mutant("checkpoint_without_moments", ("byte_exact_resume",), checkpoint_without_moments,
           hint="Adam's moments are not saved or not restored"),
    Mutant("step_count_not_restored", ("byte_exact_resume",), step_count_not_restored,
           hint="Adam's step count is not saved or not restored"),
    Mutant("same_rows", ("single_process_parity",), same_rows, hint="wrong rows"),
    Mutant("no_guard", ("rollback",), no_guard, hint="never fired"),
    Mutant("loss_only_guard", ("rollback",), loss_only_guard, hint="not only its loss"),
    Mutant("guard_reads_flag", ("rollback",), guard_reads_flag,
           hint="the guard read the --inject flag, not the numbers"),
    # the flag's NaN is rank 0's: caught on the suite's own NaN, never on rank 0
    Mutant("rank0_guard", ("rollback",), rank0_guard, hint="the guard fired too late"),
    # a rank killed from outside, mid-step or mid-write (the suite's nemesis)
    Mutant("checkpoint_in_place", ("rank_killed",), checkpoint_in_place,
           hint="write each checkpoint under a temporary name"),
    Mutant("launcher_exit_0", ("rank_killed",), lambda: None, main=exit_0,
           hint="exit 0 although rank"),
    Mutant("waits_for_dead_peer", ("rank_killed",), waits_for_dead_peer,
           hint="s for a dead peer"),
    Mutant("extra_collective", ("no_deadlock", "communication"), extra_collective,
           ("--pg-timeout", "5"), hint="different collectives"),
    # of our own design
    Mutant("stale_checkpoint", ("zero1_memory", "byte_exact_resume"), stale_checkpoint,
           hint="before the step's update"),
    Mutant("local_loss", ("monotonic_loss",), local_loss, hint="its own batch's loss"),
    Mutant("local_grad_norm", ("single_process_parity",), local_grad_norm,
           hint="one rank's shard"),
    # observed, not reported (what the ranks did)
    Mutant("single_process", ("communication", "zero1_memory"), lambda: None,
           main=one_process.main, hint="one process did the work"),
    Mutant("replicated_moments", ("zero1_memory",), replicated_moments, hint="allocated whole"),
    Mutant("ddp_and_zero", ("communication",), ddp_and_zero, hint="reduced twice"),
    # the state found where it lives: whole tensors behind formula bytes, ZeRO-1's traffic
    Mutant("whole_moments", ("zero1_memory",),
           whole_with_temporaries(("exp_avg", "exp_avg_sq")),
           hint="exp_avg is held in a storage of"),
    Mutant("whole_second_moment", ("zero1_memory",), whole_with_temporaries(("exp_avg_sq",)),
           hint="exp_avg_sq is held in a storage of"),
    Mutant("whole_state_zero1_traffic", ("zero1_memory",),
           whole_with_temporaries(("master", "exp_avg", "exp_avg_sq")),
           hint="exp_avg is held in a storage of"),
    Mutant("unmatched_recv", ("communication", "no_deadlock"), unmatched_recv,
           hint="blocked in recv(src=1)"),
    # the work itself: each rank's share of the batch, reductions, gradients per step
    Mutant("whole_batch", ("communication",), whole_batch, hint="whole global batch"),
    Mutant("global_batch_split", ("communication",), global_batch_split,
           hint="--batch-size is per rank"),
    Mutant("whole_batch_no_reduction", ("communication",), whole_batch_no_reduction,
           hint="never reduced"),
    Mutant("allreduce_then_slice", ("communication",), allreduce_then_slice,
           hint="all-reduce where a reduce-scatter suffices"),
    Mutant("grads_never_cleared", ("byte_exact_resume",), grads_never_cleared,
           hint="gradients accumulate across steps"),
    Mutant("reduced_per_micro_batch", ("communication",), reduced_per_micro_batch,
           hint="reduced 2 times per step at one call site"),
    # Exercise 2 (--micro-batches 4): each is the reference at M = 1.
    Mutant("accum_summed", ("accumulation",), accum_summed,
           hint="summed without dividing by M = 4"),
    Mutant("accum_reduce_each", ("accumulation",), accum_reduce_each,
           hint="reduced after every micro-batch"),
    Mutant("accum_overlap", ("accumulation",), accum_overlap,
           hint="cover each of the rank's rows exactly once"),
    Mutant("accum_cleared", ("accumulation",), accum_cleared,
           hint="cleared between micro-batches"),
    Mutant("accum_flag_ignored", ("accumulation",), accum_flag_ignored,
           hint="takes 1 forward and backward pass(es) a step"),
    # Exercise 1 (--tensor-parallel 2): each is the reference without the flag.
    Mutant("tp_no_forward_allreduce", ("tensor_parallel",), tp_no_forward_allreduce,
           hint="the attention output is not all-reduced"),
    Mutant("tp_no_backward_allreduce", ("tensor_parallel",), tp_no_backward_allreduce,
           hint="the input's gradient is not all-reduced in backward"),
    Mutant("tp_same_heads", ("tensor_parallel",), tp_same_heads,
           hint="two ranks of a group hold the same heads"),
    Mutant("tp_all_heads_halved", ("tensor_parallel",), tp_all_heads_halved,
           hint="holds every head of the attention"),
    Mutant("tp_bias_every_rank", ("tensor_parallel",), tp_bias_every_rank,
           hint="added on every rank of the group"),
    Mutant("tp_moments_whole", ("tensor_parallel",), tp_moments_whole,
           hint="ZeRO-1 over the data-parallel group keeps"),
    Mutant("tp_local_n_params", ("tensor_parallel",), tp_local_n_params,
           hint="n_params counts the whole model"),
    Mutant("tp_dp_no_allgather", ("tensor_parallel",), tp_dp_no_allgather,
           hint="the ranks of a data-parallel group hold different parameters"),
]}

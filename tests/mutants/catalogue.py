"""Wrong compositions of the reference, each a small patch applied in the child process.

A mutant names the invariant(s) it must break; tests/test_fault_mutants.py asserts that
exactly those checks report violations, and prints the mutant x invariant matrix. The
package itself carries no mutant switches: everything here is monkeypatching.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from capstone import data, guard, tensor_parallel, trainer, world, zero
from tests.mutants import one_process


@dataclass(frozen=True)
class Mutant:
    name: str
    targets: tuple[str, ...]  # the invariants that must catch it
    patch: Callable[[], None]
    extra_flags: tuple[str, ...] = ()  # appended to the contract flags
    main: Callable[[list[str]], int] | None = None  # instead of capstone's own main
    hint: str = ""  # what the feedback must say (harness/diagnose/diagnosis.py), from violations


class _DistProxy:
    """`torch.distributed` as capstone.zero sees it, with some collectives replaced."""

    def __init__(self, **overrides: Callable[..., Any]) -> None:
        self._overrides = overrides

    def __getattr__(self, name: str) -> Any:
        return self._overrides.get(name) or getattr(dist, name)


def _zero_dist(**overrides: Callable[..., Any]) -> None:
    zero.dist = _DistProxy(**overrides)  # type: ignore[assignment]


def no_broadcast() -> None:
    _zero_dist(broadcast=lambda *a, **k: None)


def no_allgather() -> None:
    """The updated slices of the other ranks never reach this rank's parameters."""
    def own_slice_only(out: torch.Tensor, piece: torch.Tensor, size: int,
                       group: Any = None) -> None:
        out.view(size, -1)[dist.get_rank()].copy_(piece)
    zero.all_gather = own_slice_only


def local_gradient() -> None:
    """Each owner keeps its own local gradient slice: no reduction at all."""
    def no_reduction(out: torch.Tensor, flat: torch.Tensor, size: int, group: Any = None) -> None:
        out.copy_(flat.view(size, -1)[dist.get_rank()])
    zero.reduce_scatter_mean = no_reduction


def summed_gradients() -> None:
    """Gradients summed over ranks but never divided by N."""
    real = zero.reduce_scatter_mean

    def summed(out: torch.Tensor, flat: torch.Tensor, size: int, group: Any = None) -> None:
        real(out, flat, size, group)
        out *= size
    zero.reduce_scatter_mean = summed


def _wrap_reduce_gradients(edit: Callable[[zero.ZeroOneAdam, torch.Tensor, float, float],
                                          tuple[float, float]]) -> None:
    """Replace what ZeroOneAdam.reduce_gradients reports; the reduction itself is untouched."""
    original = zero.ZeroOneAdam.reduce_gradients

    def reduce_gradients(self: zero.ZeroOneAdam, local_loss: torch.Tensor) -> tuple[float, float]:
        loss, grad_norm = original(self, local_loss)
        return edit(self, local_loss, loss, grad_norm)
    zero.ZeroOneAdam.reduce_gradients = reduce_gradients  # type: ignore[method-assign]


def local_grad_norm() -> None:
    """Each rank reports the norm of its own gradient slice as the global norm."""
    _wrap_reduce_gradients(lambda self, local_loss, loss, grad_norm: (
        loss, float(self._grad_shard.to(torch.float64).square().sum().sqrt())))


class _ReplicatedAdam(zero.ZeroOneAdam):
    """Plain data parallel + Adam: every rank keeps all the optimizer state (12P bytes)."""

    def __init__(self, params: Any, par: world.Parallelism, lr: float, betas: Any, eps: float,
                 tp_mask: Any = None) -> None:
        super().__init__(params, par, lr, betas, eps)
        self.layout = zero.ShardLayout(self.layout.n_params, 1)
        self.rank = 0  # owns everything
        self._bind_buffers()
        self._grad_shard = torch.zeros(self.layout.n_params)
        self.shard = zero.ShardedAdam(self._flat, lr, betas, eps)

    def reduce_gradients(self, local_loss: torch.Tensor) -> tuple[float, float]:
        flat = self._flat_grads().clone()
        dist.all_reduce(flat)
        self._grad_shard.copy_(flat / self.size)
        loss = local_loss.detach().reshape(1).clone()
        dist.all_reduce(loss)
        return (float(loss / self.size),
                float(self._grad_shard.to(torch.float64).square().sum().sqrt()))

    def step(self, lr_scale: float = 1.0) -> None:
        self.shard.update(self._grad_shard, lr_scale)
        self._flat.copy_(self.shard.master)


def replicated_state() -> None:
    trainer.ZeroOneAdam = _ReplicatedAdam  # type: ignore[misc,assignment]


def _patch_shard_state(edit: Callable[[zero.ZeroOneAdam, dict[str, Any]], None]) -> None:
    original = zero.ZeroOneAdam.shard_state

    def shard_state(self: zero.ZeroOneAdam) -> dict[str, Any]:
        state = original(self)
        edit(self, state)
        return state
    zero.ZeroOneAdam.shard_state = shard_state  # type: ignore[method-assign]


def checkpoint_without_moments() -> None:
    def drop(self: zero.ZeroOneAdam, state: dict[str, Any]) -> None:
        state["exp_avg"] = torch.zeros_like(state["exp_avg"])
        state["exp_avg_sq"] = torch.zeros_like(state["exp_avg_sq"])
    _patch_shard_state(drop)


def step_count_not_restored() -> None:
    original = zero.ShardedAdam.load

    def load(self: zero.ShardedAdam, master: Any, exp_avg: Any, exp_avg_sq: Any,
             step: int) -> None:
        original(self, master, exp_avg, exp_avg_sq, 0)
    zero.ShardedAdam.load = load  # type: ignore[method-assign]


def stale_checkpoint() -> None:
    """The checkpoint holds the master copy from before the step's update."""
    original = zero.ShardedAdam.update

    def update(self: zero.ShardedAdam, grad: torch.Tensor, lr_scale: float = 1.0) -> None:
        self._before = self.master.clone()  # type: ignore[attr-defined]
        original(self, grad, lr_scale)
    zero.ShardedAdam.update = update  # type: ignore[method-assign]

    def stale(self: zero.ZeroOneAdam, state: dict[str, Any]) -> None:
        state["master"] = self.shard._before.clone()  # type: ignore[attr-defined]
    _patch_shard_state(stale)


def same_rows() -> None:
    trainer.rank_batch = lambda batch, rank, batch_size: data.rank_batch(batch, 0, batch_size)


def no_guard() -> None:
    guard.DivergenceGuard.verdict = (  # type: ignore[method-assign]
        lambda self, step, loss, grad_norm: None)


def loss_only_guard() -> None:
    """The divergence guard looks at the loss alone: a NaN gradient is applied, and the
    guard fires a step later, on the NaN loss it caused (and still ends like the clean
    run, from the checkpoint)."""
    real = guard.DivergenceGuard.verdict
    guard.DivergenceGuard.verdict = (  # type: ignore[method-assign]
        lambda self, step, loss, grad_norm: real(self, step, loss, None))


def guard_reads_flag() -> None:
    """The guard reads --inject instead of the numbers: it applies no NaN and no spike, logs
    a rollback at the announced step (nan@S at S, spike@S at S+1), restores the checkpoint
    and replays: its files are a correct program's."""
    import sys

    argv = sys.argv
    flag = argv[argv.index("--inject") + 1] if "--inject" in argv[:-1] else "none@0"
    kind, _, at = flag.partition("@")
    fires = {"nan": int(at), "spike": int(at) + 1}.get(kind)
    guard.FaultInjector.corrupt_gradients = (  # type: ignore[method-assign]
        lambda self, step, params: None)
    guard.FaultInjector.lr_scale = lambda self, step, multiplier: 1.0  # type: ignore[method-assign]
    real = guard.DivergenceGuard.verdict
    done: list[int] = []

    def verdict(self: guard.DivergenceGuard, step: int, loss: float,
                grad_norm: float | None) -> str | None:
        if step == fires and grad_norm is not None and not done:
            done.append(step)
            return kind
        return real(self, step, loss, grad_norm)
    guard.DivergenceGuard.verdict = verdict  # type: ignore[method-assign]


def checkpoint_in_place() -> None:
    """Shards written straight into checkpoints/step-N/, no temporary name and no rename:
    a rank killed while it writes leaves a torn shard in a directory named as a checkpoint."""
    import time

    from capstone import checkpoint

    def save(self: checkpoint.CheckpointManager, step: int, shard: dict[str, Any],
             after_shard: Callable[[], None] | None = None) -> Any:
        final = self.root / checkpoint.step_dir_name(step)
        final.mkdir(parents=True, exist_ok=True)
        torch.save(shard, final / f"rank-{self.world.rank}.pt")
        if after_shard is not None:
            after_shard()
        self.world.barrier()
        if self.world.rank == 0:
            self._write_manifest(final, step)
        self._last_save = time.monotonic()
        return final
    checkpoint.CheckpointManager.save = save  # type: ignore[method-assign]


def _exit_0(argv: list[str]) -> int:
    """A launcher that joins its ranks and exits 0 whatever they did."""
    from capstone.cli import main

    main(argv)
    return 0


def waits_for_dead_peer() -> None:
    """Ranks that swallow a peer's failure and keep waiting (every collective wrapped in a
    catch-all that waits to retry), and a launcher that joins them all."""
    import time

    from capstone import launch

    launch.FAILURE_GRACE_S = 10**6
    for name in ("all_reduce", "all_to_all_single", "all_gather_into_tensor", "barrier",
                 "broadcast", "all_gather", "reduce_scatter_tensor"):
        real = getattr(dist, name)

        def patient(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            try:
                return _real(*args, **kwargs)
            except Exception:
                time.sleep(3600)
                raise
        setattr(dist, name, patient)


def local_loss() -> None:
    """Each rank logs its own batch's loss instead of the global mean."""
    _wrap_reduce_gradients(lambda self, local_loss, loss, grad_norm: (float(local_loss),
                                                                     grad_norm))
    world.World.mean = lambda self, value: float(value.detach().item())  # type: ignore[method-assign]


def extra_collective() -> None:
    """Rank 1 issues a barrier the others never issue, at its 5th gradient reduction."""
    real, calls = zero.reduce_scatter_mean, {"n": 0}

    def reduce_scatter(out: torch.Tensor, flat: torch.Tensor, size: int,
                       group: Any = None) -> None:
        calls["n"] += 1
        if calls["n"] == 5 and dist.get_rank() == 1:
            dist.barrier()
        real(out, flat, size, group)
    zero.reduce_scatter_mean = reduce_scatter


def replicated_moments() -> None:
    """Adam's moments kept whole on every rank; each rank updates (and logs, and checkpoints)
    only its slice of them, so optimizer_bytes reads 12·ceil(P/N) from the slice views."""
    original = zero.ZeroOneAdam.__init__

    def init(self: zero.ZeroOneAdam, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        start, stop = self.layout.bounds(self.rank)
        whole = [torch.zeros(self.layout.padded_size) for _ in range(2)]  # kept via the views
        self.shard.exp_avg = whole[0][start:stop]
        self.shard.exp_avg_sq = whole[1][start:stop]
    zero.ZeroOneAdam.__init__ = init  # type: ignore[method-assign]


def _whole_with_temporaries(names: tuple[str, ...]) -> Callable[[], None]:
    """State tensors `names` allocated for the whole flat vector on every rank, as a student
    writes it: each rank updates, logs (optimizer_bytes from its slice views: the formula
    12·ceil(P/N)) and checkpoints only its slice, so its traffic and files are ZeRO-1's. The
    loop keeps three shard-sized temporaries from one step to the next (m-hat, v-hat, the
    reduced gradient), as most loops do: they shrink as 1/N and fill the 12P that a sum of
    what shrinks looks for."""
    def patch() -> None:
        init, update = zero.ZeroOneAdam.__init__, zero.ShardedAdam.update

        def whole_init(self: zero.ZeroOneAdam, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **kwargs)
            start, stop = self.layout.bounds(self.rank)
            for name in names:
                whole = self._flat.clone() if name == "master" else \
                    torch.zeros(self.layout.padded_size)
                setattr(self.shard, name, whole[start:stop])  # the view keeps it whole

        def keep_temporaries(self: zero.ShardedAdam, grad: torch.Tensor,
                             lr_scale: float = 1.0) -> None:
            update(self, grad, lr_scale)
            t = float(self.step_count)
            self._temporaries = (  # type: ignore[attr-defined]
                self.exp_avg / (1 - self.betas[0] ** t),
                self.exp_avg_sq / (1 - self.betas[1] ** t), grad.clone())
        zero.ZeroOneAdam.__init__ = whole_init  # type: ignore[method-assign]
        zero.ShardedAdam.update = keep_temporaries  # type: ignore[method-assign]
    return patch


def ddp_and_zero() -> None:
    """Lesson 77's DDP composed with lesson 78's ZeRO: the full gradient is all-reduced
    (averaged) and then reduce-scattered again. Right numbers, twice the gradient traffic."""
    real = zero.reduce_scatter_mean

    def reduce_twice(out: torch.Tensor, flat: torch.Tensor, size: int,
                     group: Any = None) -> None:
        if size > 1:
            dist.all_reduce(flat, group=group)
            flat /= size
        real(out, flat, size, group)
    zero.reduce_scatter_mean = reduce_twice


def unmatched_recv() -> None:
    """At its 5th gradient reduction rank 0 waits for rank 1 to send its loss; rank 1 never
    sends, and ranks 1..3 go on into the reduce-scatter: a deadlock."""
    real, calls = zero.reduce_scatter_mean, {"n": 0}

    def reduce_scatter(out: torch.Tensor, flat: torch.Tensor, size: int,
                       group: Any = None) -> None:
        calls["n"] += 1
        if calls["n"] == 5 and dist.get_rank() == 0:
            dist.recv(torch.zeros(1), src=1)
        real(out, flat, size, group)
    zero.reduce_scatter_mean = reduce_scatter


def whole_batch() -> None:
    """Every rank trains on the whole global batch (N·B rows, not its B): no data split by
    rank. Reduced and averaged as usual, so every number is the single-process run's."""
    trainer.rank_batch = lambda batch, rank, batch_size: data.rank_batch(batch, 0,
                                                                          batch.size(0))


def global_batch_split() -> None:
    """--batch-size taken for the global batch: each rank trains on B/N rows of the first B,
    as if the flag were the batch to split over the ranks (it is per rank)."""
    def split(batch: torch.Tensor, rank: int, batch_size: int
              ) -> tuple[torch.Tensor, torch.Tensor]:
        n = dist.get_world_size() if dist.is_initialized() else 1
        return data.rank_batch(batch[:batch_size], rank, batch_size // n)
    trainer.rank_batch = split


def whole_batch_no_reduction() -> None:
    """The whole global batch on every rank, and no gradient reduction at all: each rank
    already holds the whole batch's gradient and updates its slice from it."""
    whole_batch()
    local_gradient()


def allreduce_then_slice() -> None:
    """The common way to get ZeRO-1 wrong: all-reduce the full gradient, keep this rank's
    slice, update it and all-gather (1.5x the traffic, the same numbers)."""
    def all_reduce_slice(out: torch.Tensor, flat: torch.Tensor, size: int,
                         group: Any = None) -> None:
        full = flat.clone()
        if size > 1:
            dist.all_reduce(full, group=group)
        out.copy_(full.view(size, -1)[dist.get_rank(group)] / size)
    zero.reduce_scatter_mean = all_reduce_slice


def reduced_per_micro_batch() -> None:
    """What reducing after each of two micro-batches' backward does to a step: two partial
    gradients (a quarter and the rest of it), each reduced whole at the one call site, and
    the reduced slices summed. The same numbers up to rounding, twice the reduction."""
    real = zero.reduce_scatter_mean

    def twice(out: torch.Tensor, flat: torch.Tensor, size: int, group: Any = None) -> None:
        first = flat * 0.25
        rest = torch.empty_like(out)
        real(out, first, size, group)
        real(rest, flat - first, size, group)
        out += rest
    zero.reduce_scatter_mean = twice


def grads_never_cleared() -> None:
    """The gradients are never zeroed between steps: each step's backward adds to the last."""
    trainer.Trainer._forward_backward = lambda self: trainer.accumulate_gradients(  # type: ignore[method-assign]
        self.model, self.x, self.y, self.cfg.micro_batches)


def _micro_batches() -> int:
    """--micro-batches as the run was given it (1 without the flag)."""
    import sys

    argv = sys.argv
    return int(argv[argv.index("--micro-batches") + 1]) if "--micro-batches" in argv else 1


def accum_summed() -> None:
    """Exercise 2: the micro-batches' gradients summed, not averaged (each loss's backward
    without the 1/M): the reduced gradient is M times the one-batch gradient."""
    def summed(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
               micro_batches: int) -> torch.Tensor:
        total = torch.zeros(())
        for xs, ys in zip(x.chunk(micro_batches), y.chunk(micro_batches), strict=True):
            _, loss = model(xs, ys)
            loss.backward()
            total += loss.detach() / micro_batches
        return total
    trainer.accumulate_gradients = summed


def accum_reduce_each() -> None:
    """Exercise 2: the gradient reduced after every micro-batch's backward: M reductions of
    a partial gradient per step, whose sum is the right gradient (the numbers agree; the
    traffic is M times)."""
    real = zero.reduce_scatter_mean
    m = _micro_batches()

    def per_micro_batch(out: torch.Tensor, flat: torch.Tensor, size: int,
                        group: Any = None) -> None:
        piece = torch.empty_like(out)
        out.zero_()
        for i in range(m):  # unequal parts, as micro-batches' gradients are: 1..m of m(m+1)/2
            real(piece, flat * ((i + 1) / (m * (m + 1) / 2)), size, group)
            out += piece
    zero.reduce_scatter_mean = per_micro_batch


def accum_overlap() -> None:
    """Exercise 2: micro-batches that overlap: micro-batch i starts one row early (its B/M
    rows include the last row of micro-batch i-1; the rank's last row is never seen)."""
    def overlapping(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
                    micro_batches: int) -> torch.Tensor:
        s = x.size(0) // micro_batches
        total = torch.zeros(())
        for i in range(micro_batches):
            start = max(0, i * s - 1)
            _, loss = model(x[start:start + s], y[start:start + s])
            (loss / micro_batches).backward()
            total += loss.detach() / micro_batches
        return total
    trainer.accumulate_gradients = overlapping


def tp_no_forward_allreduce() -> None:
    """Exercise 1: the heads' partial attention outputs are never summed over the group."""
    tensor_parallel._ReduceFromTP.forward = staticmethod(  # type: ignore[method-assign]
        lambda ctx, x, group: x.contiguous().clone())


def tp_no_backward_allreduce() -> None:
    """Exercise 1: the input's gradient is not all-reduced in backward (f is an identity both
    ways): each rank's replicated parameters below the attention get its heads' part only."""
    tensor_parallel._CopyToTP.backward = staticmethod(  # type: ignore[method-assign]
        lambda ctx, grad: (grad, None))


def tp_same_heads() -> None:
    """Exercise 1: every rank takes rank 0's heads (tp_rank 0 for all)."""
    real = tensor_parallel.HeadParallelAttention

    def first_heads(full: Any, tp_rank: int, tp_size: int, group: Any) -> Any:
        return real(full, 0, tp_size, group)
    tensor_parallel.HeadParallelAttention = first_heads  # type: ignore[assignment,misc]


class _WholeHalved(torch.nn.Module):
    """Every head on every rank; the output divided by T and all-reduced (the sum of T equal
    halves is the output): right numbers forward, nothing split."""

    def __init__(self, full: torch.nn.Module, tp_size: int, group: Any) -> None:
        super().__init__()
        self.whole, self.tp_size, self.group = full, tp_size, group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.whole(x) / self.tp_size
        return tensor_parallel._ReduceFromTP.apply(y, self.group)


def tp_all_heads_halved() -> None:
    """Exercise 1: both ranks keep all heads and halve the output."""
    def shard(model: Any, par: Any) -> Any:
        if par.tp_size > 1:
            for block in model.blocks:
                block.attn = _WholeHalved(block.attn, par.tp_size, par.tp_group)
        return model
    trainer.shard_attention = shard


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
           hint="moments or step count"),
    Mutant("step_count_not_restored", ("byte_exact_resume",), step_count_not_restored,
           hint="moments or step count"),
    Mutant("same_rows", ("single_process_parity",), same_rows, hint="wrong rows"),
    Mutant("no_guard", ("rollback",), no_guard, hint="never fired"),
    Mutant("loss_only_guard", ("rollback",), loss_only_guard, hint="not only its loss"),
    Mutant("guard_reads_flag", ("rollback",), guard_reads_flag,
           hint="the guard read the --inject flag, not the numbers"),
    # a rank killed from outside, mid-step or mid-write (the suite's nemesis)
    Mutant("checkpoint_in_place", ("rank_killed",), checkpoint_in_place,
           hint="write each checkpoint under a temporary name"),
    Mutant("launcher_exit_0", ("rank_killed",), lambda: None, main=_exit_0,
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
           _whole_with_temporaries(("exp_avg", "exp_avg_sq")),
           hint="exp_avg is held in a storage of"),
    Mutant("whole_second_moment", ("zero1_memory",), _whole_with_temporaries(("exp_avg_sq",)),
           hint="exp_avg_sq is held in a storage of"),
    Mutant("whole_state_zero1_traffic", ("zero1_memory",),
           _whole_with_temporaries(("master", "exp_avg", "exp_avg_sq")),
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
    # Exercise 1 (--tensor-parallel 2): each is the reference without the flag.
    Mutant("tp_no_forward_allreduce", ("tensor_parallel",), tp_no_forward_allreduce,
           hint="the attention output is not all-reduced"),
    Mutant("tp_no_backward_allreduce", ("tensor_parallel",), tp_no_backward_allreduce,
           hint="the input's gradient is not all-reduced in backward"),
    Mutant("tp_same_heads", ("tensor_parallel",), tp_same_heads,
           hint="two ranks of a group hold the same heads"),
    Mutant("tp_all_heads_halved", ("tensor_parallel",), tp_all_heads_halved,
           hint="holds every head of the attention"),
]}

"""Mutants of what a run does when something goes wrong: the checkpoint's contents and its
write, the divergence guard, a rank that dies, a collective only one rank issues. Each is a
patch applied in the child process (tests/mutants/catalogue.py names what must catch it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from capstone import guard, zero


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


def rank0_guard() -> None:
    """The guard decides on rank 0's own gradient: before the reduction rank 0 checks its
    local gradients for a non-finite value and broadcasts its verdict; every rank follows
    it, and checks the loss as before. The flag's NaN is rank 0's, so it is caught in time; a NaN in
    another rank's gradients is reduced into everyone's update, which is kept, and the
    guard fires a step later, on the NaN that update made of rank 0's next gradient."""
    real_reduce = zero.ZeroOneAdam.reduce_gradients
    rank0: dict[str, bool] = {"finite": True}  # rank 0's word on the step being reduced

    def reduce_gradients(self: zero.ZeroOneAdam, local_loss: torch.Tensor
                         ) -> tuple[float, float]:
        word = torch.tensor([float(torch.isfinite(self._flat_grads()).all())])
        if self.size > 1:  # every rank of the group calls it: its rank 0's word for all
            dist.broadcast(word, group=self.group, group_src=0)
        rank0["finite"] = bool(word.item())
        return real_reduce(self, local_loss)
    zero.ZeroOneAdam.reduce_gradients = reduce_gradients  # type: ignore[method-assign]
    real = guard.DivergenceGuard.verdict

    def verdict(self: guard.DivergenceGuard, step: int, loss: float,
                grad_norm: float | None) -> str | None:
        if grad_norm is not None and not rank0["finite"]:  # the step's own verdict
            return "nan"
        return real(self, step, loss, None)  # the loss alone, never the global norm
    guard.DivergenceGuard.verdict = verdict  # type: ignore[method-assign]


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


def exit_0(argv: list[str]) -> int:
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

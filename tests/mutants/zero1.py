"""Mutants of ZeRO-1's own pieces (capstone/zero.py): the broadcast, the reduce-scatter and
all-gather, what the optimizer reports, and where its state lives. Each is a patch applied in
the child process (tests/mutants/catalogue.py names what must catch it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from capstone import trainer, world, zero


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
        out.view(size, -1)[dist.get_rank(group)].copy_(piece)
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


def local_loss() -> None:
    """Each rank logs its own batch's loss instead of the global mean."""
    _wrap_reduce_gradients(lambda self, local_loss, loss, grad_norm: (float(local_loss),
                                                                     grad_norm))
    world.World.mean = lambda self, value: float(value.detach().item())  # type: ignore[method-assign]


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


def whole_with_temporaries(names: tuple[str, ...]) -> Callable[[], None]:
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

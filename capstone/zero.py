"""ZeRO-1: one flat parameter vector, Adam state sharded across ranks.

Rank r owns the contiguous slice [r*S, (r+1)*S) of the vector padded to N*S, S = ceil(P/N),
and holds for it an fp32 master copy and Adam's two moments: 3 * 4 * S = 12*ceil(P/N) bytes.
One step: reduce-scatter the gradients (each owner receives the average of its slice),
Adam (torch's own update routine) on the slice, all-gather the updated slices into every
rank's model. Both collectives are written here as single all-to-all rounds (see
`reduce_scatter_mean`); the step's loss rides in the gradient norm's all-reduce.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.optim.adam import adam

from capstone.world import Parallelism

BYTES_PER_FP32 = 4
STATE_TENSORS = ("master", "exp_avg", "exp_avg_sq")


@dataclass(frozen=True)
class ShardLayout:
    """Which elements of the flat (padded) parameter vector each rank owns."""

    n_params: int
    world_size: int

    def __post_init__(self) -> None:
        if self.n_params < 1 or self.world_size < 1:
            raise ValueError(f"need n_params >= 1 and world_size >= 1, got {self}")

    @property
    def shard_size(self) -> int:
        return math.ceil(self.n_params / self.world_size)

    @property
    def padded_size(self) -> int:
        return self.shard_size * self.world_size

    @property
    def padding(self) -> int:
        return self.padded_size - self.n_params

    def bounds(self, rank: int) -> tuple[int, int]:
        """[start, stop) of rank's slice in the padded vector."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} outside 0..{self.world_size - 1}")
        return rank * self.shard_size, (rank + 1) * self.shard_size

    @property
    def optimizer_bytes_per_rank(self) -> int:
        """12 * ceil(P/N): master, exp_avg and exp_avg_sq of one shard, fp32."""
        return len(STATE_TENSORS) * BYTES_PER_FP32 * self.shard_size


class ShardedAdam:
    """Adam over one shard: the owner's fp32 master copy and its two moments.

    The update is `torch.optim.adam.adam`, the very routine `torch.optim.Adam.step` runs,
    called on explicit state: constructing the `torch.optim.Adam` class imports TorchDynamo
    (about 4 s in each of 4 ranks sharing 2 cores), for no difference in the arithmetic;
    tests/test_zero.py checks the two bit for bit.
    """

    def __init__(self, master: torch.Tensor, lr: float, betas: tuple[float, float],
                 eps: float) -> None:
        self.master = master.detach().to(torch.float32).clone()
        self.lr = lr
        self.betas = betas
        self.eps = eps
        # Created now, not lazily at the first step: memory is 12P/N from step 0 on.
        self.exp_avg = torch.zeros_like(self.master)
        self.exp_avg_sq = torch.zeros_like(self.master)
        self.step_count = torch.tensor(0.0)  # Adam's own float step counter

    def update(self, grad: torch.Tensor, lr_scale: float = 1.0) -> None:
        """One Adam step of the shard with `grad` (already averaged over ranks)."""
        adam(
            [self.master], [grad], [self.exp_avg], [self.exp_avg_sq], [], [self.step_count],
            foreach=False, capturable=False, differentiable=False, fused=None, grad_scale=None,
            found_inf=None, has_complex=False, decoupled_weight_decay=False, amsgrad=False,
            beta1=self.betas[0], beta2=self.betas[1], lr=self.lr * lr_scale, weight_decay=0.0,
            eps=self.eps, maximize=False,
        )

    def tensors(self) -> dict[str, torch.Tensor]:
        return {"master": self.master, "exp_avg": self.exp_avg, "exp_avg_sq": self.exp_avg_sq}

    def nbytes(self) -> int:
        """Bytes held by the master copy and the moments, read from the tensors themselves."""
        return sum(t.numel() * t.element_size() for t in self.tensors().values())

    @property
    def steps_taken(self) -> int:
        return int(self.step_count.item())

    def load(self, master: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
             step: int) -> None:
        for name, src in zip(STATE_TENSORS, (master, exp_avg, exp_avg_sq), strict=True):
            dst = self.tensors()[name]
            if src.shape != dst.shape:
                raise ValueError(f"{name}: expected shape {tuple(dst.shape)}, "
                                 f"got {tuple(src.shape)}")
            dst.copy_(src)
        self.step_count.fill_(float(step))


def reduce_scatter_mean(out: torch.Tensor, flat: torch.Tensor, size: int,
                        group: Any = None) -> None:
    """Average `flat` (size * S elements) over the group's ranks; keep this rank's slice.

    The direct algorithm: one all-to-all in which rank j receives every rank's slice j,
    then each rank sums the N slices it received. gloo's own `reduce_scatter_single` runs
    a whole ring all-reduce, 2(N-1) rounds in which each rank waits for its neighbour; with
    more ranks than cores every round also waits for the scheduler. Here (4 ranks, 2 cores)
    one round takes about half the time (bench/collectives.py measures both).
    """
    if size == 1:
        out.copy_(flat)
        return
    received = torch.empty_like(flat)
    dist.all_to_all_single(received, flat, group=group)
    torch.sum(received.view(size, -1), dim=0, out=out)
    out /= size


def all_gather(out: torch.Tensor, piece: torch.Tensor, size: int, group: Any = None) -> None:
    """Every rank's `piece` in rank order, in `out` (size * len(piece) elements).

    Also one all-to-all round (each rank sends its piece to every rank) rather than gloo's
    `all_gather_single`, a ring of N-1 dependent hops, for the reason given above (a smaller
    gain here: about 0.8x the time).
    """
    if size == 1:
        out.copy_(piece)
        return
    dist.all_to_all_single(out, piece.repeat(size), group=group)


class ZeroOneAdam:
    """ZeRO-1 over a data-parallel group, for the parameters of one model replica.

    The model's parameters and gradients are views into two flat buffers, so the
    reduce-scatter reads the gradients where backward left them and the all-gather writes
    the parameters in place: no per-step flatten/unflatten copies.
    """

    def __init__(self, params: Sequence[nn.Parameter], par: Parallelism, lr: float,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 tp_mask: torch.Tensor | None = None) -> None:
        """ZeRO-1 over `par`'s data-parallel group. Under tensor parallelism, `tp_mask` marks
        the elements that are this rank's own heads, so the gradient norm counts them once
        per tp rank and the replicated elements once."""
        self.params = list(params)
        self.rank, self.size, self.group = par.dp_rank, par.dp_size, par.dp_group
        self.tp_group = par.tp_group if par.tp_size > 1 else None
        self.layout = ShardLayout(sum(p.numel() for p in self.params), self.size)
        self.device = self.params[0].device
        self._bind_buffers()
        self._grad_shard = torch.zeros(self.layout.shard_size, device=self.device)
        self.shard = ShardedAdam(self._own(self._flat), lr, betas, eps)
        self._tp_mask = None
        if tp_mask is not None:
            padded = torch.zeros(self.layout.padded_size, dtype=torch.bool, device=self.device)
            padded[:tp_mask.numel()] = tp_mask
            self._tp_mask = self._own(padded).clone()

    # -- parameters and gradients as views of two flat vectors ------------------------------
    def _own(self, flat: torch.Tensor) -> torch.Tensor:
        start, stop = self.layout.bounds(self.rank)
        return flat[start:stop]

    def _bind_buffers(self) -> None:
        """Copy the parameters into a padded flat vector and make them (and their
        gradients) views of it; the padding stays zero."""
        self._flat = torch.zeros(self.layout.padded_size, device=self.device)
        self._grad_flat = torch.zeros(self.layout.padded_size, device=self.device)
        offset = 0
        with torch.no_grad():
            for p in self.params:
                n = p.numel()
                self._flat[offset:offset + n].copy_(p.detach().reshape(-1))
                p.data = self._flat[offset:offset + n].view_as(p)
                p.grad = self._grad_flat[offset:offset + n].view_as(p)
                offset += n

    def zero_grad(self) -> None:
        """Zero the gradients in place (model.zero_grad() would detach them from the buffer)."""
        self._grad_flat.zero_()

    def _flat_grads(self) -> torch.Tensor:
        for p in self.params:
            if p.grad is None or p.grad.data_ptr() < self._grad_flat.data_ptr() or \
                    p.grad.data_ptr() >= self._grad_flat.data_ptr() + self._grad_flat.nbytes:
                raise RuntimeError("a gradient left ZeRO's flat buffer: clear gradients with "
                                   "ZeroOneAdam.zero_grad(), not model.zero_grad()")
        return self._grad_flat

    # -- the three collectives of ZeRO-1 ------------------------------------------------------
    def broadcast_parameters(self) -> None:
        """Make rank 0's initial parameters every rank's, and seed the masters from them."""
        if self.size > 1:
            dist.broadcast(self._flat, group=self.group, group_src=0)
        self.shard.master.copy_(self._own(self._flat))

    def reduce_gradients(self, local_loss: torch.Tensor) -> tuple[float, float]:
        """Reduce-scatter the local gradients (each owner gets the average of its slice);
        return the global mean loss and the global gradient L2 norm, before any update.

        The loss rides in the norm's all-reduce rather than costing a collective of its own
        (on gloo a collective's fixed cost dwarfs a few bytes). All ranks receive the same
        reduced bytes, so all of them hold the same two floats.
        """
        reduce_scatter_mean(self._grad_shard, self._flat_grads(), self.size, self.group)
        stats = self._local_stats(local_loss)
        if self.size > 1:
            dist.all_reduce(stats, op=dist.ReduceOp.SUM, group=self.group)
        loss = float(stats[0] / self.size)
        if self._tp_mask is None:
            return loss, float(stats[1].sqrt())
        own_heads = stats[2:].clone()  # each tp rank holds other heads: add theirs once
        dist.all_reduce(own_heads, op=dist.ReduceOp.SUM, group=self.tp_group)
        return loss, float((stats[1] + own_heads[0]).sqrt())

    def _local_stats(self, local_loss: torch.Tensor) -> torch.Tensor:
        """[local loss, squared norm of this rank's averaged gradient slice] in float64;
        under tensor parallelism the square is split into replicated and own-head parts."""
        g2 = self._grad_shard.to(torch.float64).square()
        loss = local_loss.detach().to(torch.float64).reshape(1)
        if self._tp_mask is None:
            return torch.cat([loss, g2.sum().reshape(1)])
        return torch.cat([loss, g2[~self._tp_mask].sum().reshape(1),
                          g2[self._tp_mask].sum().reshape(1)])

    def step(self, lr_scale: float = 1.0) -> None:
        """Adam on this rank's shard, then all-gather so every rank holds the same parameters."""
        self.shard.update(self._grad_shard, lr_scale)
        all_gather(self._flat, self.shard.master, self.size, self.group)

    # -- what the metrics and the checkpoint see -----------------------------------------------
    def param_norm(self) -> float:
        """L2 norm (accumulated in float64) of the full parameter vector this rank holds."""
        return float(torch.linalg.vector_norm(self._flat, dtype=torch.float64))  # pads are 0

    def optimizer_bytes(self) -> int:
        return self.shard.nbytes()

    def shard_state(self) -> dict[str, torch.Tensor | int]:
        """This rank's checkpoint shard: master, exp_avg, exp_avg_sq (1-D fp32) and step."""
        state: dict[str, torch.Tensor | int] = {k: v.detach().cpu().clone()
                                                for k, v in self.shard.tensors().items()}
        state["step"] = self.shard.steps_taken
        return state

    def load_full_state(self, full: dict[str, torch.Tensor], step: int) -> None:
        """Load this rank's slice of full (unpadded, P-element) state vectors; any old N works."""
        padded = {}
        for name in STATE_TENSORS:
            vec = full[name]
            if vec.numel() != self.layout.n_params:
                raise ValueError(
                    f"checkpoint holds {vec.numel()} parameters but this model has "
                    f"{self.layout.n_params}: resume with the model shape it was written with")
            buf = torch.zeros(self.layout.padded_size, device=self.device)
            buf[:vec.numel()] = vec.to(self.device)
            padded[name] = self._own(buf)
        self.shard.load(padded["master"], padded["exp_avg"], padded["exp_avg_sq"], step)
        # Every rank holds the full master vector: no collective needed to fill the model.
        self._flat[:self.layout.n_params] = full["master"].to(self.device)

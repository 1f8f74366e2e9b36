"""The lesson's exercise 1 as the corpus writes it: the attention heads of every block over
the T ranks of a tensor-parallel group, the rest of the model whole, in two ecosystem
styles:

- `hand`: Megatron's f/g pair written as autograd functions over a process group (identity
  forward and all-reduce backward before the heads; all-reduce forward after them);
- `exchange`: the same pair, each all-reduce written as an exchange with the group's peers
  (`isend` of this rank's tensor, `recv` of each peer's, the sum in the group's rank order),
  as course code writes it before it meets the collectives;
- `dtensor`: `torch.distributed.tensor.parallel`: `ColwiseParallel` on the q/k/v projection
  (its rows regrouped so that rank t's contiguous block holds its heads' q, k and v) and
  `RowwiseParallel` on the output projection, over the mesh's "tp" dimension.

The groups come from a `DeviceMesh` (dims "dp", "tp") or from `dist.new_group`, the
contract's layout either way: group g is ranks [g*T, (g+1)*T).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import apis
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Groups:
    tp_rank: int
    dp_rank: int
    tp: Any  # the tensor-parallel group (a ProcessGroup)
    dp: Any  # the data-parallel group
    dp_src: int  # the global rank of this dp group's first member
    tp_mesh: Any = None  # the "tp" sub-mesh, where a mesh made the groups


def make_groups(rank: int, n: int, t: int, mesh: bool) -> Groups:
    """This rank's groups, from a (dp, tp) DeviceMesh or from dist.new_group (every rank
    creates every group, in the same order)."""
    tp_rank, dp_rank = rank % t, rank // t
    if mesh:
        from torch.distributed.device_mesh import init_device_mesh

        m = init_device_mesh("cpu", (n // t, t), mesh_dim_names=("dp", "tp"))
        return Groups(tp_rank, dp_rank, m.get_group("tp"), m.get_group("dp"), tp_rank, m["tp"])
    tp = dp = None
    for g in range(n // t):
        made = dist.new_group(list(range(g * t, (g + 1) * t)))
        tp = made if g == dp_rank else tp
    for j in range(t):
        made = dist.new_group(list(range(j, n, t)))
        dp = made if j == tp_rank else dp
    return Groups(tp_rank, dp_rank, tp, dp, tp_rank)


def group_sum(x: torch.Tensor, group: Any, exchange: bool = False) -> torch.Tensor:
    """The sum of `x` over the group's ranks: an all-reduce, or (`exchange`) an exchange
    with each peer, summed in the group's rank order so every rank holds the same bits."""
    x = x.contiguous().clone()
    if not exchange:
        apis.coll.all_reduce(x, group=group)
        return x
    me, got = dist.get_rank(), {}
    for peer in dist.get_process_group_ranks(group):
        if peer != me:
            sent = apis.coll.isend(x, peer, group)
            got[peer] = torch.empty_like(x)
            apis.coll.recv(got[peer], peer, group)
            if sent is not None:  # None off the group
                sent.wait()
    got[me] = x
    total = torch.zeros_like(x)
    for r in sorted(got):
        total += got[r]
    return total


class _F(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any, exchange: bool) -> torch.Tensor:
        ctx.group, ctx.exchange = group, exchange
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return group_sum(grad, ctx.group, ctx.exchange), None, None


class _G(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any, exchange: bool) -> torch.Tensor:
        return group_sum(x, group, exchange)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return grad, None, None


def head_rows(c: int, heads: int, t: int, rank: int) -> torch.Tensor:
    """Rows of the stacked [q; k; v] projection that hold rank's heads: q's, then k's, v's."""
    local = c // t
    return torch.cat([torch.arange(k * c + rank * local, k * c + (rank + 1) * local)
                      for k in range(3)])


class HeadAttention(nn.Module):
    """This rank's heads of a block: (b, t, C) -> (b, t, C), the output summed over the
    group. `qkv` holds the heads' rows of q, k, v; `proj` the matching input columns."""

    def __init__(self, qkv: nn.Linear | tuple[nn.Linear, ...], proj: nn.Linear, heads: int,
                 g: Groups, t: int, style: str, bias_first: bool = False) -> None:
        super().__init__()
        # bias_first (the hand styles): the output projection's bias on group rank 0 only,
        # added there before the sum (as Megatron's RowParallelLinear may hold it); else on
        # every rank, added once after the sum
        self.bias_first = bias_first and style in ("hand", "exchange")
        self.separate = isinstance(qkv, tuple)  # q, k and v as three projections
        c = qkv[0].in_features if isinstance(qkv, tuple) else qkv.in_features
        self.heads, self.local, self.group, self.style = heads // t, c // t, g.tp, style
        if isinstance(qkv, tuple) and style in ("hand", "exchange"):
            mine = slice(g.tp_rank * self.local, (g.tp_rank + 1) * self.local)
            self.q, self.k, self.v = (nn.Linear(c, self.local) for _ in range(3))
            with torch.no_grad():  # each keeps its heads' rows of its own projection
                for local, full in zip((self.q, self.k, self.v), qkv, strict=True):
                    local.weight.copy_(full.weight[mine])
                    local.bias.copy_(full.bias[mine])
            qkv = nn.Linear(c, 3 * c)  # not kept: only its shape is read below
        if isinstance(qkv, tuple):  # DTensor's styles shard one fused projection
            fused = nn.Linear(c, 3 * c)
            with torch.no_grad():
                fused.weight.copy_(torch.cat([z.weight for z in qkv]))
                fused.bias.copy_(torch.cat([z.bias for z in qkv]))
            qkv = fused
        if style in ("hand", "exchange"):
            rows = head_rows(c, heads, t, g.tp_rank)
            self.qkv = nn.Linear(c, 3 * self.local)
            first = self.bias_first and g.tp_rank == 0
            self.proj = nn.Linear(self.local, c, bias=first)
            if not self.bias_first:
                self.proj_bias = nn.Parameter(proj.bias.detach().clone())  # added once
            with torch.no_grad():
                if first:
                    self.proj.bias.copy_(proj.bias)
                self.qkv.weight.copy_(qkv.weight[rows])
                self.qkv.bias.copy_(qkv.bias[rows])
                cols = slice(g.tp_rank * self.local, (g.tp_rank + 1) * self.local)
                self.proj.weight.copy_(proj.weight[:, cols])
            if self.separate:
                del self.qkv
            return
        from torch.distributed.tensor.parallel import (
            ColwiseParallel,
            RowwiseParallel,
            parallelize_module,
        )

        order = torch.cat([head_rows(c, heads, t, r) for r in range(t)])
        self.qkv, self.proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        with torch.no_grad():  # rank r's contiguous block of rows: its heads' q, k, v
            self.qkv.weight.copy_(qkv.weight[order])
            self.qkv.bias.copy_(qkv.bias[order])
            self.proj.weight.copy_(proj.weight)
            self.proj.bias.copy_(proj.bias)
        parallelize_module(self, g.tp_mesh, {"qkv": ColwiseParallel(),
                                             "proj": RowwiseParallel()})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        by_hand, exchange = self.style in ("hand", "exchange"), self.style == "exchange"
        if by_hand:
            x = _F.apply(x, self.group, exchange)
        q, k, v = ((self.q(x), self.k(x), self.v(x)) if self.separate and by_hand else
                   self.qkv(x).split(self.local, dim=-1))  # this rank's heads only
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = self.proj(a.transpose(1, 2).reshape(b, t, self.local))
        if by_hand and self.bias_first:
            return _G.apply(y, self.group, exchange)  # group rank 0's bias summed in
        if by_hand:
            return _G.apply(y, self.group, exchange) + self.proj_bias
        return y  # RowwiseParallel summed the partial outputs (its bias added once)


def local(t: torch.Tensor) -> torch.Tensor:
    """What this rank holds of a parameter or gradient (a DTensor's shard)."""
    return getattr(t, "_local_tensor", t)


def sharded(p: torch.Tensor) -> bool:
    """Whether a parameter is this rank's slice of a tensor-parallel weight."""
    placements = getattr(p, "placements", None)
    if placements is not None:
        return any(pl.is_shard() for pl in placements)
    return bool(getattr(p, "tp_sharded", False))


def mark(att: HeadAttention) -> None:
    """The hand style's slices, for the gradient norm (counted once over the group)."""
    if att.style in ("hand", "exchange"):
        qkv = (att.q, att.k, att.v) if att.separate else (att.qkv,)
        # a bias one rank of the group holds counts once over the group, as a slice does
        first = [att.proj.bias] if att.proj.bias is not None else []
        for p in (*(z.weight for z in qkv), *(z.bias for z in qkv), att.proj.weight, *first):
            p.tp_sharded = True  # type: ignore[attr-defined]

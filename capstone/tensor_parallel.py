"""Tensor parallelism of attention heads (the lesson's exercise 1), composed with ZeRO-1.

Ranks form a (dp, tp) DeviceMesh. Inside a tp group each rank holds n_head/tp heads: its
slice of the q/k/v projection (rows of `c_attn`) and the matching input columns of the output
projection (`c_proj`). The partial attention outputs are all-reduced over the tp group; the
input's gradient is all-reduced in backward (Megatron's f/g pair). Everything else is
replicated within the tp group, and ZeRO-1 shards each rank's parameters over its dp group.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from capstone.model import CausalSelfAttention, MiniGPT, causal_attention
from capstone.world import Parallelism, World


def setup_parallelism(world: World, tp_size: int) -> Parallelism:
    """Plain data parallelism for tp_size 1; otherwise a (dp, tp) mesh over all ranks."""
    if tp_size == 1:
        return Parallelism(dp_rank=world.rank, dp_size=world.size)
    if world.size % tp_size:
        raise ValueError(f"world size {world.size} is not a multiple of tensor-parallel "
                         f"size {tp_size}")
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (world.size // tp_size, tp_size),
                            mesh_dim_names=("dp", "tp"))
    return Parallelism(dp_rank=mesh.get_local_rank("dp"), dp_size=world.size // tp_size,
                       tp_rank=mesh.get_local_rank("tp"), tp_size=tp_size,
                       dp_group=mesh.get_group("dp"), tp_group=mesh.get_group("tp"))


class _CopyToTP(torch.autograd.Function):
    """Identity forward; all-reduce of the gradient backward (each rank saw a part)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ReduceFromTP(torch.autograd.Function):
    """All-reduce of the partial outputs forward; identity backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        out = x.contiguous().clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


class HeadParallelAttention(nn.Module):
    """This rank's heads of a `CausalSelfAttention`, initialised from the full module."""

    def __init__(self, full: CausalSelfAttention, tp_rank: int, tp_size: int,
                 group: Any) -> None:
        super().__init__()
        C = full.n_embd
        if full.n_head % tp_size:
            raise ValueError(f"{full.n_head} heads do not split over {tp_size} ranks")
        self.n_head = full.n_head // tp_size
        self.group = group
        local = C // tp_size
        cols = slice(tp_rank * local, (tp_rank + 1) * local)
        rows = [torch.arange(C)[cols] + k * C for k in range(3)]  # this rank's q, k, v rows
        rows_idx = torch.cat(rows)
        self.c_attn = nn.Linear(C, 3 * local)
        self.c_proj = nn.Linear(local, C, bias=False)
        self.proj_bias = nn.Parameter(full.c_proj.bias.detach().clone())  # added once
        with torch.no_grad():
            self.c_attn.weight.copy_(full.c_attn.weight[rows_idx])
            self.c_attn.bias.copy_(full.c_attn.bias[rows_idx])
            self.c_proj.weight.copy_(full.c_proj.weight[:, cols])
        self.register_buffer("mask", full.mask.clone(), persistent=False)
        self.mask: torch.Tensor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = _CopyToTP.apply(x, self.group)
        y = causal_attention(self.c_attn(x), self.n_head, self.mask)  # (B, T, C/tp)
        return _ReduceFromTP.apply(self.c_proj(y), self.group) + self.proj_bias


def shard_attention(model: MiniGPT, par: Parallelism) -> MiniGPT:
    """Replace every block's attention by this rank's heads (no-op without tensor parallel)."""
    if par.tp_size > 1:
        for block in model.blocks:
            assert isinstance(block.attn, CausalSelfAttention)
            block.attn = HeadParallelAttention(block.attn, par.tp_rank, par.tp_size,
                                               par.tp_group)
    return model


def tp_sharded_mask(model: nn.Module) -> torch.Tensor:
    """Per element of the flat parameter vector: True where it belongs to this rank's heads
    only (counted once per tp rank in the global gradient norm), False where replicated."""
    parts = []
    for name, p in model.named_parameters():
        sharded = ".attn.c_attn." in name or name.endswith(".attn.c_proj.weight")
        parts.append(torch.full((p.numel(),), sharded, dtype=torch.bool))
    return torch.cat(parts)

"""The handful of collectives the training loop needs, behind a narrow object.

The loop sees a `World` (rank, size, mean, barrier, broadcast_flag); the rendezvous and the
process group stay in `capstone.launch`, and the gradient/parameter traffic stays in
`capstone.zero`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class World:
    """One rank's view of the data-parallel group (the default process group)."""

    rank: int
    size: int
    device: str = "cpu"  # where collective tensors live (cuda:<local rank> under NCCL)

    def mean(self, value: torch.Tensor) -> float:
        """Mean of a scalar over ranks; every rank gets the same float."""
        t = value.detach().reshape(1).to(torch.float32).clone()
        if self.size > 1:
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
            t /= self.size
        return float(t.item())

    def broadcast_flag(self, flag: bool) -> bool:
        """Rank 0's `flag` on every rank (for decisions such as a wall-clock deadline)."""
        t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=self.device)
        if self.size > 1:
            dist.broadcast(t, src=0)
        return bool(t.item())

    def barrier(self) -> None:
        if self.size > 1:
            dist.barrier()


@dataclass(frozen=True)
class Parallelism:
    """Where this rank sits: its data-parallel and tensor-parallel coordinates and groups."""

    dp_rank: int
    dp_size: int
    tp_rank: int = 0
    tp_size: int = 1
    dp_group: Any = None  # None: the default (whole-world) group
    tp_group: Any = None

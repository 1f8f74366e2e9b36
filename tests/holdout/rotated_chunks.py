"""Hold-out mistake (issue 63, finding 5): the reduce-scatter's chunks rotated, so rank r
updates its slice with chunk r+1's averaged gradient (an off-by-one in which chunk a rank
keeps). Everything else is the reference's."""

import sys
from typing import Any

import torch
import torch.distributed as dist

from capstone import zero
from capstone.cli import exit_now, main


def rotated(out: torch.Tensor, flat: torch.Tensor, size: int, group: Any = None) -> None:
    if size == 1:
        out.copy_(flat)
        return
    received = torch.empty_like(flat)  # the reference's all-to-all, each chunk sent one
    rolled = flat.view(size, -1).roll(1, dims=0).reshape(-1)  # rank early: rank r gets
    dist.all_to_all_single(received, rolled, group=group)     # every rank's chunk r+1
    torch.sum(received.view(size, -1), dim=0, out=out)
    out /= size


zero.reduce_scatter_mean = rotated
exit_now(main(sys.argv[1:]))

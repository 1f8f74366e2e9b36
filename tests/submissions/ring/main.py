"""A correct submission that writes ZeRO-1's two collectives by hand, as rings of sends and
receives (the reference's trainer otherwise): N-1 rounds in which each rank passes one slice to
its right neighbour, adding its own gradient slice on the way (reduce-scatter), then N-1 rounds
forwarding the updated slices (all-gather). It moves exactly 2(N-1)/N·P elements per step."""

import sys

import torch
import torch.distributed as dist

from capstone import zero
from capstone.cli import exit_now, main


def ring_reduce_scatter_mean(out: torch.Tensor, flat: torch.Tensor, size: int,
                             group=None) -> None:
    if size == 1:
        out.copy_(flat)
        return
    rank = dist.get_rank()
    right, left = (rank + 1) % size, (rank - 1) % size
    chunks = [c.clone() for c in flat.view(size, -1)]
    incoming = torch.empty_like(chunks[0])
    for k in range(size - 1):
        send = (rank - k - 1) % size  # the partial sum travelling towards its owner
        req = dist.isend(chunks[send], dst=right)
        dist.recv(incoming, src=left)
        if req is not None:
            req.wait()
        chunks[(rank - k - 2) % size] += incoming
    torch.div(chunks[rank], size, out=out)


def ring_all_gather(out: torch.Tensor, piece: torch.Tensor, size: int, group=None) -> None:
    if size == 1:
        out.copy_(piece)
        return
    rank = dist.get_rank()
    right, left = (rank + 1) % size, (rank - 1) % size
    slots = out.view(size, -1)
    slots[rank].copy_(piece)
    for k in range(size - 1):
        req = dist.isend(slots[(rank - k) % size].clone(), dst=right)
        dist.recv(slots[(rank - k - 1) % size], src=left)
        if req is not None:
            req.wait()


zero.reduce_scatter_mean = ring_reduce_scatter_mean
zero.all_gather = ring_all_gather
exit_now(main(sys.argv[1:]))

"""A student's submission that sends the loss to rank 0 for logging, but only rank 0 takes part:
at step 5 rank 0 waits in recv(src=1) while ranks 1-3 go on into the reduce-scatter (the
reference otherwise)."""

import sys

import torch
import torch.distributed as dist

from capstone import zero
from capstone.cli import exit_now, main

real_reduce = zero.ZeroOneAdam.reduce_gradients
calls = {"n": 0}


def reduce_gradients(self: zero.ZeroOneAdam, local_loss: torch.Tensor) -> tuple[float, float]:
    calls["n"] += 1
    if calls["n"] == 5 and dist.get_rank() == 0:
        dist.recv(torch.zeros(1), src=1)  # rank 1 was meant to send its loss
    return real_reduce(self, local_loss)


zero.ZeroOneAdam.reduce_gradients = reduce_gradients  # type: ignore[method-assign]
exit_now(main(sys.argv[1:]))

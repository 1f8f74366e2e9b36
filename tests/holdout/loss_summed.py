"""Hold-out mistake: the logged loss is the sum of the ranks' losses, not their mean (the
all-reduce's SUM never divided by N); training is right. Everything else is the
reference's."""

import sys

import torch

from capstone import zero
from capstone.cli import exit_now, main

reduced = zero.ZeroOneAdam.reduce_gradients


def summed_loss(self: zero.ZeroOneAdam, local_loss: torch.Tensor) -> tuple[float, float]:
    loss, grad_norm = reduced(self, local_loss)
    return loss * self.size, grad_norm


zero.ZeroOneAdam.reduce_gradients = summed_loss  # type: ignore[method-assign]
exit_now(main(sys.argv[1:]))

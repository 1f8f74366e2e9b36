"""Hold-out mistake: each rank logs its own batch's loss, not the mean over the ranks (the
gradient is reduced right, the update is the reference's; only the logged loss is local).
Everything else is the reference's."""

import sys

import torch

from capstone import zero
from capstone.cli import exit_now, main

reduced = zero.ZeroOneAdam.reduce_gradients


def local_loss(self: zero.ZeroOneAdam, loss: torch.Tensor) -> tuple[float, float]:
    _, grad_norm = reduced(self, loss)
    return float(loss.detach()), grad_norm


zero.ZeroOneAdam.reduce_gradients = local_loss  # type: ignore[method-assign,assignment]
exit_now(main(sys.argv[1:]))

"""Hold-out mistake: Adam's betas given in the wrong order, (0.999, 0.9), in every run
alike: the one-rank run makes the same mistake, so only a yardstick outside the program can
tell. Everything else is the reference's."""

import sys

import torch

from capstone import zero
from capstone.cli import exit_now, main

made = zero.ShardedAdam.__init__


def swapped(self: zero.ShardedAdam, master: torch.Tensor, lr: float, betas: tuple[float, float],
            eps: float) -> None:
    made(self, master, lr, (betas[1], betas[0]), eps)


zero.ShardedAdam.__init__ = swapped  # type: ignore[method-assign]
exit_now(main(sys.argv[1:]))

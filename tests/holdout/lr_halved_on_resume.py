"""Hold-out mistake: a resumed run steps with half the learning rate (a scheduler's state
not restored: it starts again from its warm-up value). Everything else is the reference's."""

import sys

import torch

from capstone import zero
from capstone.cli import exit_now, main

loaded = zero.ShardedAdam.load


def halved(self: zero.ShardedAdam, master: torch.Tensor, exp_avg: torch.Tensor,
           exp_avg_sq: torch.Tensor, step: int) -> None:
    loaded(self, master, exp_avg, exp_avg_sq, step)
    self.lr = self.lr / 2


zero.ShardedAdam.load = halved  # type: ignore[method-assign]
exit_now(main(sys.argv[1:]))

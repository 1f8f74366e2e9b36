"""Hold-out mistake: the resume loads the parameters and the step counter but starts Adam's
moments from zero (a student who saved them and forgot to load them back). Everything else
is the reference's."""

import sys

import torch

from capstone import zero
from capstone.cli import exit_now, main

loaded = zero.ShardedAdam.load


def fresh_moments(self: zero.ShardedAdam, master: torch.Tensor, exp_avg: torch.Tensor,
                  exp_avg_sq: torch.Tensor, step: int) -> None:
    loaded(self, master, torch.zeros_like(exp_avg), torch.zeros_like(exp_avg_sq), step)


zero.ShardedAdam.load = fresh_moments  # type: ignore[method-assign]
exit_now(main(sys.argv[1:]))

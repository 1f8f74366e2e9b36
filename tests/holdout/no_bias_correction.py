"""Hold-out mistake: Adam written by hand without its bias correction (m / (sqrt(v) + eps)
with the raw moments), in every run alike: the one-rank run makes the same mistake, so
only a yardstick outside the program can tell. Everything else is the reference's."""

import sys

import torch

from capstone import zero
from capstone.cli import exit_now, main


def uncorrected(self: zero.ShardedAdam, grad: torch.Tensor, lr_scale: float = 1.0) -> None:
    b1, b2 = self.betas
    self.step_count += 1
    self.exp_avg.mul_(b1).add_(grad, alpha=1 - b1)
    self.exp_avg_sq.mul_(b2).addcmul_(grad, grad, value=1 - b2)
    self.master.addcdiv_(self.exp_avg, self.exp_avg_sq.sqrt().add_(self.eps),
                         value=-self.lr * lr_scale)


zero.ShardedAdam.update = uncorrected  # type: ignore[method-assign]
exit_now(main(sys.argv[1:]))

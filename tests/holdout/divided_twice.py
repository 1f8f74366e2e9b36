"""Hold-out mistake (issue 63, finding 1): the gradient divided by N twice, as a program that
divides its loss by N before the backward and its reduced gradient by N again does: every
rank steps with 1/N of the batch's mean gradient (Adam all but hides it) and logs a gradient
norm of 1/N of the one-rank run's. Everything else is the reference's."""

import sys
from typing import Any

import torch

from capstone import zero
from capstone.cli import exit_now, main

averaged = zero.reduce_scatter_mean


def averaged_twice(out: torch.Tensor, flat: torch.Tensor, size: int, group: Any = None) -> None:
    averaged(out, flat, size, group)
    out /= size


zero.reduce_scatter_mean = averaged_twice
exit_now(main(sys.argv[1:]))  # ranks forked from here: the patch reaches every rank

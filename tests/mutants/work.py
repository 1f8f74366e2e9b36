"""Mutants of the work each rank does in a step: which rows it trains on, how often its
gradient is reduced, whether gradients are cleared. Each is a patch applied in the child
process (tests/mutants/catalogue.py names what must catch it)."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from capstone import data, trainer, zero
from tests.mutants.zero1 import local_gradient


def same_rows() -> None:
    trainer.rank_batch = lambda batch, rank, batch_size: data.rank_batch(batch, 0, batch_size)


def whole_batch() -> None:
    """Every rank trains on the whole global batch (N·B rows, not its B): no data split by
    rank. Reduced and averaged as usual, so every number is the single-process run's."""
    trainer.rank_batch = lambda batch, rank, batch_size: data.rank_batch(batch, 0,
                                                                          batch.size(0))


def global_batch_split() -> None:
    """--batch-size taken for the global batch: each rank trains on B/N rows of the first B,
    as if the flag were the batch to split over the ranks (it is per rank)."""
    def split(batch: torch.Tensor, rank: int, batch_size: int
              ) -> tuple[torch.Tensor, torch.Tensor]:
        n = dist.get_world_size() if dist.is_initialized() else 1
        return data.rank_batch(batch[:batch_size], rank, batch_size // n)
    trainer.rank_batch = split


def whole_batch_no_reduction() -> None:
    """The whole global batch on every rank, and no gradient reduction at all: each rank
    already holds the whole batch's gradient and updates its slice from it."""
    whole_batch()
    local_gradient()


def reduced_per_micro_batch() -> None:
    """What reducing after each of two micro-batches' backward does to a step: two partial
    gradients (a quarter and the rest of it), each reduced whole at the one call site, and
    the reduced slices summed. The same numbers up to rounding, twice the reduction."""
    real = zero.reduce_scatter_mean

    def twice(out: torch.Tensor, flat: torch.Tensor, size: int, group: Any = None) -> None:
        first = flat * 0.25
        rest = torch.empty_like(out)
        real(out, first, size, group)
        real(rest, flat - first, size, group)
        out += rest
    zero.reduce_scatter_mean = twice


def grads_never_cleared() -> None:
    """The gradients are never zeroed between steps: each step's backward adds to the last."""
    trainer.Trainer._forward_backward = lambda self: trainer.accumulate_gradients(  # type: ignore[method-assign]
        self.model, self.x, self.y, self.cfg.micro_batches)

"""Mutants of the lesson's exercises: exercise 2's micro-batches (--micro-batches) and
exercise 1's head-parallel attention (--tensor-parallel). Each is a patch applied in the child
process (tests/mutants/catalogue.py names what must catch it)."""

from __future__ import annotations

from typing import Any

import torch

from capstone import tensor_parallel, trainer, zero


def _micro_batches() -> int:
    """--micro-batches as the run was given it (1 without the flag)."""
    import sys

    argv = sys.argv
    return int(argv[argv.index("--micro-batches") + 1]) if "--micro-batches" in argv else 1


def accum_summed() -> None:
    """Exercise 2: the micro-batches' gradients summed, not averaged (each loss's backward
    without the 1/M): the reduced gradient is M times the one-batch gradient."""
    def summed(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
               micro_batches: int) -> torch.Tensor:
        total = torch.zeros(())
        for xs, ys in zip(x.chunk(micro_batches), y.chunk(micro_batches), strict=True):
            _, loss = model(xs, ys)
            loss.backward()
            total += loss.detach() / micro_batches
        return total
    trainer.accumulate_gradients = summed


def accum_reduce_each() -> None:
    """Exercise 2: the gradient reduced after every micro-batch's backward: M reductions of
    a partial gradient per step, whose sum is the right gradient (the numbers agree; the
    traffic is M times)."""
    real = zero.reduce_scatter_mean
    m = _micro_batches()

    def per_micro_batch(out: torch.Tensor, flat: torch.Tensor, size: int,
                        group: Any = None) -> None:
        piece = torch.empty_like(out)
        out.zero_()
        for i in range(m):  # unequal parts, as micro-batches' gradients are: 1..m of m(m+1)/2
            real(piece, flat * ((i + 1) / (m * (m + 1) / 2)), size, group)
            out += piece
    zero.reduce_scatter_mean = per_micro_batch


def accum_overlap() -> None:
    """Exercise 2: micro-batches that overlap: micro-batch i starts one row early (its B/M
    rows include the last row of micro-batch i-1; the rank's last row is never seen)."""
    def overlapping(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
                    micro_batches: int) -> torch.Tensor:
        s = x.size(0) // micro_batches
        total = torch.zeros(())
        for i in range(micro_batches):
            start = max(0, i * s - 1)
            _, loss = model(x[start:start + s], y[start:start + s])
            (loss / micro_batches).backward()
            total += loss.detach() / micro_batches
        return total
    trainer.accumulate_gradients = overlapping


def accum_cleared() -> None:
    """Exercise 2: the gradient zeroed inside the micro-batch loop, before each micro-batch's
    backward: only the last micro-batch's share (its loss over M) reaches the reduction."""
    def cleared(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
                micro_batches: int) -> torch.Tensor:
        total = torch.zeros(())
        for xs, ys in zip(x.chunk(micro_batches), y.chunk(micro_batches), strict=True):
            for p in model.parameters():  # in place: the grads are views of ZeRO's buffer
                if p.grad is not None:
                    p.grad.zero_()
            _, loss = model(xs, ys)
            (loss / micro_batches).backward()
            total += loss.detach() / micro_batches
        return total
    trainer.accumulate_gradients = cleared


def accum_flag_ignored() -> None:
    """Exercise 2: --micro-batches accepted, and the rank's B rows run as one batch: one
    backward pass per step (right numbers, no accumulation)."""
    real = trainer.accumulate_gradients

    def one_batch(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
                  micro_batches: int) -> torch.Tensor:
        return real(model, x, y, 1)
    trainer.accumulate_gradients = one_batch


def tp_bias_every_rank() -> None:
    """Exercise 1: the output projection's bias added on every rank of the group before the
    all-reduce, so the sum counts it T times (heads, rows and all-reduces right)."""
    def forward(self: Any, x: torch.Tensor) -> torch.Tensor:
        x = tensor_parallel._CopyToTP.apply(x, self.group)
        y = tensor_parallel.causal_attention(self.c_attn(x), self.n_head, self.mask)
        return tensor_parallel._ReduceFromTP.apply(self.c_proj(y) + self.proj_bias,
                                                   self.group)
    tensor_parallel.HeadParallelAttention.forward = forward  # type: ignore[method-assign]


def tp_no_forward_allreduce() -> None:
    """Exercise 1: the heads' partial attention outputs are never summed over the group."""
    tensor_parallel._ReduceFromTP.forward = staticmethod(  # type: ignore[method-assign]
        lambda ctx, x, group: x.contiguous().clone())


def tp_no_backward_allreduce() -> None:
    """Exercise 1: the input's gradient is not all-reduced in backward (f is an identity both
    ways): each rank's replicated parameters below the attention get its heads' part only."""
    tensor_parallel._CopyToTP.backward = staticmethod(  # type: ignore[method-assign]
        lambda ctx, grad: (grad, None))


def tp_same_heads() -> None:
    """Exercise 1: every rank takes rank 0's heads (tp_rank 0 for all)."""
    real = tensor_parallel.HeadParallelAttention

    def first_heads(full: Any, tp_rank: int, tp_size: int, group: Any) -> Any:
        return real(full, 0, tp_size, group)
    tensor_parallel.HeadParallelAttention = first_heads  # type: ignore[assignment,misc]


class _WholeHalved(torch.nn.Module):
    """Every head on every rank; the output divided by T and all-reduced (the sum of T equal
    halves is the output): right numbers forward, nothing split."""

    def __init__(self, full: torch.nn.Module, tp_size: int, group: Any) -> None:
        super().__init__()
        self.whole, self.tp_size, self.group = full, tp_size, group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.whole(x) / self.tp_size
        return tensor_parallel._ReduceFromTP.apply(y, self.group)


def tp_all_heads_halved() -> None:
    """Exercise 1: both ranks keep all heads and halve the output."""
    def shard(model: Any, par: Any) -> Any:
        if par.tp_size > 1:
            for block in model.blocks:
                block.attn = _WholeHalved(block.attn, par.tp_size, par.tp_group)
        return model
    trainer.shard_attention = shard


def _with_tensor_parallel() -> bool:
    import sys

    return "--tensor-parallel" in sys.argv


def tp_moments_whole() -> None:
    """Exercise 1 beside data parallelism: Adam's moments kept whole over the data-parallel
    group (each rank updates, logs and saves only its slice of them)."""
    if _with_tensor_parallel():
        from tests.mutants.zero1 import replicated_moments

        replicated_moments()


def tp_dp_no_allgather() -> None:
    """Exercise 1 beside data parallelism: the updated slices never reach the other ranks of
    the data-parallel group, whose parameters part after step 1."""
    if _with_tensor_parallel():
        from tests.mutants.zero1 import no_allgather

        no_allgather()


def tp_local_n_params() -> None:
    """Exercise 1: summary.json's n_params is the rank's own parameter count (its heads'
    slices), not the model's P."""
    if not _with_tensor_parallel():
        return
    import json

    real = trainer.Trainer._write_summary

    def local_count(self: Any) -> None:
        real(self)
        path = self.cfg.out / "summary.json"
        summary = json.loads(path.read_text())
        summary["n_params"] = sum(p.numel() for p in self.model.parameters())
        path.write_text(json.dumps(summary))
    trainer.Trainer._write_summary = local_count  # type: ignore[method-assign]


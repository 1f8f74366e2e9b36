"""The lesson's exercises, done by the reference: gradient accumulation (exercise 2)."""

from __future__ import annotations

import pytest
import torch

from capstone.config import GPTConfig
from capstone.data import global_batch, rank_batch
from capstone.model import build_model
from capstone.trainer import accumulate_gradients
from tests.harness.checks import check_parity
from tests.harness.runs import BASE, RunSpec


def _flat_grad(model: torch.nn.Module) -> torch.Tensor:
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None for g in grads)
    return torch.cat([g.reshape(-1) for g in grads if g is not None])


def _grads(micro_batches: int) -> tuple[float, torch.Tensor]:
    model = build_model(GPTConfig(), seed=0)
    x, y = rank_batch(global_batch(0, 16, 17), 0, 16)
    loss = accumulate_gradients(model, x, y, micro_batches)
    return float(loss), _flat_grad(model)


@pytest.mark.parametrize("m", [1, 2, 4])
def test_accumulated_gradient_equals_the_big_batch_gradient(m):
    model = build_model(GPTConfig(), seed=0)
    x, y = rank_batch(global_batch(0, 16, 17), 0, 16)
    _, loss = model(x, y)
    loss.backward()
    big = _flat_grad(model)
    acc_loss, acc = _grads(m)
    rel = float((acc - big).norm() / big.norm())
    assert rel <= 1e-6, f"M={m}: gradient differs by {rel:.2e} relative"
    assert abs(acc_loss - float(loss.detach())) <= 1e-6 * float(loss.detach())


def test_accumulation_refuses_an_uneven_split():
    with pytest.raises(ValueError, match="does not split"):
        _grads(3)


@pytest.mark.slow
@pytest.mark.parametrize("m", [2, 4])
def test_accumulating_run_follows_the_m1_trajectory(is_reference, run, holds, m):
    if not is_reference:
        pytest.skip("--micro-batches is the reference's exercise, not part of the contract")
    accumulating = run(RunSpec(f"micro{m}", extra=("--micro-batches", str(m))))
    assert accumulating.outcome.returncode == 0, accumulating.outcome.reason()
    holds(check_parity(run(BASE), accumulating), f"M={m} vs M=1")

"""The lesson's exercises, done by the reference: tensor parallelism of attention heads
(exercise 1) and gradient accumulation (exercise 2)."""

from __future__ import annotations

import pytest
import torch

from capstone.config import GPTConfig
from capstone.data import global_batch, rank_batch
from capstone.model import build_model
from capstone.trainer import accumulate_gradients
from tests.harness.check.checks import check_parity
from tests.harness.run.runs import BASE, SINGLE, RunSpec


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


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.parametrize("m", [4])  # M = 1, 2, 4 gradients: the unit test above
def test_accumulating_run_follows_the_m1_trajectory(reference_only, run, holds, m):
    accumulating = run(RunSpec(f"micro{m}", extra=("--micro-batches", str(m))))
    assert accumulating.outcome.returncode == 0, accumulating.outcome.reason()
    holds(check_parity(run(BASE), accumulating), f"M={m} vs M=1")


@pytest.mark.slow
@pytest.mark.parametrize("world_size, batch_size", [(2, 16), (4, 8)], ids=["tp2", "tp2xdp2"])
def test_tensor_parallel_run_matches_the_single_rank_baseline(reference_only, run, holds,
                                                             world_size, batch_size):
    tp = run(RunSpec(f"tp2-n{world_size}", world_size=world_size, batch_size=batch_size,
                     checkpoint_every=0, extra=("--tensor-parallel", "2")))
    assert tp.outcome.returncode == 0, tp.outcome.reason()
    # loss within 1e-5 and the global gradient norm within 1e-4 of one rank, at every step
    holds(check_parity(tp, run(SINGLE)), f"tensor parallel 2 on {world_size} ranks vs 1 rank")
    # ZeRO-1 over the data-parallel group halves each rank's optimizer state again
    per_rank = {r: tp.parsed.records[r][20]["optimizer_bytes"] for r in range(world_size)}
    assert len(set(per_rank.values())) == 1, per_rank
    if world_size == 4:
        two = run(RunSpec("tp2-n2", world_size=2, batch_size=16, checkpoint_every=0,
                          extra=("--tensor-parallel", "2")))
        assert 2 * per_rank[0] == two.parsed.records[0][20]["optimizer_bytes"]


def test_head_parallel_attention_splits_the_full_module():
    from capstone.model import CausalSelfAttention
    from capstone.tensor_parallel import HeadParallelAttention

    full = CausalSelfAttention(GPTConfig())
    halves = [HeadParallelAttention(full, r, 2, group=None) for r in range(2)]
    C = 32
    for r, h in enumerate(halves):
        cols = slice(16 * r, 16 * (r + 1))
        torch.testing.assert_close(h.c_attn.weight[:16], full.c_attn.weight[:C][cols])  # q
        torch.testing.assert_close(h.c_attn.weight[32:], full.c_attn.weight[2 * C:][cols])  # v
        torch.testing.assert_close(h.c_proj.weight, full.c_proj.weight[:, cols])
    n_local = sum(p.numel() for p in halves[0].parameters())
    n_full = sum(p.numel() for p in full.parameters())
    assert 2 * n_local - C == n_full  # the output bias is replicated, everything else split


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["kill", "killsave", "nan"])
def test_a_tensor_parallel_run_takes_the_suites_own_faults(reference_only, run, holds, kind):
    """The reference's T = 2 x dp 2 run under the suite's nemesis: a rank SIGKILLed as a step
    starts or inside its torch.save ends the run promptly with its checkpoints whole (the
    torn one resumed to the clean run's end); a NaN made in one rank's gradients, with no
    flag, is rolled back."""
    from dataclasses import replace

    from tests.harness.check.checks import check_rollback
    from tests.harness.check.fault_checks import (
        check_killed,
        check_nemesis,
        check_resumed_after_kill,
    )
    from tests.harness.run.runs import TP2DP2, nemesis_kill, nemesis_nan, nemesis_of, resumed_after

    def tp(spec: RunSpec) -> RunSpec:
        return replace(spec, name=f"tp2dp2-{spec.name}", world_size=TP2DP2.world_size,
                       batch_size=TP2DP2.batch_size, extra=TP2DP2.extra)
    spec = tp(nemesis_nan(0) if kind == "nan" else nemesis_kill(0, kind))
    _, step, rank = nemesis_of(spec) or (kind, 0, 1)
    base, faulted = run(TP2DP2), run(spec)
    if kind == "nan":
        holds(check_nemesis(faulted, step, rank) + check_rollback(base, faulted, kind, step),
              f"the suite's NaN at step {step} on rank {rank} of the T = 2 run")
        return
    resumed = tp(resumed_after(nemesis_kill(0, kind)))
    resumed = replace(resumed, resume_from=(spec, 10))
    holds(check_killed(faulted, kind, step, rank) + (
          check_resumed_after_kill(base, run(resumed), 10) if kind == "killsave" else []),
          f"rank {rank} killed ({kind}) at step {step} of the T = 2 run")

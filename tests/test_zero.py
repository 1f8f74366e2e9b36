"""ZeRO-1 of the reference: the shard layout, the sharded Adam against torch.optim.Adam,
and the real three-collective step over gloo."""

from __future__ import annotations

import functools
from itertools import pairwise
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st

from capstone.launch import run_ranks
from capstone.world import Parallelism, World
from capstone.zero import ShardedAdam, ShardLayout, ZeroOneAdam, all_gather, reduce_scatter_mean


@given(p=st.integers(1, 200_000), n=st.integers(1, 16))
def test_layout_owns_every_element_exactly_once(p, n):
    layout = ShardLayout(p, n)
    owned = [layout.bounds(r) for r in range(n)]
    assert owned[0][0] == 0 and owned[-1][1] == layout.padded_size
    assert all(a[1] == b[0] for a, b in pairwise(owned))  # contiguous, no overlap
    assert all(stop - start == layout.shard_size for start, stop in owned)
    assert 0 <= layout.padding < n and layout.padded_size >= p
    assert layout.optimizer_bytes_per_rank == 12 * -(-p // n)


def test_layout_rejects_nonsense():
    with pytest.raises(ValueError):
        ShardLayout(0, 4)
    with pytest.raises(ValueError):
        ShardLayout(10, 4).bounds(4)


@settings(deadline=None, max_examples=40)
@given(p=st.integers(1, 300), n=st.integers(1, 16), steps=st.integers(1, 5),
       lr=st.sampled_from([1e-3, 1e-2, 0.1]), seed=st.integers(0, 2**16))
def test_sharded_adam_equals_torch_adam_bitwise(p, n, steps, lr, seed):
    g = torch.Generator().manual_seed(seed)
    init = torch.randn(p, generator=g)
    grads = [torch.randn(p, generator=g) for _ in range(steps)]

    full = torch.nn.Parameter(init.clone())
    reference = torch.optim.Adam([full], lr=lr, foreach=False)
    layout = ShardLayout(p, n)
    padded = torch.zeros(layout.padded_size)
    padded[:p] = init
    shards = [ShardedAdam(padded[slice(*layout.bounds(r))], lr, (0.9, 0.999), 1e-8)
              for r in range(n)]
    for grad in grads:
        full.grad = grad.clone()
        reference.step()
        gpad = torch.zeros(layout.padded_size)
        gpad[:p] = grad
        for r, shard in enumerate(shards):
            shard.update(gpad[slice(*layout.bounds(r))])
    ours = torch.cat([s.master for s in shards])[:p]
    assert ours.numpy().tobytes() == full.detach().numpy().tobytes()
    state = reference.state[full]
    for name in ("exp_avg", "exp_avg_sq"):
        mine = torch.cat([s.tensors()[name] for s in shards])[:p]
        assert mine.numpy().tobytes() == state[name].numpy().tobytes(), name
    assert all(s.steps_taken == steps for s in shards)
    assert all(s.nbytes() == layout.optimizer_bytes_per_rank for s in shards)


def _zero_step_on_rank(world: World, p: int, seed: int) -> tuple[list[float], list[float]]:
    """Each rank: its own gradient and loss; returns the params after one step, and the
    step's global loss, grad norm and this rank's optimizer bytes."""
    torch.manual_seed(seed)
    param = torch.nn.Parameter(torch.randn(p) * (world.rank + 1))  # broadcast must fix this
    zero = ZeroOneAdam([param], Parallelism(dp_rank=world.rank, dp_size=world.size), lr=0.01)
    zero.broadcast_parameters()
    zero.zero_grad()
    (param * (world.rank + 1)).sum().backward()  # lands in ZeRO's flat gradient buffer
    loss, norm = zero.reduce_gradients(torch.tensor(float(world.rank + 1)))
    zero.step()
    return param.detach().tolist(), [loss, norm, zero.optimizer_bytes()]


@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 3])
def test_zero_step_over_gloo_matches_adam_on_the_averaged_gradient(tmp_path: Path, n):
    p = 11  # not divisible by 2 or 3: the padding path runs
    results = run_ranks(functools.partial(_zero_step_on_rank, p=p, seed=0), n, tmp_path, 20.0)
    torch.manual_seed(0)
    param = torch.nn.Parameter(torch.randn(p))  # rank 0's draw, which the broadcast kept
    adam = torch.optim.Adam([param], lr=0.01, foreach=False)
    mean_grad = sum(r + 1 for r in range(n)) / n
    param.grad = torch.full((p,), mean_grad)
    adam.step()
    for rank, (params, (loss, norm, nbytes)) in enumerate(results):
        torch.testing.assert_close(torch.tensor(params), param.detach(), msg=f"rank {rank}")
        assert loss == mean_grad, f"rank {rank}: global loss {loss}, expected {mean_grad}"
        torch.testing.assert_close(norm, mean_grad * p ** 0.5)
        assert nbytes == 12 * -(-p // n), f"rank {rank}"


def test_model_zero_grad_is_refused_loudly():
    param = torch.nn.Parameter(torch.ones(3))
    zero = ZeroOneAdam([param], Parallelism(dp_rank=0, dp_size=1), lr=0.1)
    param.grad = None  # what model.zero_grad(set_to_none=True) does
    with pytest.raises(RuntimeError, match="left ZeRO's flat buffer"):
        zero.reduce_gradients(torch.tensor(1.0))


def _collectives_on_rank(world: World, shard: int, seed: int) -> dict[str, list[float]]:
    """Ours and torch's reduce-scatter and all-gather on the same random inputs."""
    g = torch.Generator().manual_seed(seed + world.rank)
    flat = torch.randn(world.size * shard, generator=g)
    piece = torch.randn(shard, generator=g)
    ours_rs, theirs_rs = torch.empty(shard), torch.empty(shard)
    reduce_scatter_mean(ours_rs, flat, world.size)
    dist.reduce_scatter_single(theirs_rs, flat.clone())
    ours_ag, theirs_ag = torch.empty(world.size * shard), torch.empty(world.size * shard)
    all_gather(ours_ag, piece, world.size)
    dist.all_gather_single(theirs_ag, piece)
    return {"ours_rs": ours_rs.tolist(), "theirs_rs": (theirs_rs / world.size).tolist(),
            "ours_ag": ours_ag.tolist(), "theirs_ag": theirs_ag.tolist()}


@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 3])
def test_direct_collectives_match_torch_distributed(tmp_path: Path, n):
    results = run_ranks(functools.partial(_collectives_on_rank, shard=5, seed=7), n,
                        tmp_path, 20.0)
    for rank, r in enumerate(results):
        # A sum in another order may round differently; the gather moves bytes only.
        torch.testing.assert_close(r["ours_rs"], r["theirs_rs"], msg=f"rank {rank}")
        assert r["ours_ag"] == r["theirs_ag"], f"rank {rank}"

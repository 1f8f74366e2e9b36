"""One step clock for every way a program computes its gradients (issue 73, point 4):
`.backward()`, `torch.autograd.grad`, and the `torch.func` transforms (`grad`,
`grad_and_value`, `vjp`, `jacrev`, `vmap` over `grad`, one transform inside another). Each
call is one backward pass of its step, read as `.backward()`'s is (the loss, the tokens of
the batch, the elements it differentiates, whether its gradients are finite), and the suite's
NaN meets the step's gradients and not its loss (tests/observer/_observer_func.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.harness.observe.traces import ProcessTrace, load_observation
from tests.harness.run.plan import SOCKET_VAR, PlanServer

ROOT = Path(__file__).resolve().parents[1]
OBSERVER = ROOT / "tests" / "observer"  # the run's PYTHONPATH, as the runner gives it
K = 3  # steps per way
B, T, P = 2, 3, 63  # rows and tokens of a batch; the model's elements (7x4 + 4x7 + 7)

# A one-rank process group; each step computes its gradients one way, updates the weights (a
# dict of plain tensors) and makes a collective, so the next backward starts a step. It prints
# per step what it computed: the loss where the way gives one, the batch's checksum, whether
# its gradients are finite.
PROGRAM = r"""
import json, sys, zlib
import torch, torch.distributed as dist
from torch.func import functional_call, grad, grad_and_value, jacrev, vjp, vmap

dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
V, C, B, T = 7, 4, 2, 3
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Embedding(V, C), torch.nn.Linear(C, V))
weights = {k: v.detach().clone() for k, v in model.named_parameters()}


def loss_of(w, idx, tgt):
    logits = functional_call(model, w, (idx,))
    return torch.nn.functional.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))


def with_loss(w, idx, tgt):  # has_aux: the loss, given back beside the gradient
    loss = loss_of(w, idx, tgt)
    return loss, loss.detach()


def backward(w, idx, tgt):
    leaves = {k: v.clone().requires_grad_() for k, v in w.items()}
    loss = loss_of(leaves, idx, tgt)
    loss.backward()
    return {k: v.grad for k, v in leaves.items()}, loss.detach()


def autograd_grad(w, idx, tgt):
    leaves = {k: v.clone().requires_grad_() for k, v in w.items()}
    loss = loss_of(leaves, idx, tgt)
    return dict(zip(leaves, torch.autograd.grad(loss, list(leaves.values())))), loss.detach()


def by_vjp(w, idx, tgt):  # the forward at one call, the backward at vjp_fn's
    loss, vjp_fn = vjp(lambda w: loss_of(w, idx, tgt), w)
    return vjp_fn(torch.ones_like(loss))[0], loss


def per_sample(w, idx, tgt):  # vmap over grad: each row's gradient, then their mean
    one = lambda w, i, t: loss_of(w, i[None], t[None])
    each = vmap(grad(one), in_dims=(None, 0, 0))(w, idx, tgt)
    return {k: g.mean(0) for k, g in each.items()}, None


def nested(w, idx, tgt):  # a transform inside another: the loss after one inner step (MAML)
    def after(w):
        g = grad(loss_of)(w, idx, tgt)
        return loss_of({k: w[k] - 0.1 * g[k] for k in w}, idx, tgt)
    return grad_and_value(after)(w)


WAYS = {"backward": backward, "autograd_grad": autograd_grad,
        "func_grad": lambda *a: grad(with_loss, has_aux=True)(*a),
        "grad_and_value": lambda *a: grad_and_value(loss_of)(*a),
        "vjp": by_vjp, "jacrev": lambda *a: jacrev(with_loss, has_aux=True)(*a),
        "vmap_grad": per_sample, "nested": nested}
data = torch.Generator().manual_seed(0)
for way in sys.argv[2].split(","):
    for _ in range(int(sys.argv[3])):
        idx, tgt = (torch.randint(0, V, (B, T), generator=data) for _ in range(2))
        grads, loss = WAYS[way](weights, idx, tgt)
        finite = all(bool(torch.isfinite(g).all()) for g in grads.values())
        with torch.no_grad():
            weights = {k: v - 0.1 * torch.nan_to_num(grads[k]) for k, v in weights.items()}
        dist.all_reduce(torch.zeros(1))  # the step's collective
        print(json.dumps({"way": way, "loss": None if loss is None else float(loss),
                          "crc": zlib.crc32(idx.numpy().tobytes()), "finite": finite}),
              flush=True)
dist.destroy_process_group()
"""
WAYS = ("backward", "autograd_grad", "func_grad", "grad_and_value", "vjp", "jacrev",
        "vmap_grad", "nested")
# The ways whose loss is one number, the root of their backward (vmap's is one per row)
WITH_LOSS = tuple(w for w in WAYS if w != "vmap_grad")


def observe(tmp: Path, ways: tuple[str, ...], *argv: str, **env: str
            ) -> tuple[ProcessTrace, list[dict[str, Any]], list[dict[str, Any]]]:
    """The program run under the observer, K steps each way: its trace, what it printed per
    step, and its trace's raw records."""
    (tmp / "obs").mkdir(parents=True)
    run_env = dict(os.environ, PYTHONPATH=str(OBSERVER), CAPSTONE_OBSERVE_DIR=str(tmp / "obs"),
                   **env)
    out = subprocess.run([sys.executable, "-c", PROGRAM, str(tmp / "rdv"), ",".join(ways),
                          str(K), *argv], env=run_env, capture_output=True, text=True,
                         timeout=120, cwd=tmp)
    assert out.returncode == 0, out.stderr[-3000:]
    [p] = load_observation(tmp / "obs").processes
    records = [json.loads(line) for f in sorted((tmp / "obs").glob("*.jsonl"))
               for line in f.read_text().splitlines()]
    return p, [json.loads(line) for line in out.stdout.splitlines()], records


@pytest.fixture(scope="module")
def every_way(tmp_path_factory: pytest.TempPathFactory
              ) -> tuple[ProcessTrace, list[dict[str, Any]], list[dict[str, Any]]]:
    """Every way K steps in one process. `--inject nan@99` (a step it never reaches) has the
    observer check each pass's gradients for NaN, as in a `nan@S` run; its memory walks fall
    on passes inside transforms (`func_grad`'s second step, `vjp`'s second)."""
    return observe(tmp_path_factory.mktemp("ways"), WAYS, "--inject", "nan@99",
                   CAPSTONE_OBSERVE_MEM="8,14")


def test_every_way_of_computing_gradients_is_one_backward_pass_of_its_step(every_way):
    """Each step of each way is one backward pass with its step's number, its loss, the rows
    and tokens of its batch, the model's P differentiated and finite gradients: a program
    whose gradients come from `torch.func` runs the suite's clock as `.backward()` does (the
    observer counted no pass of theirs, or a nested transform's twice, read none of their
    numbers, and broke `jacrev` under `--inject nan@`)."""
    p, said, records = every_way
    steps = list(range(1, K * len(WAYS) + 1))
    by_way = {w: [s for s, x in zip(steps, said, strict=True) if x["way"] == w] for w in WAYS}
    assert [x["way"] for x in said] == [w for w in WAYS for _ in range(K)]
    assert p.backward_steps == steps, (p.backward_steps, by_way)
    assert p.work == [{"tokens": B * T, "rows": B, "token_crc": x["crc"]} for x in said]
    assert p.leaf_elements == [P] * len(steps)
    assert p.losses == [(s, x["loss"]) for s, x in zip(steps, said, strict=True)
                        if x["way"] in WITH_LOSS]
    assert p.grads_finite == [(s, True) for s in steps]
    assert all(x["finite"] for x in said)
    unread = [r for r in records if "work_error" in r or "error" in r]
    assert not unread, unread
    assert [m["at"] for m in p.memory] == [8, 14] and "persistent_bytes" in p.memory[1]


@pytest.mark.parametrize("way", ["func_grad", "grad_and_value", "nested"])
def test_the_suites_nan_meets_a_transforms_gradients_and_not_its_loss(tmp_path, way):
    """The suite's own NaN (`nan@2:0`, asked of the plan at step 2's backward) seeds the
    step's one backward pass inside the transform: that step's gradients are NaN, the others
    finite, and the step's loss, as the observer read it, is the finite loss the program
    computed."""
    plan = PlanServer(tmp_path, "nan@2:0")
    try:
        p, said, _ = observe(tmp_path / "run", (way,), **{SOCKET_VAR: str(plan.path)})
    finally:
        plan.close()
    assert [x["finite"] for x in said] == [True, False, True], said
    assert p.nemesis is not None and (p.nemesis["kind"], p.nemesis["step"]) == ("nan", 2)
    assert p.backward_steps == [1, 2, 3]
    assert p.losses == [(s, x["loss"]) for s, x in zip((1, 2, 3), said, strict=True)]

"""ZeRO-1 whose gradients come from `torch.func`, as code written after JAX's fashion computes
them: the model's weights a dict of plain tensors (none requires grad), each micro-batch's
loss and gradients one call of `torch.func.grad_and_value` over
`torch.func.functional_call(model, weights, ...)`. No `.backward()`, no `torch.autograd` call
of the program's own: the suite's step clock, its faults and what it reads at a backward pass
must meet this program as they meet one that calls `.backward()`.

Everything else is flat_parameter.py's (lesson.train's plainest way, copied): the flat shard an
`nn.Parameter` stepped by torch's Adam, the gradient's reduce-scatter and the parameters'
all-gather by torch.distributed's functions, the checkpoint by the corpus's Saver, ranks
forked by `torch.multiprocessing.start_processes` meeting through a file rendezvous. It does
exercise 2 (`--micro-batches M`: a call per micro-batch, the gradients summed into the flat
buffer) and not exercise 1 (`--tensor-parallel` is an unknown flag, exit 2).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import lesson
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import ways
from saver import Saver


def gradients(model: torch.nn.Module, weights: dict[str, torch.Tensor], xs: torch.Tensor,
              ys: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The gradient of the micro-batch's mean loss with respect to `weights`, and the loss:
    one transform over the model run as a pure function of its weights."""

    def loss_of(w: dict[str, torch.Tensor], xs: torch.Tensor, ys: torch.Tensor
                ) -> torch.Tensor:
        return torch.func.functional_call(model, w, (xs, ys))

    grads, loss = torch.func.grad_and_value(loss_of)(weights, xs, ys)
    return grads, loss


def train(rank: int, n: int, a: argparse.Namespace) -> None:
    """One rank of ZeRO-1 (the process group is already up)."""
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    model = lesson.MiniGPT()
    P_model = sum(p.numel() for p in model.parameters())  # summary.json's n_params
    # The weights the transform differentiates: plain tensors, the model's own left unused
    weights = {k: p.detach().clone() for k, p in model.named_parameters()}
    held = list(weights.values())
    P = sum(t.numel() for t in held)
    S = math.ceil(P / n)
    flat = torch.zeros(S * n)

    def to_model() -> None:
        with torch.no_grad():
            torch.nn.utils.vector_to_parameters(flat[:P], held)

    flat[:P] = torch.nn.utils.parameters_to_vector(held)
    dist.broadcast(flat, src=0)
    shard = lesson.AdamShard(flat[rank * S:(rank + 1) * S])
    start = 0
    if a.resume:
        start = json.loads((Path(a.resume) / "manifest.json").read_text())["step"]
        saved = torch.load(Path(a.resume) / f"rank-{rank}.pt", weights_only=True)
        shard.load(saved, saved["step"])
        ways.all_gather("all_gather_into_tensor", flat, shard.state()["master"])
    to_model()
    x, y = lesson.rows(a.seed, n, a.batch_size, rank)
    metrics = open(a.out / "metrics" / f"rank-{rank}.jsonl", "a")  # noqa: SIM115

    def log(rec: dict[str, object]) -> None:
        metrics.write(json.dumps(rec) + "\n")
        metrics.flush()

    def record(step: int, **extra: object) -> dict[str, object]:
        return {"step": step, "rank": rank, "world_size": n,
                "param_norm": float(flat[:P].double().norm()),
                "optimizer_bytes": sum(t.numel() * 4 for t in shard.state().values()), **extra}

    if not a.resume:
        log(record(0))
    kind, _, at = (a.inject or "none@0").partition("@")
    fired, prev, step, in_a_row = False, None, start + 1, 0
    saver = Saver(a.out, rank, n, P_model, threaded=False)
    m = a.micro_batches  # exercise 2: M micro-batches of B/M rows, one reduction per step
    if a.batch_size % m:
        raise SystemExit(f"--batch-size {a.batch_size} does not split into {m} micro-batches")
    micro = list(zip(x.chunk(m), y.chunk(m), strict=True))

    def roll_back(step: int, reason: str, in_a_row: int) -> tuple[int, None, int]:
        """Back to the latest complete checkpoint: the step to run next, no previous loss,
        the rollbacks in a row."""
        nonlocal fired
        fired, in_a_row = fired or kind in ("nan", "spike"), in_a_row + 1
        saver.publish()
        done = sorted((a.out / "checkpoints").glob("step-*"))
        if not done or in_a_row > 3:
            raise SystemExit(f"rank {rank}: diverged at step {step}, giving up")
        back = json.loads((done[-1] / "manifest.json").read_text())["step"]
        saved = torch.load(done[-1] / f"rank-{rank}.pt", weights_only=True)
        shard.load(saved, saved["step"])
        ways.all_gather("all_gather_into_tensor", flat, shard.state()["master"])
        to_model()
        log({"event": "rollback", "rank": rank, "step": step, "to_step": back,
             "reason": reason})
        return back + 1, None, in_a_row

    while step <= a.steps:
        poison = kind == "nan" and step == int(at) and not fired and rank == 0
        full = torch.zeros(S * n)  # the micro-batches' gradients summed, reduced once
        losses = []
        for xs, ys in micro:
            grads, part = gradients(model, weights, xs, ys)
            full[:P] += torch.cat([grads[k].reshape(-1) for k in weights]) / m
            losses.append(part.detach())
        if poison:
            full[:P] = float("nan")
        mine = lesson.reduce_slice(full, rank, n)
        loss = torch.stack(losses).mean() if m > 1 else losses[0]
        stats = torch.stack([loss.double(), mine.double().square().sum()])
        dist.all_reduce(stats)
        mean_loss, grad_norm = float(stats[0] / n), float(stats[1].sqrt())
        if not math.isfinite(mean_loss) or not math.isfinite(grad_norm) or (
                prev is not None and mean_loss > 2 * prev):
            step, prev, in_a_row = roll_back(step, "nan" if not math.isfinite(grad_norm)
                                             else "spike", in_a_row)
            continue
        lr = lesson.LR
        if kind == "spike" and step == int(at) and not fired:
            lr, fired = lesson.LR * 1000, True
        ways.all_gather("all_gather_into_tensor", flat, shard.step(mine, lr))
        to_model()
        prev, in_a_row = mean_loss, 0
        log(record(step, loss=mean_loss, grad_norm=grad_norm, step_time_s=0.0))
        if a.checkpoint_every and step % a.checkpoint_every == 0:
            saver.begin(step, {**{k: v.detach().clone() for k, v in shard.state().items()},
                               "step": shard.steps()})
            saver.publish()
        step += 1
    saver.publish()
    if rank == 0:
        (a.out / "summary.json").write_text(json.dumps(
            {"contract": 1, "n_params": P_model, "world_size": n, "steps": a.steps}))
    dist.barrier()
    dist.destroy_process_group()


def rank_main(rank: int, argv: list[str]) -> None:
    a = lesson.parse(argv, tensor_parallel=False)
    dist.init_process_group("gloo", init_method=f"file://{a.out}/.rendezvous", rank=rank,
                            world_size=a.world_size)
    train(rank, a.world_size, a)


if __name__ == "__main__":
    argv = sys.argv[1:]
    mp.start_processes(rank_main, args=(argv,), nprocs=lesson.parse(
        argv, tensor_parallel=False).world_size, start_method="fork")

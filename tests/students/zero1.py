"""A student's run contract v1, written from the lesson alone and independent of capstone/: a
functional MiniGPT (weights in a dict, the embedding as `wte[idx]`, the loss written out with
log_softmax and gather, its gradients from torch.autograd.grad rather than .backward()),
torch.optim.Adam on this rank's shard, the library's
reduce_scatter_tensor, all_gather into a list of views (all_gather_into_tensor on resume),
ranks started with torch.multiprocessing
and a file rendezvous. `python zero1.py [MISTAKE] --out DIR ...`: with a MISTAKE it makes that
one, the way students make it (tests/students/README.md lists them).

The suite never sees this code: it grades it as a command, like any student's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

MISTAKES = ("whole_batch", "whole_batch_no_reduction", "allreduce_then_slice",
            "grads_never_cleared")
# Correct variants, another way to write the same thing: `flat_state` keeps the master and
# both moments as views of one flat buffer of 3S elements (one allocation, one storage);
# `pg_methods` makes every collective through the default ProcessGroup object's own methods
# (`pg.allreduce([t]).wait()`, `pg._reduce_scatter_base(...)`), as low-level examples do.
STYLES = ("flat_state", "pg_methods")
V, T, C, H, L = 64, 16, 32, 4, 2  # vocabulary, context, width, heads, blocks


def init_weights(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * 0.02

    w = {"wte": randn(V, C), "wpe": randn(T, C), "lnf.w": torch.ones(C),
         "lnf.b": torch.zeros(C), "head": randn(C, V)}
    for i in range(L):
        w |= {f"{i}.ln1.w": torch.ones(C), f"{i}.ln1.b": torch.zeros(C),
              f"{i}.qkv.w": randn(C, 3 * C), f"{i}.qkv.b": torch.zeros(3 * C),
              f"{i}.proj.w": randn(C, C), f"{i}.proj.b": torch.zeros(C),
              f"{i}.ln2.w": torch.ones(C), f"{i}.ln2.b": torch.zeros(C),
              f"{i}.fc.w": randn(C, 4 * C), f"{i}.fc.b": torch.zeros(4 * C),
              f"{i}.out.w": randn(4 * C, C), f"{i}.out.b": torch.zeros(C)}
    return w


def forward(w: dict[str, torch.Tensor], idx: torch.Tensor, targets: torch.Tensor
            ) -> torch.Tensor:
    b, t = idx.shape
    x = w["wte"][idx] + w["wpe"][:t]
    for i in range(L):
        h = F.layer_norm(x, (C,), w[f"{i}.ln1.w"], w[f"{i}.ln1.b"])
        q, k, v = (h @ w[f"{i}.qkv.w"] + w[f"{i}.qkv.b"]).split(C, dim=-1)
        q, k, v = (z.view(b, t, H, C // H).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + a.transpose(1, 2).reshape(b, t, C) @ w[f"{i}.proj.w"] + w[f"{i}.proj.b"]
        h = F.layer_norm(x, (C,), w[f"{i}.ln2.w"], w[f"{i}.ln2.b"])
        x = x + F.gelu(h @ w[f"{i}.fc.w"] + w[f"{i}.fc.b"]) @ w[f"{i}.out.w"] + w[f"{i}.out.b"]
    logp = F.log_softmax(F.layer_norm(x, (C,), w["lnf.w"], w["lnf.b"]) @ w["head"], dim=-1)
    return -logp.gather(-1, targets.unsqueeze(-1)).mean()


class ByProcessGroup:
    """The `pg_methods` style: torch.distributed's functions' names, each made by a method of
    the default process group and waited on, never by the function itself."""

    def __init__(self) -> None:
        self.pg = dist.distributed_c10d._get_default_group()

    def barrier(self) -> None:
        self.pg.barrier().wait()

    def broadcast(self, t: torch.Tensor, src: int) -> None:
        self.pg.broadcast(t, src).wait()

    def all_reduce(self, t: torch.Tensor) -> None:
        self.pg.allreduce([t]).wait()

    def reduce_scatter_tensor(self, out: torch.Tensor, inp: torch.Tensor) -> None:
        self.pg._reduce_scatter_base(out, inp, dist.ReduceScatterOptions()).wait()

    def all_gather_into_tensor(self, out: torch.Tensor, inp: torch.Tensor) -> None:
        self.pg._allgather_base(out, inp).wait()

    def all_gather(self, outs: list[torch.Tensor], t: torch.Tensor) -> None:
        self.pg.allgather([outs], [t]).wait()


coll: Any = dist  # what makes the collectives: torch.distributed, or ByProcessGroup


def save_checkpoint(out: Path, step: int, rank: int, n: int, P: int,
                    state: dict[str, object]) -> None:
    tmp = out / "checkpoints" / f".step-{step:06d}"
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    coll.barrier()
    torch.save(state, tmp / f"rank-{rank}.pt")
    coll.barrier()
    if rank == 0:
        shards = [{"rank": r, "file": f"rank-{r}.pt",
                   "sha256": hashlib.sha256((tmp / f"rank-{r}.pt").read_bytes()).hexdigest(),
                   "bytes": (tmp / f"rank-{r}.pt").stat().st_size} for r in range(n)]
        (tmp / "manifest.json").write_text(json.dumps(
            {"contract": 1, "step": step, "world_size": n, "n_params": P, "shards": shards}))
        tmp.rename(out / "checkpoints" / f"step-{step:06d}")
    coll.barrier()


def train(rank: int, a: argparse.Namespace) -> None:
    n, B = a.world_size, a.batch_size
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{a.out}/.rendezvous", rank=rank,
                            world_size=n)
    global coll
    coll = ByProcessGroup() if a.mistake == "pg_methods" else dist
    w = init_weights(a.seed * 1000 + rank)  # every rank draws its own; rank 0's are broadcast
    names = list(w)
    P = sum(t.numel() for t in w.values())
    S = math.ceil(P / n)
    flat = torch.zeros(S * n)
    flat[:P].copy_(torch.cat([w[k].reshape(-1) for k in names]))
    coll.broadcast(flat, src=0)
    g = torch.Generator().manual_seed(a.seed)  # rows count up from a random token by 1..3
    first = torch.randint(0, V, (n * B, 1), generator=g)
    stride = torch.randint(1, 4, (n * B, 1), generator=g)
    data = (first + stride * torch.arange(T + 1)) % V
    rows = data if a.mistake in ("whole_batch", "whole_batch_no_reduction") \
        else data[rank * B:(rank + 1) * B]
    x, y = rows[:, :-1], rows[:, 1:]

    if a.mistake == "flat_state":
        state = torch.zeros(3 * S)
        master, exp_avg, exp_avg_sq = state.split(S)  # views of one storage
        master.copy_(flat[rank * S:(rank + 1) * S]).requires_grad_(True)
    else:
        master = flat[rank * S:(rank + 1) * S].clone().requires_grad_(True)
        exp_avg, exp_avg_sq = torch.zeros(S), torch.zeros(S)
    opt = torch.optim.Adam([master], lr=0.01)
    opt.state[master] = {"step": torch.tensor(0.0), "exp_avg": exp_avg,
                         "exp_avg_sq": exp_avg_sq}  # allocated up front: 12S bytes

    def load(shard: dict[str, torch.Tensor]) -> None:
        """Into the tensors the optimizer already has (so the flat buffer stays one)."""
        st = opt.state[master]
        with torch.no_grad():
            for name, t in (("master", master), ("exp_avg", st["exp_avg"]),
                            ("exp_avg_sq", st["exp_avg_sq"])):
                t.copy_(shard[name])
        st["step"] = torch.tensor(float(shard["step"]))

    start = 0
    if a.resume:
        shard = torch.load(Path(a.resume) / f"rank-{rank}.pt", weights_only=True)
        start = json.loads((Path(a.resume) / "manifest.json").read_text())["step"]
        load(shard)
        coll.all_gather_into_tensor(flat, master.detach())

    params = {}

    def unflatten() -> None:
        offset = 0
        for k in names:
            params[k] = flat[offset:offset + w[k].numel()].view_as(w[k]).clone() \
                .requires_grad_(True)
            offset += w[k].numel()
    unflatten()

    metrics = open(a.out / "metrics" / f"rank-{rank}.jsonl", "a")  # noqa: SIM115

    def log(rec: dict[str, object]) -> None:
        metrics.write(json.dumps(rec) + "\n")
        metrics.flush()

    def opt_bytes() -> int:
        st = opt.state[master]
        return sum(t.numel() * 4 for t in (master, st["exp_avg"], st["exp_avg_sq"]))

    def pnorm() -> float:
        return float(flat[:P].to(torch.float64).norm())

    if not a.resume:
        log({"step": 0, "rank": rank, "world_size": n, "param_norm": pnorm(),
             "optimizer_bytes": opt_bytes()})
    kind, _, at = (a.inject or "none@0").partition("@")
    fired, prev_loss, step, grads = False, None, start + 1, torch.zeros(S * n)
    rollbacks = 0  # in a row
    while step <= a.steps:
        if a.mistake != "grads_never_cleared":
            grads.zero_()
        loss = forward(params, x, y)
        grads[:P] += torch.cat([g.reshape(-1) for g in torch.autograd.grad(
            loss, [params[k] for k in names])])  # functional: no .backward(), no .grad
        if kind == "nan" and step == int(at) and not fired and rank == 0:
            grads[:P] = float("nan")
        shard_grad = torch.empty(S)
        if a.mistake == "allreduce_then_slice":
            full = grads.clone()
            coll.all_reduce(full)
            shard_grad = full[rank * S:(rank + 1) * S] / n
        elif a.mistake == "whole_batch_no_reduction":
            shard_grad = grads[rank * S:(rank + 1) * S].clone()
        else:
            coll.reduce_scatter_tensor(shard_grad, grads.clone())
            shard_grad /= n
        stats = torch.stack([loss.detach().double(), shard_grad.double().square().sum()])
        coll.all_reduce(stats)
        mean_loss, grad_norm = float(stats[0] / n), float(stats[1].sqrt())
        bad = not math.isfinite(mean_loss) or not math.isfinite(grad_norm) or (
            prev_loss is not None and mean_loss > 2 * prev_loss)
        if bad:
            fired, rollbacks = fired or kind in ("nan", "spike"), rollbacks + 1
            done = sorted((a.out / "checkpoints").glob("step-*"))
            if not done or rollbacks > 3:
                raise SystemExit(f"rank {rank}: diverged at step {step}, giving up")
            shard = torch.load(done[-1] / f"rank-{rank}.pt", weights_only=True)
            back = json.loads((done[-1] / "manifest.json").read_text())["step"]
            load(shard)
            coll.all_gather_into_tensor(flat, master.detach())
            unflatten()
            log({"event": "rollback", "rank": rank, "step": step, "to_step": back,
                 "reason": "nan" if not math.isfinite(grad_norm) else "spike"})
            prev_loss, step = None, back + 1
            continue
        master.grad = shard_grad
        if kind == "spike" and step == int(at) and not fired:
            opt.param_groups[0]["lr"] = 10.0
            fired = True
        opt.step()
        opt.param_groups[0]["lr"] = 0.01
        coll.all_gather(list(flat.split(S)), master.detach())  # the tutorials' list form
        unflatten()
        prev_loss, rollbacks = mean_loss, 0
        log({"step": step, "rank": rank, "world_size": n, "param_norm": pnorm(),
             "optimizer_bytes": opt_bytes(), "loss": mean_loss, "grad_norm": grad_norm,
             "step_time_s": 0.0})
        if a.checkpoint_every and step % a.checkpoint_every == 0:
            st = opt.state[master]
            save_checkpoint(a.out, step, rank, n, P, {
                "master": master.detach().clone(), "exp_avg": st["exp_avg"].clone(),
                "exp_avg_sq": st["exp_avg_sq"].clone(), "step": int(st["step"])})
        step += 1
    if rank == 0:
        (a.out / "summary.json").write_text(json.dumps(
            {"contract": 1, "n_params": P, "world_size": n, "steps": a.steps}))
    dist.destroy_process_group()


def main(argv: list[str]) -> None:
    mistake = argv.pop(0) if argv and argv[0] in MISTAKES + STYLES else None
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    for flag, default in (("--world-size", 4), ("--steps", 20), ("--seed", 0),
                          ("--batch-size", 4), ("--checkpoint-every", 10)):
        ap.add_argument(flag, type=int, default=default)
    ap.add_argument("--resume")
    ap.add_argument("--inject")
    a = ap.parse_args(argv)
    a.mistake = mistake
    (a.out / "metrics").mkdir(parents=True, exist_ok=True)
    (a.out / "checkpoints").mkdir(exist_ok=True)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])  # its lazy imports, once, pre-fork
    mp.start_processes(train, args=(a,), nprocs=a.world_size, start_method="fork")


if __name__ == "__main__":
    main(sys.argv[1:])

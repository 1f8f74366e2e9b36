"""A second student's run contract v1, written from the lesson alone in another style than
zero1.py and capstone/: an nn.Module MiniGPT (nn.Embedding, nn.Linear, F.cross_entropy),
ranks started as subprocesses of this script that meet through env:// on the tutorials'
fixed port 12355, an async reduce_scatter_tensor waited on after the loss is gathered to
rank 0 and broadcast back, Adam written by hand out of place (`m = b1 * m + (1 - b1) * g`:
new tensors every step), and the manifest's hashes collected with gather_object. Correct.

The suite never sees this code: it grades it as a command, like any student's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

V, T, C, H, L = 64, 16, 32, 4, 2  # vocabulary, context, width, heads, blocks
LR, B1, B2, EPS = 0.01, 0.9, 0.999, 1e-8


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.out = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=-1)
        q, k, v = (z.view(b, t, H, C // H).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
        att = att.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf"))
        x = x + self.proj((att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, C))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.lnf, self.head = nn.LayerNorm(C), nn.Linear(C, V, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1)))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.lnf(x))
        return F.cross_entropy(logits.view(-1, V), targets.reshape(-1))


class Shard:
    """This rank's slice of the flat parameters and its Adam state, updated out of place."""

    def __init__(self, master: torch.Tensor) -> None:
        self.master, self.m, self.v, self.t = master, torch.zeros_like(master), \
            torch.zeros_like(master), 0

    def step(self, g: torch.Tensor, lr: float) -> None:
        self.t += 1
        self.m = B1 * self.m + (1 - B1) * g
        self.v = B2 * self.v + (1 - B2) * g * g
        m_hat, v_hat = self.m / (1 - B1 ** self.t), self.v / (1 - B2 ** self.t)
        self.master = self.master - lr * m_hat / (v_hat.sqrt() + EPS)

    def nbytes(self) -> int:
        return 4 * (self.master.numel() + self.m.numel() + self.v.numel())

    def state(self) -> dict[str, object]:
        return {"master": self.master.clone(), "exp_avg": self.m.clone(),
                "exp_avg_sq": self.v.clone(), "step": self.t}

    def load(self, ckpt: Path, rank: int) -> int:
        """Restore from a checkpoint directory; returns its step."""
        shard = torch.load(ckpt / f"rank-{rank}.pt", weights_only=True)
        self.master, self.m, self.v = (shard[k].clone() for k in
                                       ("master", "exp_avg", "exp_avg_sq"))
        self.t = int(shard["step"])
        return int(json.loads((ckpt / "manifest.json").read_text())["step"])


def save(out: Path, step: int, rank: int, n: int, P: int, state: dict[str, object]) -> None:
    tmp = out / "checkpoints" / f".tmp-{step}"
    if rank == 0:
        tmp.mkdir(parents=True, exist_ok=True)
    dist.barrier()
    path = tmp / f"rank-{rank}.pt"
    torch.save(state, path)
    mine = (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_size)
    everyone: list[tuple[str, int]] | None = [("", 0)] * n if rank == 0 else None
    dist.gather_object(mine, everyone, dst=0)
    if rank == 0 and everyone is not None:
        shards = [{"rank": r, "file": f"rank-{r}.pt", "sha256": h, "bytes": b}
                  for r, (h, b) in enumerate(everyone)]
        (tmp / "manifest.json").write_text(json.dumps(
            {"contract": 1, "step": step, "world_size": n, "n_params": P, "shards": shards}))
        tmp.rename(out / "checkpoints" / f"step-{step:06d}")
    dist.barrier()


def train(a: argparse.Namespace) -> None:
    rank, n, B = int(os.environ["RANK"]), a.world_size, a.batch_size
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    torch.manual_seed(a.seed * 1000 + rank)  # each rank its own; rank 0's are broadcast
    model = GPT()
    params = list(model.parameters())
    P = sum(p.numel() for p in params)
    S = math.ceil(P / n)
    flat = torch.zeros(S * n)
    with torch.no_grad():
        flat[:P] = torch.cat([p.reshape(-1) for p in params])
    dist.broadcast(flat, src=0)

    def to_model() -> None:
        with torch.no_grad():
            offset = 0
            for p in params:
                p.copy_(flat[offset:offset + p.numel()].view_as(p))
                offset += p.numel()
    to_model()
    data = torch.randint(0, V, (n * B, T + 1), generator=torch.Generator().manual_seed(a.seed))
    x, y = data[rank * B:(rank + 1) * B, :-1], data[rank * B:(rank + 1) * B, 1:]
    shard, start = Shard(flat[rank * S:(rank + 1) * S].clone()), 0
    if a.resume:
        start = shard.load(Path(a.resume), rank)
        dist.all_gather_into_tensor(flat, shard.master)
        to_model()
    metrics = open(a.out / "metrics" / f"rank-{rank}.jsonl", "a")  # noqa: SIM115

    def log(record: dict[str, object]) -> None:
        metrics.write(json.dumps({"rank": rank, "world_size": n, **record}) + "\n")
        metrics.flush()

    def norm() -> float:
        return float(flat[:P].double().norm())

    if not a.resume:
        log({"step": 0, "param_norm": norm(), "optimizer_bytes": shard.nbytes()})
    kind, _, at = (a.inject or "none@0").partition("@")
    fired, prev, step, in_a_row = False, None, start + 1, 0
    while step <= a.steps:
        model.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        grads = torch.zeros(S * n)
        grads[:P] = torch.cat([p.grad.reshape(-1) for p in params])  # type: ignore[union-attr]
        if kind == "nan" and int(at) == step and not fired and rank == 0:
            grads[:P] = float("nan")
        mine = torch.empty(S)
        pending = dist.reduce_scatter_tensor(mine, grads, async_op=True)
        losses = [torch.zeros(1) for _ in range(n)] if rank == 0 else None
        dist.gather(loss.detach().reshape(1), losses, dst=0)
        mean = torch.cat(losses).mean().reshape(1) if losses else torch.zeros(1)
        dist.broadcast(mean, src=0)
        assert pending is not None
        pending.wait()
        mine /= n
        square = mine.double().square().sum().reshape(1)
        dist.all_reduce(square)
        mean_loss, grad_norm = float(mean), float(square.sqrt())
        if not (math.isfinite(mean_loss) and math.isfinite(grad_norm)) or (
                prev is not None and mean_loss > 2 * prev):
            fired, in_a_row = True, in_a_row + 1
            done = sorted((a.out / "checkpoints").glob("step-*"))
            if not done or in_a_row > 3:
                raise SystemExit(f"rank {rank}: diverged at step {step}, giving up")
            back = shard.load(done[-1], rank)
            dist.all_gather_into_tensor(flat, shard.master)
            to_model()
            log({"event": "rollback", "step": step, "to_step": back,
                 "reason": "nan" if not math.isfinite(grad_norm) else "spike"})
            prev, step = None, back + 1
            continue
        spike = kind == "spike" and int(at) == step and not fired
        fired = fired or spike
        shard.step(mine, LR * (1000 if spike else 1))
        dist.all_gather_into_tensor(flat, shard.master)
        to_model()
        prev, in_a_row = mean_loss, 0
        log({"step": step, "param_norm": norm(), "optimizer_bytes": shard.nbytes(),
             "loss": mean_loss, "grad_norm": grad_norm, "step_time_s": 0.0})
        if a.checkpoint_every and step % a.checkpoint_every == 0:
            save(a.out, step, rank, n, P, shard.state())
        step += 1
    if rank == 0:
        (a.out / "summary.json").write_text(json.dumps(
            {"contract": 1, "n_params": P, "world_size": n, "steps": a.steps}))
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description="MiniGPT with ZeRO-1 (run contract v1)")
    ap.add_argument("--out", type=Path, required=True, help="run directory")
    ap.add_argument("--world-size", type=int, default=4, help="data-parallel ranks")
    ap.add_argument("--steps", type=int, default=20, help="last step")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=4, help="sequences per rank per step")
    ap.add_argument("--checkpoint-every", type=int, default=10, help="0: never")
    ap.add_argument("--resume", help="a checkpoint directory to start from")
    ap.add_argument("--inject", help="KIND@STEP: nan or spike")
    a = ap.parse_args()
    if "RANK" in os.environ:
        train(a)
        return
    (a.out / "metrics").mkdir(parents=True, exist_ok=True)
    (a.out / "checkpoints").mkdir(exist_ok=True)
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT="12355",
               WORLD_SIZE=str(a.world_size))
    ranks = [subprocess.Popen([sys.executable, *sys.argv], env=dict(env, RANK=str(r)))
             for r in range(a.world_size)]
    sys.exit(max(p.wait() for p in ranks))


if __name__ == "__main__":
    main()

"""What the programs of the style corpus share: the lesson's MiniGPT as an `nn.Module`, the
contract's flags, data and files, and a ZeRO-1 training loop whose parts a style replaces.

Each style (a file beside this one) is a correct run contract v1 written the way part of the
ecosystem writes it, and differs from the reference in what the suite infers from: how the
ranks start (mp.spawn, multiprocessing.Process, subprocesses, torchrun), how the shard is held
and stepped (a flat `nn.Parameter` under `torch.optim.Adam`, a `torch.optim.Optimizer` of its
own), how the gradient is computed (`.backward()` or `torch.autograd.grad`), and who writes
the checkpoint (the loop, or a background thread). The suite never imports any of it: it runs
each file as a command, as it runs a student's.

Each also does the lesson's exercise 2 (`--micro-batches M`) the way its style would: the
micro-batches' gradients summed into a flat buffer (`.backward()`), summed from
`torch.autograd.grad` (the `use_grad` style), or left in DDP's gradients under `no_sync` until
the last micro-batch's backward reduces them (the `ddp` style).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apis
import heads
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import ways
from hooks import HookedReduce
from saver import Saver

V, T, C, H, L = 64, 16, 32, 4, 2  # vocabulary, context, width, heads, blocks
LR = 0.01


class Block(nn.Module):
    def __init__(self, attention: str = "fused_qkv") -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        # The same P every way: q, k and v fused in one projection, three projections, or
        # torch's nn.MultiheadAttention (its in_proj and out_proj)
        if attention == "separate_qkv":
            self.q, self.k, self.v = nn.Linear(C, C), nn.Linear(C, C), nn.Linear(C, C)
        elif attention == "mha":
            self.mha = nn.MultiheadAttention(C, H, batch_first=True)
        else:
            self.qkv = nn.Linear(C, 3 * C)
        if attention != "mha":
            self.proj = nn.Linear(C, C)
        self.fc, self.out = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.heads: nn.Module | None = None  # exercise 1: this rank's heads (heads.py)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (b, t, C) -> (b, t, C)
        if self.heads is not None:
            x = x + self.heads(self.ln1(x))
        elif hasattr(self, "mha"):
            h, t = self.ln1(x), x.size(1)
            causal = torch.ones(t, t, dtype=torch.bool).triu(1)  # True: not attended
            x = x + self.mha(h, h, h, attn_mask=causal, need_weights=False)[0]
        else:
            b, t, _ = x.shape
            h = self.ln1(x)
            q, k, v = (self.qkv(h).split(C, dim=-1) if hasattr(self, "qkv")
                       else (self.q(h), self.k(h), self.v(h)))
            q, k, v = (z.view(b, t, H, C // H).transpose(1, 2) for z in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, C))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class MiniGPT(nn.Module):
    def __init__(self, attention: str = "fused_qkv", remat: str = "") -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(attention) for _ in range(L))
        self.lnf, self.head = nn.LayerNorm(C), nn.Linear(C, V, bias=False)
        self.remat = remat  # activation checkpointing of each block: "", reentrant or not

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1)))  # (b, t, C)
        for block in self.blocks:
            x = (checkpoint(block, x, use_reentrant=self.remat == "reentrant")
                 if self.remat else block(x))
        logits = self.head(self.lnf(x))  # (b, t, V)
        return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))


def parse(argv: list[str], tensor_parallel: bool = True) -> argparse.Namespace:
    """The contract's flags (and the exercises'; --tensor-parallel only where the style
    implements it: elsewhere it is an unknown flag, exit 2)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    for flag, default in (("--world-size", 4), ("--steps", 20), ("--seed", 0),
                          ("--batch-size", 4), ("--checkpoint-every", 10),
                          ("--micro-batches", 1)):
        ap.add_argument(flag, type=int, default=default)
    ap.add_argument("--resume")
    ap.add_argument("--inject")
    if tensor_parallel:
        ap.add_argument("--tensor-parallel", type=int, default=1)
    a = ap.parse_args(argv)
    a.tensor_parallel = getattr(a, "tensor_parallel", 1)
    if a.tensor_parallel > 1 and (a.world_size % a.tensor_parallel or H % a.tensor_parallel):
        ap.error("--tensor-parallel T must divide --world-size and the heads")
    (a.out / "metrics").mkdir(parents=True, exist_ok=True)
    (a.out / "checkpoints").mkdir(exist_ok=True)
    return a


def rows(seed: int, n: int, b: int, rank: int,
         strided: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's B rows of the global batch of N*B (a function of seed and N*B): a
    contiguous block, or (`strided`) rows rank, rank+N, ... as DistributedSampler deals."""
    g = torch.Generator().manual_seed(seed)
    first = torch.randint(0, V, (n * b, 1), generator=g)
    stride = torch.randint(1, 4, (n * b, 1), generator=g)
    data = (first + stride * torch.arange(T + 1)) % V
    mine = data[rank::n] if strided else data[rank * b:(rank + 1) * b]
    return mine[:, :-1], mine[:, 1:]


class ShardOpt:
    """How a rank holds and steps its shard (the style decides)."""

    def __init__(self, master: torch.Tensor) -> None:
        raise NotImplementedError

    def step(self, grad: torch.Tensor, lr: float) -> torch.Tensor:
        """Update the slice from its reduced gradient; the new master values."""
        raise NotImplementedError

    def state(self) -> dict[str, torch.Tensor]:
        """master, exp_avg and exp_avg_sq as the rank holds them."""
        raise NotImplementedError

    def load(self, state: dict[str, torch.Tensor], step: int) -> None:
        raise NotImplementedError

    def steps(self) -> int:
        raise NotImplementedError


class AdamShard(ShardOpt):
    """The flat shard as an `nn.Parameter` stepped by torch's Adam, as torch's
    ZeroRedundancyOptimizer and FSDP hold theirs: a Parameter no backward reaches."""

    def __init__(self, master: torch.Tensor) -> None:
        self.p = nn.Parameter(master.clone())
        self.opt = torch.optim.Adam([self.p], lr=LR)

    def step(self, grad: torch.Tensor, lr: float) -> torch.Tensor:
        self.p.grad = grad
        self.opt.param_groups[0]["lr"] = lr
        self.opt.step()
        return self.p.detach()

    def state(self) -> dict[str, torch.Tensor]:
        st = self.opt.state.get(self.p) or {"exp_avg": torch.zeros_like(self.p),
                                            "exp_avg_sq": torch.zeros_like(self.p)}
        return {"master": self.p.detach(), "exp_avg": st["exp_avg"],
                "exp_avg_sq": st["exp_avg_sq"]}

    def load(self, state: dict[str, torch.Tensor], step: int) -> None:
        with torch.no_grad():
            self.p.copy_(state["master"])
        self.opt.state[self.p] = {"step": torch.tensor(float(step)),
                                  "exp_avg": state["exp_avg"].clone(),
                                  "exp_avg_sq": state["exp_avg_sq"].clone()}

    def steps(self) -> int:
        st = self.opt.state.get(self.p)
        return int(st["step"]) if st else 0


@dataclass
class Style:
    """The parts a style replaces; the defaults are the plainest way."""

    shard: type[ShardOpt] = AdamShard  # how the shard is held and stepped
    use_grad: bool = False  # torch.autograd.grad instead of .backward()
    thread_save: bool = False  # a background thread writes the checkpoint
    rename_save: bool = False  # each shard written beside the step's directory, renamed in
    strided: bool = False  # this rank's rows strided over the global batch, as a sampler's
    loss_first: bool = False  # the guard tests the loss before the backward, the norm after
    reduce_fraction: float = 1.0  # a mistake: reduce only this much of the gradient
    ddp: bool = False  # DDP's backward, its comm hook reduce-scattering (ZeroHook)
    sum_micro: bool = False  # a mistake: micro-batch gradients summed, not divided by M
    tp: str = "hand"  # exercise 1's heads: the f/g pair by hand, or "dtensor" (heads.py)
    mesh: bool = False  # its groups from a DeviceMesh, else from dist.new_group
    bias_first: bool = False  # the output projection's bias on tensor-parallel rank 0 only
    # The style space's knobs (space.py): how the collectives are written (ways.py), the
    # model, activation checkpointing, micro-batches inside a step, where the mean is taken,
    # the group the collectives use and gradient clipping.
    reduce: str = "reduce_scatter_tensor"
    gather: str = "all_gather_into_tensor"
    attention: str = "fused_qkv"  # or separate_qkv, or mha (nn.MultiheadAttention)
    functional: bool = False  # torch.func.functional_call over a dict of plain tensors
    remat: str = ""  # "reentrant" or "non_reentrant" activation checkpointing
    micro: int = 1  # micro-batches of each step (without --micro-batches)
    mean_first: bool = False  # each rank divides by N before the reduction
    new_group: bool = False  # the collectives over dist.new_group(every rank)
    clip: float = 0.0  # clip the global gradient to this norm (0: no clipping)
    mistake: str = ""  # one of the lesson's mistakes, written in whatever style (knobs.py)
    api: str = "functions"  # what makes the collectives (apis.py)


def reduce_slice(full: torch.Tensor, rank: int, n: int, fraction: float = 1.0,
                 group: Any = None, form: str = "reduce_scatter_tensor",
                 mean_first: bool = False) -> torch.Tensor:
    """This rank's slice of the rank-averaged gradient: a reduce-scatter of the flat padded
    vector, written as `form` (ways.py), averaged after the sum or (`mean_first`) before.
    `fraction` < 1 is a mistake: only that much of each slice is reduced, the rest taken
    from this rank's own gradient."""
    S = full.numel() // n
    mine = torch.empty(S)
    k = round(S * fraction)
    by_rank = full.view(n, S)
    if k < S:
        apis.coll.reduce_scatter_tensor(mine[:k], by_rank[:, :k].contiguous().view(-1),
                                   group=group)
        mine[k:] = by_rank[rank, k:] * n
    elif mean_first:
        return ways.reduce_scatter(form, full / n, group)
    else:
        mine = ways.reduce_scatter(form, full, group)
    return mine / n


class ZeroHook:
    """DDP for the gradient, ZeRO-1's update apart: a comm hook that reduce-scatters DDP's
    bucket (in the model's parameter order) instead of all-reducing it, leaving this rank's
    slice in `mine`. DDP's own gradients stay local; only the slice is used."""

    def __init__(self, params: list[torch.Tensor], rank: int, n: int, S: int) -> None:
        self.rank, self.n, self.S = rank, n, S
        self.offsets, at = {}, 0
        for p in params:
            self.offsets[id(p)], at = at, at + p.numel()
        self.P, self.poison = at, False
        self.mine = torch.empty(S)

    def reduce_scatter(self, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        full = torch.zeros(self.S * self.n)
        for p, g in zip(bucket.parameters(), bucket.gradients(), strict=True):
            full[self.offsets[id(p)]:self.offsets[id(p)] + g.numel()] = g.reshape(-1)
        if sum(g.numel() for g in bucket.gradients()) != self.P:
            raise RuntimeError("the model must fit one DDP bucket: raise bucket_cap_mb")
        if self.poison:
            full[:self.P] = float("nan")
        self.mine = reduce_slice(full, self.rank, self.n)
        done: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        done.set_result(bucket.buffer())
        return done


def train(rank: int, n: int, a: argparse.Namespace, style: Style) -> None:
    """One rank of ZeRO-1 (the process group is already up)."""
    torch.set_num_threads(1)
    apis.use(style.api)
    wrong = style.mistake
    torch.manual_seed(a.seed + (rank if wrong == "no_broadcast" else 0))  # else the same
    model = MiniGPT(style.attention, style.remat)
    P_model = sum(p.numel() for p in model.parameters())  # summary.json's n_params
    tp = a.tensor_parallel  # exercise 1: ZeRO-1 over the data-parallel group of N/T ranks
    groups = heads.make_groups(rank, n, tp, style.mesh) if tp > 1 else None
    world_rank, rank, n = rank, groups.dp_rank if groups else rank, n // tp
    dp = groups.dp if groups else (dist.new_group(list(range(n))) if style.new_group else None)
    if groups is not None:  # the same full model on every rank, then each keeps its heads
        for block in model.blocks:
            qkv: Any
            if hasattr(block, "mha"):  # nn.MultiheadAttention's in_proj is a fused q, k, v
                mha: Any = block.mha
                qkv, proj = nn.Linear(C, 3 * C), mha.out_proj
                with torch.no_grad():
                    qkv.weight.copy_(mha.in_proj_weight)
                    qkv.bias.copy_(mha.in_proj_bias)
                del block.mha
            else:
                qkv = (block.q, block.k, block.v) if hasattr(block, "q") else block.qkv
                proj = block.proj
                for name in ("q", "k", "v", "qkv", "proj"):
                    if hasattr(block, name):
                        delattr(block, name)
            block.heads = heads.HeadAttention(qkv, proj, H, groups, tp, style.tp,
                                              style.bias_first)
            heads.mark(block.heads)
    params: list[torch.Tensor] = list(model.parameters())
    weights: dict[str, torch.Tensor] = {}
    if style.functional:  # the model's parameters as a dict of plain tensors, its forward
        weights = {k: p.detach().clone().requires_grad_() for k, p in  # functional_call's
                   model.named_parameters()}
        params = list(weights.values())
    held = [heads.local(p) for p in params]  # a DTensor's shard: what this rank holds
    P = sum(p.numel() for p in held)
    S = math.ceil(P / n)
    flat = torch.zeros(S * n)
    split = torch.zeros(S * n, dtype=torch.bool)  # elements of tensor-parallel slices
    split[:P] = torch.cat([torch.full((h.numel(),), heads.sharded(p))
                           for p, h in zip(params, held, strict=True)])

    def to_model() -> None:
        with torch.no_grad():
            torch.nn.utils.vector_to_parameters(flat[:P], held)

    with torch.no_grad():
        flat[:P] = torch.nn.utils.parameters_to_vector(held)
    if wrong != "no_broadcast":
        apis.coll.broadcast(flat, src=groups.dp_src if groups else 0, group=dp)
    shard = style.shard(flat[rank * S:(rank + 1) * S])
    start = 0
    if a.resume:
        start = json.loads((Path(a.resume) / "manifest.json").read_text())["step"]
        saved = torch.load(Path(a.resume) / f"rank-{world_rank}.pt", weights_only=True)
        shard.load(saved, saved["step"])
        ways.all_gather(style.gather, flat, shard.state()["master"], dp)
    to_model()
    # a tensor-parallel group's rows: its dp rank's
    x, y = rows(a.seed, n, a.batch_size, 0 if wrong == "same_rows" else rank, style.strided)
    def call(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:  # over the dict's tensors
        return torch.func.functional_call(model, weights, (xs, ys))

    forward: Any = call if style.functional else model
    hook: ZeroHook | None = None
    if style.ddp:
        from torch.nn.parallel import DistributedDataParallel as DDP

        ddp = DDP(model)
        forward, hook = ddp, ZeroHook(params, rank, n, S)
        # DDP reads a hook's annotations, which `from __future__ import annotations` turns
        # into strings it rejects: hand it an unannotated callable
        forward.register_comm_hook(hook, lambda h, bucket: h.reduce_scatter(bucket))
    metrics = open(a.out / "metrics" / f"rank-{world_rank}.jsonl", "a")  # noqa: SIM115

    def log(rec: dict[str, object]) -> None:
        metrics.write(json.dumps(rec) + "\n")
        metrics.flush()

    def record(step: int, **extra: object) -> dict[str, object]:
        return {"step": step, "rank": world_rank, "world_size": n * tp,
                "param_norm": float(flat[:P].double().norm()),
                "optimizer_bytes": sum(t.numel() * 4 for t in shard.state().values()), **extra}

    if not a.resume:
        log(record(0))
    kind, _, at = (a.inject or "none@0").partition("@")
    fired, prev, step, in_a_row = False, None, start + 1, 0
    # A shard per rank (of its own parameters, over its data-parallel group): resumed by the
    # same mesh, each rank from its own file.
    saver = Saver(a.out, world_rank, n * tp, P_model, style.thread_save, style.rename_save)
    m = a.micro_batches  # exercise 2: M micro-batches of B/M rows, one reduction per step
    if m == 1 and a.batch_size % style.micro == 0:  # the style's own micro-batches
        m = style.micro
    if wrong == "reduce_per_micro" and m == 1 and a.batch_size % 2 == 0:
        m = 2  # a reduction per micro-batch needs two
    if a.batch_size % m:
        raise SystemExit(f"--batch-size {a.batch_size} does not split into {m} micro-batches")
    micro = list(zip(x.chunk(m), y.chunk(m), strict=True))
    scale = 1 if style.sum_micro else m
    hooked = HookedReduce(params, S, n, dp, style.mean_first) \
        if style.reduce == "grad_hooks" else None

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
        saved = torch.load(done[-1] / f"rank-{world_rank}.pt", weights_only=True)
        shard.load(saved, saved["step"])
        ways.all_gather(style.gather, flat, shard.state()["master"], dp)
        to_model()
        log({"event": "rollback", "rank": world_rank, "step": step, "to_step": back,
             "reason": reason})
        return back + 1, None, in_a_row

    while step <= a.steps:
        for p in params:
            p.grad = None
        poison = kind == "nan" and step == int(at) and not fired and rank == 0
        losses = []
        if hook is not None:  # DDP's backward: its comm hook reduce-scatters the gradient,
            hook.poison = poison  # deferred (no_sync) to the last micro-batch's backward
            for i, (xs, ys) in enumerate(micro):
                with ddp.no_sync() if i < m - 1 else contextlib.nullcontext():
                    part = forward(xs, ys)
                    (part / scale).backward()
                losses.append(part.detach())
            mine = hook.mine
        else:  # the micro-batches' gradients summed into a flat buffer, reduced once
            full = torch.zeros(S * n)
            reduced = torch.zeros(S)  # the mistake reduce_per_micro's sum of reductions
            parts = [forward(xs, ys) for xs, ys in micro] if style.loss_first else []
            if parts and wrong != "no_guard":  # the guard on the loss, before any backward
                early = torch.stack(parts).detach().mean().double().reshape(1)
                apis.coll.all_reduce(early)
                early_loss = float(early[0]) / (n * tp)
                if not math.isfinite(early_loss) or (prev is not None and
                                                     early_loss > 2 * prev):
                    step, prev, in_a_row = roll_back(step, "spike" if math.isfinite(
                        early_loss) else "nan", in_a_row)
                    continue
            for i, (xs, ys) in enumerate(micro):
                part = parts[i] if parts else forward(xs, ys)
                if hooked is not None:  # its hooks take the gradients as they land
                    hooked.expect(last=i == m - 1 or wrong == "reduce_per_micro")
                    (part / scale).backward()
                    losses.append(part.detach())
                    continue
                if style.use_grad:
                    grads = tuple(heads.local(g)
                                  for g in torch.autograd.grad(part / scale, params))
                else:
                    (part / scale).backward()
                    grads = tuple(heads.local(p.grad) if p.grad is not None
                                  else torch.zeros_like(h) for p, h in zip(params, held,
                                                                           strict=True))
                    for p in params:
                        p.grad = None
                full[:P] += torch.cat([g.reshape(-1) for g in grads])
                losses.append(part.detach())
                if wrong == "reduce_per_micro":  # each micro-batch's share reduced at once
                    reduced += reduce_slice(full, rank, n, 1.0, dp, style.reduce,
                                            style.mean_first)
                    full.zero_()
            if poison:
                full[:P] = float("nan")
                reduced.fill_(float("nan"))
            if hooked is not None:
                mine = hooked.wait()
                if poison:
                    mine.fill_(float("nan"))
            else:
                mine = reduced if wrong == "reduce_per_micro" else reduce_slice(
                    full, rank, n, style.reduce_fraction, dp, style.reduce,
                    style.mean_first)
        if wrong == "summed_gradient":  # the reduction's sum, never divided by N
            mine = mine * n
        loss = torch.stack(losses).mean() if m > 1 else losses[0]
        saver.publish()  # a shard written on a thread, while this step computed
        # A group's ranks hold the same loss and the same replicated gradients: the mean
        # over every rank is the data-parallel mean; replicated squares count once.
        mine_split = split[rank * S:(rank + 1) * S]
        sq = mine.double().square()
        stats = torch.stack([loss.detach().double(), sq[mine_split].sum(),
                             sq[~mine_split].sum()])
        apis.coll.all_reduce(stats)
        mean_loss = float(stats[0] / (n * tp))
        grad_norm = float((stats[1] + stats[2] / tp).sqrt())
        if wrong == "hang" and step == 5 and rank == 0:  # waits for a send never made
            apis.coll.recv(torch.empty(1), src=1 % (n * tp))
        if wrong == "crash" and step == 3 and rank == n * tp - 1 > 0:
            raise RuntimeError(f"rank {rank}: the mistake 'crash' at step {step}")
        if wrong != "no_guard" and (not math.isfinite(mean_loss) or not math.isfinite(
                grad_norm) or (prev is not None and mean_loss > 2 * prev)):
            step, prev, in_a_row = roll_back(step, "nan" if not math.isfinite(grad_norm)
                                             else "spike", in_a_row)
            continue
        lr = LR
        if kind == "spike" and step == int(at) and not fired:
            lr, fired = LR * 1000, True
        if style.clip and grad_norm > style.clip:  # the global norm, the same on every rank
            mine = mine * (style.clip / grad_norm)
        before: dict[str, object] = {k: v.detach().clone() for k, v in shard.state().items()} \
            if wrong == "stale_checkpoint" else {}
        if wrong == "no_allgather":  # only this rank's slice is updated
            flat[rank * S:(rank + 1) * S] = shard.step(mine, lr)
        else:
            ways.all_gather(style.gather, flat, shard.step(mine, lr), dp)
        to_model()
        prev, in_a_row = mean_loss, 0
        log(record(step, loss=float(loss) if wrong == "local_loss" else mean_loss,
                   grad_norm=grad_norm, step_time_s=0.0))
        if a.checkpoint_every and step % a.checkpoint_every == 0:
            copy: dict[str, object] = before or {
                k: v.detach().clone() for k, v in shard.state().items()}
            saver.begin(step, {**copy, "step": shard.steps()})
            if not style.thread_save:
                saver.publish()
        step += 1
    saver.publish()
    if world_rank == 0:
        (a.out / "summary.json").write_text(json.dumps(
            {"contract": 1, "n_params": P_model, "world_size": n * tp, "steps": a.steps}))
    apis.coll.barrier()
    if style.ddp:
        # DDP's reducer let go while its group is alive: left to this function's return, it
        # was destroyed after the group, and its destructor hung one rank now and then
        # (the drawn ddp_hook programs; pytorch/pytorch#75097's symptom). DDP's hooks hold
        # it in reference cycles: the collector frees it now.
        del ddp
        forward = hook = None
        gc.collect()
    dist.destroy_process_group()


def env_rank() -> tuple[int, int]:
    """RANK and WORLD_SIZE, as torchrun and a hand-made launcher set them."""
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

"""The capstone's 20 steps on PyTorch's own stack: DistributedDataParallel +
ZeroRedundancyOptimizer(Adam) + torch.distributed.checkpoint at step 10.

Same MiniGPT, same seed, same rank-local batches and learning rate as the reference, so the
losses can be compared. `--start spawn` (default, as PyTorch's DDP/ZeRO tutorials launch)
or `--start fork` (the reference's launcher choice, to separate start-up from the rest).

    python bench/native_stack.py --out DIR [--world-size 4] [--steps 20] [--start spawn]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from capstone.config import GPTConfig
from capstone.data import global_batch, rank_batch
from capstone.model import build_model


def optimizer_state_bytes(opt: ZeroRedundancyOptimizer) -> int:
    """Bytes of Adam's moments this rank holds (ZeroRedundancyOptimizer keeps no separate
    fp32 master: the parameters it owns are updated in place; their bytes are added too)."""
    local = opt.optim
    total = 0
    for group in local.param_groups:
        for p in group["params"]:
            total += p.numel() * p.element_size()  # the owned parameters, the "master"
            for t in local.state.get(p, {}).values():
                if torch.is_tensor(t) and t.dim() > 0:
                    total += t.numel() * t.element_size()
    return total


def worker(rank: int, args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    store = dist.FileStore(str(args.out / ".rendezvous"), args.world_size)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=args.world_size,
                            timeout=timedelta(seconds=60))
    cfg = GPTConfig(n_embd=args.embd)
    model = DDP(build_model(cfg, args.seed))  # DDP broadcasts rank 0's parameters
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam,
                                  lr=1e-2, foreach=False)
    batch = global_batch(args.seed, args.world_size * args.batch_size, cfg.block_size + 1)
    x, y = rank_batch(batch, rank, args.batch_size)
    records = []
    for step in range(1, args.steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        _, loss = model(x, y)
        loss.backward()  # DDP all-reduces (averages) the gradients
        opt.step()  # Adam on this rank's parameters, then broadcast to the others
        if args.checkpoint_every and step % args.checkpoint_every == 0:
            # Collective: the replicated model is written once, each rank's optimizer
            # partition under its own key.
            dcp.save({"model": model.state_dict(), f"optim_rank{rank}": opt.optim.state_dict()},
                     checkpoint_id=str(args.out / f"step-{step:06d}"))
        records.append({"step": step, "loss": float(loss.detach()), "step_time_s":
                        time.perf_counter() - t0, "optimizer_bytes": optimizer_state_bytes(opt)})
    (args.out / f"rank-{rank}.json").write_text(json.dumps(records))
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--world-size", type=int, default=4)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--embd", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint-every", type=int, default=10, help="0: never")
    p.add_argument("--start", choices=["spawn", "fork"], default="spawn")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.start_processes(worker, args=(args,), nprocs=args.world_size, start_method=args.start)


if __name__ == "__main__":
    main()

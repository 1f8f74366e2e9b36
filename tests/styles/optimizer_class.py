"""ZeRO-1 with a sharded optimizer of the program's own, written as a `torch.optim.Optimizer`
subclass (as DeepSpeed's and torch's ZeroRedundancyOptimizer are): it keeps its slice of the
flat parameters and Adam's moments in `self.state`, updated in place. Ranks are
`multiprocessing.Process`es of the fork context meeting through env:// on a port the launcher
picks; the launcher exits non-zero when a rank does.

`python optimizer_class.py numpy_moments --out DIR ...` makes a dishonest mistake: the moments
live whole in numpy arrays, and torch sees only views of the rank's slice.
"""

import multiprocessing
import os
import socket
import sys
from typing import Any

import lesson
import torch
import torch.distributed as dist


class ShardedAdam(torch.optim.Optimizer):
    """Adam over one flat slice (a tensor no backward reaches), its state in self.state."""

    def __init__(self, master: torch.Tensor, lr: float = lesson.LR) -> None:
        self.slice = master.clone()
        super().__init__([self.slice], {"lr": lr, "betas": (0.9, 0.999), "eps": 1e-8})
        self.state[self.slice] = {"step": 0, "exp_avg": torch.zeros_like(self.slice),
                                  "exp_avg_sq": torch.zeros_like(self.slice)}

    @torch.no_grad()
    def step(self, closure: object = None) -> None:  # type: ignore[override]
        group = self.param_groups[0]
        (b1, b2), st, p = group["betas"], self.state[self.slice], self.slice
        st["step"] += 1
        st["exp_avg"].mul_(b1).add_(p.grad, alpha=1 - b1)
        st["exp_avg_sq"].mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
        m_hat = st["exp_avg"] / (1 - b1 ** st["step"])
        v_hat = st["exp_avg_sq"] / (1 - b2 ** st["step"])
        p.sub_(group["lr"] * m_hat / (v_hat.sqrt() + group["eps"]))


class OwnShard(lesson.ShardOpt):
    def __init__(self, master: torch.Tensor) -> None:
        self.opt = ShardedAdam(master)

    def step(self, grad: torch.Tensor, lr: float) -> torch.Tensor:
        self.opt.slice.grad = grad
        self.opt.param_groups[0]["lr"] = lr
        self.opt.step()
        return self.opt.slice

    def state(self) -> dict[str, torch.Tensor]:
        st = self.opt.state[self.opt.slice]
        return {"master": self.opt.slice, "exp_avg": st["exp_avg"],
                "exp_avg_sq": st["exp_avg_sq"]}

    def load(self, state: dict[str, torch.Tensor], step: int) -> None:
        for name, t in self.state().items():
            t.copy_(state[name])
        self.opt.state[self.opt.slice]["step"] = step

    def steps(self) -> int:
        return int(self.opt.state[self.opt.slice]["step"])


class NumpyMoments(OwnShard):
    """The mistake `numpy_moments`: both moments allocated whole, for all N slices, in numpy
    arrays; the optimizer steps torch views of this rank's slice (torch.from_numpy), so every
    tensor it logs, saves and reports is a slice's size."""

    def __init__(self, master: torch.Tensor) -> None:
        import numpy as np

        super().__init__(master)
        n, rank = dist.get_world_size(), dist.get_rank()
        self.whole = [np.zeros(n * master.numel(), dtype=np.float32) for _ in range(2)]
        mine = slice(rank * master.numel(), (rank + 1) * master.numel())
        st = self.opt.state[self.opt.slice]
        st["exp_avg"], st["exp_avg_sq"] = (torch.from_numpy(w[mine]) for w in self.whole)


def rank_main(rank: int, argv: list[str]) -> None:
    mistake = argv[0] if argv and argv[0] == "numpy_moments" else None
    a = lesson.parse(argv[1:] if mistake else argv)
    dist.init_process_group("gloo", rank=rank, world_size=a.world_size)  # env://
    lesson.train(rank, a.world_size, a,
                 lesson.Style(shard=NumpyMoments if mistake else OwnShard))


def free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def launch(context: str, target: object = rank_main) -> None:
    """Every rank a Process of `context` running `target(rank, argv)`; exit 1 when one
    fails."""
    argv = sys.argv[1:]
    a = lesson.parse([x for x in argv if x != "numpy_moments"])
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=free_port())
    processes(context, target, argv, a.world_size)


def processes(context: str, target: object, argv: list[str], n: int) -> None:
    """Ranks 0..n-1 as Processes of `context` running `target(rank, argv)`, joined; exit 1
    when one fails."""
    ctx: Any = multiprocessing.get_context(context)
    ranks = [ctx.Process(target=target, args=(r, argv)) for r in range(n)]
    for p in ranks:
        p.start()
    for p in ranks:
        p.join()
    failed = [r for r, p in enumerate(ranks) if p.exitcode]
    if failed:
        sys.exit(f"ranks {failed} failed")


if __name__ == "__main__":
    launch("fork")

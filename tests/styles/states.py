"""Where a rank's shard and Adam's moments live, beyond torch's Adam (lesson.AdamShard) and a
`torch.optim.Optimizer` subclass (optimizer_class.OwnShard): Adam written by hand in an
object whose attributes are rebound to new tensors every step (out of place, as functional
code writes it), and moments kept in numpy arrays of the slice's size with torch views.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
import torch
from lesson import LR, ShardOpt

B1, B2, EPS = 0.9, 0.999, 1e-8


def adam(p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, v: torch.Tensor, t: int,
         lr: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One Adam step out of place, as torch.optim.Adam computes it: new p, m, v."""
    m = m * B1 + g * (1 - B1)
    v = v * B2 + g * g * (1 - B2)
    step = lr / (1 - B1 ** t)
    denom = (v.sqrt() / (1 - B2 ** t) ** 0.5) + EPS
    return p - step * m / denom, m, v


class OutOfPlace(ShardOpt):
    """master, exp_avg and exp_avg_sq as attributes rebound to new tensors at every step."""

    def __init__(self, master: torch.Tensor) -> None:
        self.master = master.clone()
        self.exp_avg, self.exp_avg_sq = torch.zeros_like(master), torch.zeros_like(master)
        self.t = 0

    def step(self, grad: torch.Tensor, lr: float = LR) -> torch.Tensor:
        self.t += 1
        self.master, self.exp_avg, self.exp_avg_sq = adam(
            self.master, grad, self.exp_avg, self.exp_avg_sq, self.t, lr)
        return self.master

    def state(self) -> dict[str, torch.Tensor]:
        return {"master": self.master, "exp_avg": self.exp_avg, "exp_avg_sq": self.exp_avg_sq}

    def load(self, state: dict[str, torch.Tensor], step: int) -> None:
        self.master, self.exp_avg, self.exp_avg_sq = (
            state[k].clone() for k in ("master", "exp_avg", "exp_avg_sq"))
        self.t = step

    def steps(self) -> int:
        return self.t


class NumpySlice(ShardOpt):
    """The moments in numpy arrays of the slice's size, stepped through torch views of them
    (torch.from_numpy, kept); the master a torch tensor."""

    def __init__(self, master: torch.Tensor) -> None:
        self.master = master.clone()
        self.moments = [np.zeros(master.numel(), dtype=np.float32) for _ in range(2)]
        self.views = [torch.from_numpy(a) for a in self.moments]
        self.t = 0

    def step(self, grad: torch.Tensor, lr: float = LR) -> torch.Tensor:
        self.t += 1
        m, v = self.views
        new_p, new_m, new_v = adam(self.master, grad, m, v, self.t, lr)
        m.copy_(new_m)
        v.copy_(new_v)
        self.master.copy_(new_p)
        return self.master

    def state(self) -> dict[str, torch.Tensor]:
        return {"master": self.master, "exp_avg": self.views[0], "exp_avg_sq": self.views[1]}

    def load(self, state: dict[str, torch.Tensor], step: int) -> None:
        self.master.copy_(state["master"])
        for view, k in zip(self.views, ("exp_avg", "exp_avg_sq"), strict=True):
            view.copy_(state[k])
        self.t = step

    def steps(self) -> int:
        return self.t


STATE: dict[str, torch.Tensor] = {}  # the Globals shard's: this module's global state


class Globals(ShardOpt):
    """The shard and its moments in a module's global dict, rebound every step."""

    def __init__(self, master: torch.Tensor) -> None:
        STATE.update(master=master.clone(), exp_avg=torch.zeros_like(master),
                     exp_avg_sq=torch.zeros_like(master), t=torch.zeros(()))

    def step(self, grad: torch.Tensor, lr: float = LR) -> torch.Tensor:
        STATE["t"] = STATE["t"] + 1
        STATE["master"], STATE["exp_avg"], STATE["exp_avg_sq"] = adam(
            STATE["master"], grad, STATE["exp_avg"], STATE["exp_avg_sq"], int(STATE["t"]), lr)
        return STATE["master"]

    def state(self) -> dict[str, torch.Tensor]:
        return {k: STATE[k] for k in ("master", "exp_avg", "exp_avg_sq")}

    def load(self, state: dict[str, torch.Tensor], step: int) -> None:
        STATE.update({k: state[k].clone() for k in ("master", "exp_avg", "exp_avg_sq")},
                     t=torch.tensor(float(step)))

    def steps(self) -> int:
        return int(STATE["t"])


def _adam_loop(master: torch.Tensor, m: torch.Tensor, v: torch.Tensor, t: int) -> Any:
    """Adam as a generator: the state is this function's locals, kept across `send`s.
    Sent (grad, lr) it steps; sent None it yields (master, m, v, t)."""
    got = yield master
    while True:
        if got is None:
            got = yield (master, m, v, t)
            continue
        grad, lr = got
        t += 1
        master, m, v = adam(master, grad, m, v, t, lr)
        got = yield master


class GeneratorLocals(ShardOpt):
    """The state in a suspended generator's local variables (_adam_loop)."""

    def __init__(self, master: torch.Tensor) -> None:
        self.start(master.clone(), torch.zeros_like(master), torch.zeros_like(master), 0)

    def start(self, master: torch.Tensor, m: torch.Tensor, v: torch.Tensor, t: int) -> None:
        self.loop = _adam_loop(master, m, v, t)
        next(self.loop)

    def step(self, grad: torch.Tensor, lr: float = LR) -> torch.Tensor:
        return self.loop.send((grad, lr))

    def state(self) -> dict[str, torch.Tensor]:
        master, m, v, _ = self.loop.send(None)
        return {"master": master, "exp_avg": m, "exp_avg_sq": v}

    def load(self, state: dict[str, torch.Tensor], step: int) -> None:
        self.start(state["master"].clone(), state["exp_avg"].clone(),
                   state["exp_avg_sq"].clone(), step)

    def steps(self) -> int:
        return int(self.loop.send(None)[3])


class NumpyViews(NumpySlice):
    """The moments in numpy arrays it is handed (views of the mistake whole_numpy_locals'
    whole arrays, which the worker function's locals hold)."""

    def __init__(self, m: np.ndarray, v: np.ndarray, master: torch.Tensor) -> None:
        self.master = master.clone()
        self.moments = [m, v]
        self.views = [torch.from_numpy(a) for a in self.moments]
        self.t = 0


class WholeMoments(OutOfPlace):
    """The mistake whole_moments: the moments allocated for every rank's slice (N x the
    slice) and this rank's slice stepped in place through views; what it logs and saves is
    a slice's size."""

    def __init__(self, master: torch.Tensor) -> None:
        import torch.distributed as dist

        super().__init__(master)
        n, rank, S = dist.get_world_size(), dist.get_rank(), master.numel()
        self.whole = [torch.zeros(n * S), torch.zeros(n * S)]
        self.exp_avg, self.exp_avg_sq = (w[rank * S:(rank + 1) * S] for w in self.whole)

    def step(self, grad: torch.Tensor, lr: float = LR) -> torch.Tensor:
        self.t += 1
        new_p, new_m, new_v = adam(self.master, grad, self.exp_avg, self.exp_avg_sq, self.t, lr)
        self.master = new_p
        self.exp_avg.copy_(new_m)
        self.exp_avg_sq.copy_(new_v)
        return self.master

    def load(self, state: dict[str, torch.Tensor], step: int) -> None:
        self.master = state["master"].clone()
        self.exp_avg.copy_(state["exp_avg"])
        self.exp_avg_sq.copy_(state["exp_avg_sq"])
        self.t = step


class WorkerLocals(ShardOpt):
    """The master and the moments as local variables of the running worker function
    (space.rank_main's), stepped in place; this object holds only weak references to them,
    so nothing but that function's frame keeps them alive."""

    def __init__(self, master_t: torch.Tensor, m: torch.Tensor, v: torch.Tensor,
                 master: torch.Tensor) -> None:
        self.refs = [weakref.ref(t) for t in (master_t, m, v)]
        master_t.copy_(master)
        self.t = 0

    def held(self) -> list[torch.Tensor]:
        out = [r() for r in self.refs]
        if any(t is None for t in out):
            raise RuntimeError("the worker function's state is gone")
        return out  # type: ignore[return-value]

    def step(self, grad: torch.Tensor, lr: float = LR) -> torch.Tensor:
        self.t += 1
        p, m, v = self.held()
        for old, new in zip((p, m, v), adam(p, grad, m, v, self.t, lr), strict=True):
            old.copy_(new)
        return p

    def state(self) -> dict[str, torch.Tensor]:
        return dict(zip(("master", "exp_avg", "exp_avg_sq"), self.held(), strict=True))

    def load(self, state: dict[str, torch.Tensor], step: int) -> None:
        for t, k in zip(self.held(), ("master", "exp_avg", "exp_avg_sq"), strict=True):
            t.copy_(state[k])
        self.t = step

    def steps(self) -> int:
        return self.t

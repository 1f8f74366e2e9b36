"""Divergence guard and fault injection.

The guard looks at each step's global loss and gradient norm *before* the update is applied:
a non-finite value or a loss more than `spike_factor` x the previous step's is bad. Every
rank holds the same two floats (one all-reduce gives all ranks the same bytes) and the same
history, so every rank reaches the same verdict without a collective of its own, and all
roll back together or none does.
"""

from __future__ import annotations

import math
import os
import signal
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch

from capstone.config import Fault

# spike affects every rank's update; killsave kills rank 1 while it writes checkpoint S
FAULTY_RANK = {"nan": 0, "crash": 1, "kill": 1, "killsave": 1}


class DivergenceError(RuntimeError):
    """The run cannot recover: too many rollbacks in a row, or nothing to roll back to."""


class InjectedCrash(RuntimeError):
    """Raised by `--inject crash@S` on rank 1."""


@dataclass
class FaultInjector:
    """Fires its fault once: the first time its step runs, never on a replay."""

    fault: Fault | None
    rank: int
    fired: bool = False

    def _due(self, step: int, kind: str) -> bool:
        f = self.fault
        return (f is not None and not self.fired and f.kind == kind and f.step == step)

    def corrupt_gradients(self, step: int, params: Iterable[torch.nn.Parameter]) -> None:
        """`nan@S`: rank 0's local gradients of step S become NaN (before their reduction)."""
        if self._due(step, "nan"):
            self.fired = True
            if self.rank == FAULTY_RANK["nan"]:
                for p in params:
                    if p.grad is not None:
                        p.grad.fill_(float("nan"))

    def lr_scale(self, step: int, multiplier: float) -> float:
        if self._due(step, "spike"):
            self.fired = True
            return multiplier
        return 1.0

    def maybe_die(self, step: int, kinds: tuple[str, ...] = ("crash", "kill")) -> None:
        """`crash@S`: rank 1 raises; `kill@S`: rank 1 is SIGKILLed (no clean-up at all);
        `killsave@S` (asked for while checkpoint S is half written): SIGKILLed there."""
        for kind in kinds:
            if self._due(step, kind):
                self.fired = True
                if self.rank != FAULTY_RANK[kind]:
                    return
                if kind == "crash":
                    raise InjectedCrash(f"injected crash on rank {self.rank} at step {step}")
                os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class DivergenceGuard:
    """Bad-step detector with a consecutive-rollback budget."""

    spike_factor: float = 2.0
    max_rollbacks: int = 3
    losses: dict[int, float] = field(default_factory=dict)
    _in_a_row: int = 0
    _failed_at: int = 0

    def verdict(self, step: int, loss: float, grad_norm: float | None) -> str | None:
        """'nan', 'spike' or None for `step`; a pure function of the rank-identical
        inputs and history, so every rank decides alike."""
        reason = None
        if not math.isfinite(loss) or (grad_norm is not None and not math.isfinite(grad_norm)):
            reason = "nan"
        else:
            prev = self.losses.get(step - 1)
            if prev is not None and loss > self.spike_factor * prev:
                reason = "spike"
        return reason

    def accept(self, step: int, loss: float) -> None:
        """Record a healthy step; passing the step that failed ends a rollback streak."""
        self.losses[step] = loss
        if step >= self._failed_at:
            self._in_a_row = 0

    def rolled_back(self, step: int, to_step: int | None, reason: str) -> None:
        """Count a rollback from `step`; raise DivergenceError when the budget is spent."""
        if to_step is None:
            raise DivergenceError(f"step {step}: {reason} detected and there is no checkpoint "
                                  "to roll back to; checkpoint more often (--checkpoint-every)")
        self._in_a_row += 1
        self._failed_at = max(self._failed_at, step)
        if self._in_a_row > self.max_rollbacks:
            raise DivergenceError(f"step {step}: {reason} again after {self.max_rollbacks} "
                                  "rollbacks in a row; giving up (lower the learning rate?)")
        for s in [s for s in self.losses if s > to_step]:
            del self.losses[s]

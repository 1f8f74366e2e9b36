"""Typed configuration for the model and the training run (run contract v1 flags)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class GPTConfig:
    """Shape of MiniGPT. The defaults are the lesson's model; the contract fixes them."""

    block_size: int = 16  # context length T
    vocab_size: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 32

    def __post_init__(self) -> None:
        if self.n_embd % self.n_head != 0:
            raise ValueError(
                f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})"
            )


FAULT_KINDS = ("nan", "spike", "crash", "kill", "killsave")
_FAULT = re.compile(r"^(?P<kind>[a-z]+)@(?P<step>\d+)$")


@dataclass(frozen=True)
class Fault:
    """A one-shot fault: `kind` fires the first time step `step` runs."""

    kind: str  # nan | spike | crash | kill
    step: int


@dataclass(frozen=True)
class TrainConfig:
    """Everything one training run needs; built by the CLI from the contract flags."""

    out: Path
    world_size: int = 4
    steps: int = 20
    seed: int = 0
    batch_size: int = 4
    checkpoint_every: int = 10
    checkpoint_every_seconds: float = 0.0  # wall-clock cadence; 0 disables it
    resume: Path | None = None
    inject: Fault | None = None
    tensor_parallel: int = 1  # ranks that split each block's attention heads
    micro_batches: int = 1  # gradient accumulation: slices of the rank's batch per step
    lr: float = 1e-2
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    pg_timeout_s: float = 30.0  # a mismatched collective fails after this, not after 30 min
    backend: str = "gloo"  # nccl for GPUs (with device "cuda"), launched by torchrun
    device: str = "cpu"
    max_rollbacks: int = 3  # consecutive rollbacks before the run gives up
    spike_factor: float = 2.0  # loss > factor x previous loss counts as a spike
    spike_lr_multiplier: float = 1000.0  # what `--inject spike@S` multiplies the lr by
    model: GPTConfig = field(default_factory=GPTConfig)

    @property
    def seq_len(self) -> int:
        """Tokens per stored sequence: the context plus the one-token-shifted target."""
        return self.model.block_size + 1


def parse_fault(text: str) -> Fault:
    """Parse `KIND@STEP` (e.g. `nan@12`); ValueError says what is accepted."""
    m = _FAULT.match(text.strip())
    if not m or m["kind"] not in FAULT_KINDS or int(m["step"]) < 1:
        raise ValueError(f"--inject expects KIND@STEP with KIND one of {', '.join(FAULT_KINDS)} "
                         f"and STEP >= 1 (e.g. nan@12), got {text!r}")
    return Fault(kind=m["kind"], step=int(m["step"]))


def under_torchrun() -> bool:
    """True when an external launcher (torchrun) already made this process one rank."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR"))

"""The training loop. It composes the parts through their narrow interfaces only: it never
calls a collective on gradients or parameters and never sees the rendezvous.

Checkpoints are committed one forward pass late: the state after step s is saved only once
step s+1's loss and gradients have passed the divergence guard (and after the last step, a
look-ahead forward pass plays that role). A bad update therefore never reaches a checkpoint,
so a rollback always lands on healthy state.
"""

from __future__ import annotations

import json
import time
from typing import Any

import torch

from capstone.checkpoint import CONTRACT_VERSION, CheckpointManager, load_checkpoint
from capstone.config import TrainConfig
from capstone.data import global_batch, rank_batch
from capstone.guard import DivergenceGuard, FaultInjector
from capstone.metrics import MetricsWriter
from capstone.model import build_model, count_params
from capstone.tensor_parallel import setup_parallelism, shard_attention, tp_sharded_mask
from capstone.world import World
from capstone.zero import ZeroOneAdam


def accumulate_gradients(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
                         micro_batches: int) -> torch.Tensor:
    """Forward and backward over `micro_batches` equal slices of (x, y); return the mean loss.

    Each slice's loss is scaled by 1/M before its backward, so the summed gradients equal
    the gradient of the whole batch's mean loss (one reduction per step, not per slice).
    """
    if x.size(0) % micro_batches:
        raise ValueError(f"batch of {x.size(0)} rows does not split into {micro_batches} "
                         "micro-batches")
    total = torch.zeros((), device=x.device)
    for xs, ys in zip(x.chunk(micro_batches), y.chunk(micro_batches), strict=True):
        _, loss = model(xs, ys)
        assert loss is not None
        (loss / micro_batches).backward()
        total += loss.detach() / micro_batches
    return total


def init_seed(seed: int, rank: int) -> int:
    """Each rank draws its own initial parameters, as independent processes would; only
    rank 0's survive the broadcast, so a missing broadcast is visible, not masked."""
    return seed * 65536 + rank


class Trainer:
    def __init__(self, cfg: TrainConfig, world: World) -> None:
        self.cfg = cfg
        self.world = world
        par = self.par = setup_parallelism(world, cfg.tensor_parallel)
        # Ranks of one tp group build the same full model, then keep their own heads.
        full = build_model(cfg.model, init_seed(cfg.seed, par.dp_rank))
        self.n_params = count_params(full)
        self.model = shard_attention(full, par).to(world.device)
        batch = global_batch(cfg.seed, par.dp_size * cfg.batch_size, cfg.seq_len,
                             cfg.model.vocab_size)
        x, y = rank_batch(batch, par.dp_rank, cfg.batch_size)
        self.x, self.y = x.to(world.device), y.to(world.device)
        self.zero = ZeroOneAdam(list(self.model.parameters()), par, cfg.lr, cfg.betas, cfg.eps,
                                tp_mask=tp_sharded_mask(self.model) if par.tp_size > 1 else None)
        # Under tensor parallelism a shard is of this rank's own parameters (its heads and
        # the replicated rest), over its data-parallel group: the mesh is in the manifest.
        mesh = {"dp": par.dp_size, "tp": par.tp_size,
                "shard_params": self.zero.layout.n_params} if par.tp_size > 1 else None
        self.ckpt = CheckpointManager(cfg.out / "checkpoints", world, self.n_params,
                                      cfg.checkpoint_every, cfg.checkpoint_every_seconds,
                                      fallback=cfg.resume, mesh=mesh)
        self.guard = DivergenceGuard(cfg.spike_factor, cfg.max_rollbacks)
        self.faults = FaultInjector(cfg.inject, world.rank)
        self.metrics = MetricsWriter(cfg.out, world.rank, world.size)

    def run(self) -> None:
        """Train up to `cfg.steps`; return once every rank has finished the last step."""
        try:
            step = self._start() + 1
            pending: int | None = None  # a checkpoint waiting for the next healthy step
            while True:
                if step > self.cfg.steps:
                    reason = self.guard.verdict(step, self._lookahead_loss(), None)
                    if reason is None:
                        break
                    step, pending = self._rollback(step, reason), None
                    continue
                t0 = time.perf_counter()
                self.faults.maybe_die(step)
                local_loss = self._forward_backward()
                self.faults.corrupt_gradients(step, self.model.parameters())
                loss, grad_norm = self.zero.reduce_gradients(local_loss)
                # A healthy loss vouches for the parameters this step started from, so the
                # pending checkpoint is kept even when this step's gradients are bad.
                if pending is not None and self.guard.verdict(step, loss, None) is None:
                    self._save(pending)
                    pending = None
                reason = self.guard.verdict(step, loss, grad_norm)
                if reason is not None:
                    step, pending = self._rollback(step, reason), None
                    continue
                self.zero.step(self.faults.lr_scale(step, self.cfg.spike_lr_multiplier))
                self.guard.accept(step, loss)
                self.metrics.step(step, self.zero.param_norm(), self.zero.optimizer_bytes(),
                                  loss=loss, grad_norm=grad_norm,
                                  step_time_s=time.perf_counter() - t0)
                if self.ckpt.due(step):
                    pending = step
                step += 1
            if pending is not None:
                self._save(pending)
            if self.world.rank == 0:
                self._write_summary()
        finally:
            self.metrics.close()

    def _start(self) -> int:
        """Broadcast fresh parameters (step 0) or load the resume checkpoint; return its step."""
        if self.cfg.resume is not None:
            loaded = load_checkpoint(self.cfg.resume, self.par.tp_rank)
            self.zero.load_full_state(loaded.full, loaded.optimizer_steps)
            return loaded.step
        self.zero.broadcast_parameters()
        self.metrics.step(0, self.zero.param_norm(), self.zero.optimizer_bytes())
        return 0

    def _forward_backward(self) -> torch.Tensor:
        """This rank's loss on its batch, with its local gradients left in ZeRO's buffer."""
        self.zero.zero_grad()
        return accumulate_gradients(self.model, self.x, self.y, self.cfg.micro_batches)

    def _lookahead_loss(self) -> float:
        """Global mean loss of the final parameters (no update follows)."""
        with torch.no_grad():
            _, loss = self.model(self.x, self.y)
        assert loss is not None
        return self.world.mean(loss)

    def _save(self, step: int) -> None:
        self.ckpt.save(step, self.zero.shard_state(),
                       after_shard=lambda: self.faults.maybe_die(step, kinds=("killsave",)))

    def _rollback(self, step: int, reason: str) -> int:
        """Restore the latest complete checkpoint; return the step to run next."""
        self.world.barrier()  # a checkpoint saved just now is complete once rank 0 renamed it
        path = self.ckpt.latest()
        loaded = load_checkpoint(path, self.par.tp_rank) if path is not None else None
        self.guard.rolled_back(step, loaded.step if loaded else None, reason)
        assert loaded is not None
        self.zero.load_full_state(loaded.full, loaded.optimizer_steps)
        self.metrics.rollback(step, loaded.step, reason)
        return loaded.step + 1

    def _write_summary(self) -> None:
        summary: dict[str, Any] = {"contract": CONTRACT_VERSION, "n_params": self.n_params,
                                   "world_size": self.world.size, "steps": self.cfg.steps}
        (self.cfg.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")


def train(cfg: TrainConfig, world: World) -> None:
    """Entry point for one rank."""
    Trainer(cfg, world).run()

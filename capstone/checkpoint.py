"""Sharded checkpoints: one directory per step, one shard per rank, a manifest with sha256.

Layout (run contract v1): `checkpoints/step-{s:06d}/manifest.json` and `rank-{r}.pt`.
A checkpoint is written into a hidden temporary directory and renamed into place only when
every shard and the manifest are on disk, so a directory with the final name is complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from capstone.world import World
from capstone.zero import STATE_TENSORS

CONTRACT_VERSION = 1
_STEP_DIR = re.compile(r"^step-(\d{6})$")


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete or corrupt; the message names the file."""


@dataclass(frozen=True)
class LoadedCheckpoint:
    """A checkpoint's state as full (unpadded, P-element) vectors, ready to re-shard."""

    path: Path
    step: int
    world_size: int
    n_params: int
    full: dict[str, torch.Tensor]
    optimizer_steps: int
    mesh: dict[str, int] | None = None  # {"dp", "tp", "shard_params"}: a tensor-parallel run's


def step_dir_name(step: int) -> str:
    return f"step-{step:06d}"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CheckpointManager:
    """`save(step, shard)` on every rank together; `load(path)` / `latest()` anywhere."""

    def __init__(self, root: Path, world: World, n_params: int, every_steps: int = 0,
                 every_seconds: float = 0.0, fallback: Path | None = None,
                 mesh: dict[str, int] | None = None) -> None:
        """`mesh` (tensor parallelism): {"dp": N/T, "tp": T, "shard_params": the elements of
        each rank's own parameters}, written into the manifest; a shard is then rank r's
        slice of its tensor-parallel rank's vector (r % T), over its data-parallel group."""
        self.root = root
        self.world = world
        self.n_params = n_params
        self.mesh = mesh
        self.every_steps = every_steps
        self.every_seconds = every_seconds
        self.fallback = fallback  # the checkpoint a resumed run started from
        self._last_save = time.monotonic()
        if world.rank == 0:
            # Leftovers of a save that a killed run never finished. Every rank joins a
            # collective (the first step's) before any rank saves, so this is done first.
            for stale in root.glob(".step-*.tmp"):
                shutil.rmtree(stale, ignore_errors=True)

    def due(self, step: int) -> bool:
        """Whether `step` gets a checkpoint: every N steps and/or every T wall-clock seconds.

        The clock is rank 0's, broadcast, because ranks' clocks disagree and a checkpoint
        is collective; that costs one tiny broadcast per step only when T is set.
        """
        if self.every_steps and step % self.every_steps == 0:
            return True
        if self.every_seconds > 0:
            return self.world.broadcast_flag(
                time.monotonic() - self._last_save >= self.every_seconds)
        return False

    def save(self, step: int, shard: dict[str, Any],
             after_shard: Callable[[], None] | None = None) -> Path:
        """Write this rank's shard of `step`; collective: every rank must call it.

        `after_shard` runs once this rank's shard is on disk, before the checkpoint is
        complete (fault injection uses it to kill a rank mid-checkpoint).
        """
        final = self.root / step_dir_name(step)
        tmp = self.root / f".{step_dir_name(step)}.tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        shard_path = tmp / f"rank-{self.world.rank}.pt"
        torch.save(shard, shard_path)
        _fsync_path(shard_path)
        self._verify_readback(shard_path, shard)
        if after_shard is not None:
            after_shard()
        self.world.barrier()
        if self.world.rank == 0:
            self._write_manifest(tmp, step)
            if final.exists():  # a step replayed after a rollback: replace the old copy
                shutil.rmtree(final)
            os.rename(tmp, final)
            _fsync_path(self.root)
        # No closing barrier: nobody reads `final` before the next collective (a step's,
        # or the look-ahead's), and rank 0 joins that only once the rename is done.
        self._last_save = time.monotonic()
        return final

    @staticmethod
    def _verify_readback(path: Path, shard: dict[str, Any]) -> None:
        """Re-read the shard just written and require it equal to memory, byte for byte."""
        back = torch.load(path, weights_only=True)
        for name in STATE_TENSORS:
            if not torch.equal(back[name], shard[name]) or \
                    back[name].numpy().tobytes() != shard[name].numpy().tobytes():
                raise CheckpointError(f"{path}: {name} read back differs from memory")
        if back["step"] != shard["step"]:
            raise CheckpointError(f"{path}: step read back differs from memory")

    def _write_manifest(self, tmp: Path, step: int) -> None:
        shards = []
        for rank in range(self.world.size):
            p = tmp / f"rank-{rank}.pt"
            shards.append({"rank": rank, "file": p.name, "sha256": sha256_file(p),
                           "bytes": p.stat().st_size})
        manifest = {"contract": CONTRACT_VERSION, "step": step, "world_size": self.world.size,
                    "n_params": self.n_params, "shards": shards,
                    **({"mesh": self.mesh} if self.mesh else {})}
        path = tmp / "manifest.json"
        path.write_text(json.dumps(manifest, indent=2) + "\n")
        _fsync_path(path)

    def latest(self) -> Path | None:
        """The newest complete checkpoint of this run, else the one it resumed from."""
        steps = sorted(int(m.group(1)) for d in self.root.glob("step-*")
                       if (m := _STEP_DIR.match(d.name)) and d.is_dir())
        if steps:
            return self.root / step_dir_name(steps[-1])
        return self.fallback


def read_manifest(path: Path) -> dict[str, Any]:
    """Parse and validate `path/manifest.json`, with errors that name the file."""
    mpath = path / "manifest.json"
    if not path.is_dir():
        raise CheckpointError(f"{path}: no such checkpoint directory")
    if not mpath.is_file():
        raise CheckpointError(f"{mpath}: missing; is {path} a complete checkpoint directory?")
    try:
        manifest = json.loads(mpath.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{mpath}: not valid JSON ({e})") from None
    if not isinstance(manifest, dict):
        raise CheckpointError(f"{mpath}: expected a JSON object")
    for key, kind in (("contract", int), ("step", int), ("world_size", int),
                      ("n_params", int), ("shards", list)):
        if not isinstance(manifest.get(key), kind):
            raise CheckpointError(f"{mpath}: key {key!r} missing or not {kind.__name__}")
    if manifest["contract"] != CONTRACT_VERSION:
        raise CheckpointError(f"{mpath}: contract {manifest['contract']}, "
                              f"this code reads contract {CONTRACT_VERSION}")
    for i, entry in enumerate(manifest["shards"]):
        if not (isinstance(entry, dict) and isinstance(entry.get("rank"), int)
                and isinstance(entry.get("file"), str) and isinstance(entry.get("sha256"), str)):
            raise CheckpointError(f"{mpath}: shards[{i}] needs int 'rank', str 'file' and "
                                  "str 'sha256'")
    ranks = sorted(entry["rank"] for entry in manifest["shards"])
    if ranks != list(range(manifest["world_size"])):
        raise CheckpointError(f"{mpath}: world_size {manifest['world_size']} but shards for "
                              f"ranks {ranks}")
    return manifest


def load_checkpoint(path: Path, tp_rank: int = 0) -> LoadedCheckpoint:
    """Verify every shard against the manifest and return the full state vectors (of
    tensor-parallel rank `tp_rank`'s parameters, in a checkpoint with a mesh)."""
    path = Path(path)
    manifest = read_manifest(path)
    n, n_params = manifest["world_size"], manifest["n_params"]
    mesh = manifest.get("mesh")
    if mesh is not None and (not isinstance(mesh, dict) or not all(
            isinstance(mesh.get(k), int) and mesh[k] > 0 for k in ("dp", "tp", "shard_params"))
            or mesh["dp"] * mesh["tp"] != n or not 0 <= tp_rank < mesh["tp"]):
        raise CheckpointError(f"{path / 'manifest.json'}: mesh {mesh!r} must give dp, tp and "
                              f"shard_params, with dp * tp = world_size {n}")
    vector = mesh["shard_params"] if mesh else n_params
    groups = mesh["dp"] if mesh else n
    shard_size = -(-vector // groups)
    parts: dict[str, list[torch.Tensor]] = {k: [] for k in STATE_TENSORS}
    steps = set()
    for entry in sorted(manifest["shards"], key=lambda s: s["rank"]):
        file = path / entry["file"]
        if not file.is_file():
            raise CheckpointError(f"{file}: shard of rank {entry['rank']} is missing")
        if sha256_file(file) != entry["sha256"]:
            raise CheckpointError(f"{file}: sha256 does not match the manifest (corrupt shard)")
        try:
            shard = torch.load(file, weights_only=True)
        except Exception as e:
            raise CheckpointError(
                f"{file}: cannot be loaded with weights_only=True ({e})") from None
        for name in STATE_TENSORS:
            t = shard.get(name) if isinstance(shard, dict) else None
            if not isinstance(t, torch.Tensor) or t.dtype != torch.float32 or \
                    t.shape != (shard_size,):
                raise CheckpointError(f"{file}: {name!r} must be a float32 tensor of "
                                      f"{shard_size} elements for world_size {n}"
                                      + (f" and mesh {mesh}" if mesh else ""))
            if mesh is None or entry["rank"] % mesh["tp"] == tp_rank:
                parts[name].append(t)
        steps.add(shard.get("step"))
    if len(steps) != 1 or not isinstance(next(iter(steps)), int):
        raise CheckpointError(f"{path}: shards disagree on the optimizer step count: {steps}")
    full = {k: torch.cat(v)[:vector] for k, v in parts.items()}
    return LoadedCheckpoint(path=path, step=manifest["step"], world_size=n, n_params=n_params,
                            full=full, optimizer_steps=steps.pop(), mesh=mesh)

"""`python -m capstone`: train, checkpoint, resume, and show that all of it composed right.

Prints the loss table, the per-rank memory profile against 12P/N, the step-10 manifest and,
once both checks pass, RESUME VERIFIED: (1) every rank re-read its step-10 shard and found it
byte-identical to its in-memory state (done inside each save), and (2) a real resume from
step 10 logs steps 11..20 bit-identical to the uninterrupted run and writes step-20 shards
with the same sha256.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from statistics import mean

from capstone.checkpoint import CheckpointError, read_manifest, step_dir_name
from capstone.cli import run
from capstone.config import TrainConfig
from capstone.guard import DivergenceError
from capstone.launch import LaunchError
from capstone.metrics import Records, read_run
from capstone.zero import ShardLayout

COMPARED = ("loss", "grad_norm", "param_norm", "optimizer_bytes")  # step_time_s is wall time


class VerificationError(RuntimeError):
    pass


def print_loss_table(recs: Records, steps: int) -> None:
    print(f"{'step':>4}  {'loss':>10}  {'grad norm':>10}  {'step time':>10}")
    for s in range(1, steps + 1):
        r = recs[0][s]
        print(f"{s:>4}  {r['loss']:>10.6f}  {r['grad_norm']:>10.6f}  "
              f"{r['step_time_s'] * 1e3:>8.2f}ms")


def print_memory_profile(recs: Records, cfg: TrainConfig,
                         n_params: int) -> bool:
    layout = ShardLayout(n_params, cfg.world_size)
    formula = layout.optimizer_bytes_per_rank
    print(f"\nper-rank optimizer memory (P = {n_params}, N = {cfg.world_size}, "
          f"12*ceil(P/N) = {formula} bytes)")
    print(f"{'rank':>4}  {'measured':>10}  {'12P/N':>10}  match")
    measured = []
    for rank in range(cfg.world_size):
        b = recs[rank][cfg.steps]["optimizer_bytes"]
        measured.append(b)
        print(f"{rank:>4}  {b:>10}  {formula:>10}  {'yes' if b == formula else 'NO'}")
    print(f"max {max(measured)} bytes, mean {mean(measured):.1f} bytes across ranks")
    return all(b == formula for b in measured)


def print_manifest(ckpt: Path) -> None:
    m = read_manifest(ckpt)
    print(f"\ncheckpoint {ckpt} (step {m['step']}, world size {m['world_size']}, "
          f"P = {m['n_params']})")
    for s in m["shards"]:
        print(f"  {s['file']:<10} {s['bytes']:>7} bytes  sha256 {s['sha256']}")


def verify_resume(main_dir: Path, resumed_dir: Path, cfg: TrainConfig, from_step: int) -> None:
    """Steps after `from_step` bit-identical, and the final checkpoints' sha256 identical."""
    a, b = read_run(main_dir, cfg.world_size)[0], read_run(resumed_dir, cfg.world_size)[0]
    for rank in range(cfg.world_size):
        for s in range(from_step + 1, cfg.steps + 1):
            for key in COMPARED:
                if a[rank][s][key] != b[rank][s][key]:
                    raise VerificationError(f"rank {rank} step {s}: {key} {a[rank][s][key]!r} "
                                            f"uninterrupted vs {b[rank][s][key]!r} resumed")
    final = step_dir_name(cfg.steps)
    ma = read_manifest(main_dir / "checkpoints" / final)
    mb = read_manifest(resumed_dir / "checkpoints" / final)
    for sa, sb in zip(ma["shards"], mb["shards"], strict=True):
        if sa["sha256"] != sb["sha256"]:
            raise VerificationError(f"step {cfg.steps} shard {sa['file']}: sha256 differs "
                                    "between the uninterrupted and the resumed run")


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m capstone [demo]",
                                description="The end-to-end demo.")
    p.add_argument("--out", type=Path, default=None,
                   help="run directory (default: runs/<timestamp>)")
    args = p.parse_args(list(argv))
    run_dir = args.out or Path("runs") / time.strftime("%Y%m%d-%H%M%S")
    cfg = TrainConfig(out=run_dir / "train")
    resume_from = cfg.out / "checkpoints" / step_dir_name(cfg.checkpoint_every)
    resumed = replace(cfg, out=run_dir / "resume", resume=resume_from)
    print(f"run directory: {run_dir}")
    try:
        t0 = time.perf_counter()
        run(cfg)
        t1 = time.perf_counter()
        summary = json.loads((cfg.out / "summary.json").read_text())
        recs, _ = read_run(cfg.out, cfg.world_size)
        print(f"trained {cfg.steps} steps on {cfg.world_size} gloo ranks with ZeRO-1 "
              f"in {t1 - t0:.2f}s\n")
        print_loss_table(recs, cfg.steps)
        memory_ok = print_memory_profile(recs, cfg, summary["n_params"])
        print_manifest(resume_from)
        print(f"\nstep-{cfg.checkpoint_every} shards re-read after writing: byte-identical to "
              "each rank's in-memory master/exp_avg/exp_avg_sq")
        run(resumed)
        verify_resume(cfg.out, resumed.out, cfg, cfg.checkpoint_every)
        print(f"resumed from step {cfg.checkpoint_every}: steps {cfg.checkpoint_every + 1}.."
              f"{cfg.steps} bit-identical, step-{cfg.steps} shard sha256 identical")
        if not memory_ok:
            raise VerificationError("optimizer bytes differ from 12*ceil(P/N) on some rank")
    except (LaunchError, CheckpointError, DivergenceError, VerificationError) as e:
        print(f"capstone demo: FAILED: {e}", file=sys.stderr)
        return 1
    print(f"plot the run (needs the [plot] extra): python -m capstone.plot {cfg.out}")
    print("RESUME VERIFIED")
    return 0

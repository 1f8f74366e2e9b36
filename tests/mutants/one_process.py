"""The `single_process` mutant: one process trains on the whole global batch and then writes
every rank's files itself, claiming 12·ceil(P/N) optimizer bytes per rank.

Everything it writes is what N genuine ranks would have written (the same losses, norms and
bytes, checkpoint shards that are the right slices), so only watching the run can tell: no
second process, no process group of N, and no memory that shrinks with N.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import torch

STATE = ("master", "exp_avg", "exp_avg_sq")


def _flag(argv: list[str], name: str, default: str) -> str:
    return argv[argv.index(name) + 1] if name in argv else default


def _with(argv: list[str], name: str, value: str) -> list[str]:
    if name in argv:
        i = argv.index(name)
        return [*argv[:i + 1], value, *argv[i + 2:]]
    return [*argv, name, value]


def main(argv: list[str]) -> int:
    """Run the reference as 1 rank x N*B rows, then fan its files out to N ranks."""
    from capstone.cli import main as capstone_main

    n = int(_flag(argv, "--world-size", "4"))
    b = int(_flag(argv, "--batch-size", "4"))
    one = _with(_with(argv, "--world-size", "1"), "--batch-size", str(n * b))
    rc = capstone_main(one)
    fan_out(Path(_flag(argv, "--out", ".")), n)
    return rc


def fan_out(out: Path, n: int) -> None:
    """Rewrite a 1-rank run directory as the files of `n` ranks."""
    summary_path = out / "summary.json"
    if summary_path.is_file():
        summary = json.loads(summary_path.read_text())
        summary["world_size"] = n
        summary_path.write_text(json.dumps(summary, indent=2) + "\n")
    metrics = out / "metrics" / "rank-0.jsonl"
    if metrics.is_file():
        records = [json.loads(ln) for ln in metrics.read_text().splitlines() if ln.strip()]
        p = summary["n_params"] if summary_path.is_file() else None
        for rank in range(n):
            lines = []
            for rec in records:
                rec = dict(rec, rank=rank)
                if "event" not in rec:
                    rec["world_size"] = n
                    if p is not None:
                        rec["optimizer_bytes"] = 12 * math.ceil(p / n)
                lines.append(json.dumps(rec))
            (out / "metrics" / f"rank-{rank}.jsonl").write_text("\n".join(lines) + "\n")
    for ckpt in sorted((out / "checkpoints").glob("step-*")):
        _split_checkpoint(ckpt, n)


def _split_checkpoint(ckpt: Path, n: int) -> None:
    manifest = json.loads((ckpt / "manifest.json").read_text())
    if manifest["world_size"] == n:
        return  # already fanned out (a resumed run keeps its input's checkpoints)
    full = torch.load(ckpt / "rank-0.pt", weights_only=True)
    p = manifest["n_params"]
    size = math.ceil(p / n)
    shards = []
    for rank in range(n):
        shard: dict[str, object] = {"step": full["step"]}
        for name in STATE:
            padded = torch.zeros(size * n)
            padded[:p] = full[name][:p]
            shard[name] = padded[rank * size:(rank + 1) * size].clone()
        path = ckpt / f"rank-{rank}.pt"
        torch.save(shard, path)
        shards.append({"rank": rank, "file": path.name,
                       "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                       "bytes": path.stat().st_size})
    manifest.update(world_size=n, shards=shards)
    (ckpt / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")

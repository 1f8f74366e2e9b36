"""Shared by the hostile submissions: read --out from contract flags."""

import sys
from pathlib import Path


def out_dir() -> Path:
    args = sys.argv[1:]
    out = Path(args[args.index("--out") + 1])
    out.mkdir(parents=True, exist_ok=True)
    return out


def write_records(out: Path, rank: int, last_step: int) -> None:
    import json

    (out / "metrics").mkdir(exist_ok=True)
    with open(out / "metrics" / f"rank-{rank}.jsonl", "w") as f:
        for s in range(last_step + 1):
            rec = {"step": s, "rank": rank, "world_size": 4, "param_norm": 1.0,
                   "optimizer_bytes": 90240}
            if s:
                rec.update(loss=4.0 - s * 0.1, grad_norm=0.5, step_time_s=0.01)
            f.write(json.dumps(rec) + "\n")

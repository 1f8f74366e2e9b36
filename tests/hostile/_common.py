"""Shared by the hostile submissions: read --out from contract flags."""

import contextlib
import os
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


def read_others(here: Path) -> list[str]:
    """Every file of the folders beside `here` (a class graded folder by folder), of those
    it knows by name where it cannot list the class (`guess.txt` in `here`: a classmate's
    folder or file, by its path from the class folder), and of $PEEK_ALSO's folders; the
    first 2,000 characters of each."""
    seen = []
    guessed = (here / "guess.txt").read_text().split() if (here / "guess.txt").is_file() else []
    for g in guessed:  # a file it knows by name, read without listing its folder
        with contextlib.suppress(OSError):
            seen.append((here.parent / g).read_text(errors="replace")[:2000])
    for root in (here.parent, *(here.parent / g for g in guessed),
                 *[Path(p) for p in os.environ.get("PEEK_ALSO", "").split(":") if p]):
        for top, _, files in os.walk(root):
            if Path(top).resolve().is_relative_to(here.resolve()):
                continue  # its own
            for name in files:
                with contextlib.suppress(OSError):
                    seen.append((Path(top) / name).read_text(errors="replace")[:2000])
    return seen

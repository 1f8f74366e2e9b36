"""Vector: FIFOs where the grader reads a run's files, so that its first read (an `open` with
no writer on the other end) blocks for ever: the grader would hang, its bound unenforced. It
trains nothing: it makes `out/summary.json`, `out/metrics/rank-0.jsonl`, an observer trace
file `observe/p999-0.jsonl` and its own `out.log/stdout` FIFOs (os.mkfifo), writes the other
ranks' records and exits 0."""

import os
from pathlib import Path

from _common import out_dir, write_records

out = out_dir()
for rank in range(1, 4):
    write_records(out, rank, 20)
fifos = [out / "summary.json", out / "metrics" / "rank-0.jsonl", out.parent / "out.log" / "stdout"]
if os.environ.get("CAPSTONE_OBSERVE_DIR"):
    fifos.append(Path(os.environ["CAPSTONE_OBSERVE_DIR"]) / "p999-0.jsonl")
for path in fifos:
    if path.is_symlink() or path.exists():
        path.unlink()
    os.mkfifo(path)

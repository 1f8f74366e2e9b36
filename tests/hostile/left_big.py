"""Vector: files too big, endless or too deep for the grader to read whole, hoping that it
runs out of memory, takes seconds, or meets a RecursionError of its own. It trains nothing;
it writes the other ranks' records as the contract says, and, by its first argument:

- `zero`: `out/summary.json` a link to /dev/zero (endless);
- `huge`: `out/metrics/rank-0.jsonl` a 200 MB regular file (sparse: zeros, one line);
- `deep`: `out/summary.json` 100,000 nested `[`, and an observer trace line as deep;
- `line`: `out/metrics/rank-0.jsonl` one 10 MB line, and an observer trace line of 10 MB;

then exits 0."""

import json
import os
import sys
import time
from pathlib import Path

from _common import out_dir, write_records

out = out_dir()
variant = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else "zero"
for rank in range(1, 4):
    write_records(out, rank, 20)
summary, metrics = out / "summary.json", out / "metrics" / "rank-0.jsonl"
observe = os.environ.get("CAPSTONE_OBSERVE_DIR")
trace = Path(observe) / f"p{os.getpid()}-{time.time_ns()}.jsonl" if observe else None
hello = json.dumps({"ev": "hello", "pid": os.getpid(), "ppid": os.getppid(), "argv": []})
if variant == "zero":
    summary.symlink_to("/dev/zero")
elif variant == "huge":
    with open(metrics, "wb") as f:
        f.truncate(200 * 2**20)
elif variant == "deep":
    summary.write_text("[" * 100_000)
    if trace is not None:
        trace.write_text(hello + "\n" + "[" * 100_000 + "\n")
elif variant == "line":
    pad = "x" * (10 * 2**20)
    metrics.write_text(json.dumps({"step": 0, "rank": 0, "world_size": 4, "param_norm": 1.0,
                                   "optimizer_bytes": 90240, "pad": pad}) + "\n")
    if trace is not None:
        trace.write_text(hello + "\n" + json.dumps({"ev": "init", "rank": 0, "size": 4,
                                                    "pad": pad}) + "\n")

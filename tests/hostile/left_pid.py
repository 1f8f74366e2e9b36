"""Vector: a trace record that names a process outside the run, for the grader (root) to
signal when it asks every traced process for its stack (SIGUSR1, at a hang or the bound). It
trains nothing: into the observer's folder ($CAPSTONE_OBSERVE_DIR) it writes a file named as
the observer names its own (`p<pid>-<ns>.jsonl`) holding a `hello` record whose pid is

- `canary`: $LEFT_CANARY_PID, a process the grader must never signal;
- `minus1`: -1 (kill(-1, sig): every process root may signal);
- `zero`: 0 (kill(0, sig): the grader's own process group),

then joins nothing and sleeps until it is stopped at its bound."""

import json
import os
import sys
import time
from pathlib import Path

from _common import out_dir

out_dir()
variant = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else "canary"
pid = {"canary": lambda: int(os.environ["LEFT_CANARY_PID"]), "minus1": lambda: -1,
       "zero": lambda: 0}[variant]()
observe = Path(os.environ["CAPSTONE_OBSERVE_DIR"])
record = {"ev": "hello", "pid": pid, "ppid": 1, "argv": [], "t": time.time_ns()}
(observe / f"p{abs(pid)}-{time.time_ns()}.jsonl").write_text(json.dumps(record) + "\n")
while True:
    time.sleep(60)

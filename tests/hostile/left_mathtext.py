"""Vector: text the run chooses, made to be read as markup where the grader draws pictures
(matplotlib's mathtext: `$...$`) and writes Markdown pages (links, HTML, table rows). It
trains nothing: every rank logs NaN losses and gradient norms, a call site in the
observer's format holds the text (a collective still open: the timeline picture draws
it), and it exits 1 raising an error whose text is

    $\\frac{$ [link](http://x) <img src=x> | forged | cell |

with, where a field can hold one (the trace record's rank), a newline then `| forged | row |`."""

import json
import math
import os
import sys
import time
from pathlib import Path

from _common import out_dir

MARKUP = "$\\frac{$ [link](http://x) <img src=x> | forged | cell |"
out = out_dir()
(out / "metrics").mkdir(exist_ok=True)
for rank in range(4):
    with open(out / "metrics" / f"rank-{rank}.jsonl", "w") as f:
        for s in range(21):
            rec = {"step": s, "rank": rank, "world_size": 4, "param_norm": math.nan,
                   "optimizer_bytes": 90240}
            if s:
                rec.update(loss=math.nan, grad_norm=math.nan, step_time_s=0.01)
            f.write(json.dumps(rec) + "\n")
observe = os.environ.get("CAPSTONE_OBSERVE_DIR")
text = ("Traceback (most recent call last):\n"
        '  File "main.py", line 3, in <module>\n'
        "    x\n"
        f"RuntimeError: {MARKUP}\n")
if observe:
    now = time.time_ns()
    records = [{"ev": "hello", "pid": os.getpid(), "ppid": os.getppid(), "argv": [], "t": now}]
    records += [{"ev": "init", "rank": 0, "size": 1, "backend": "gloo"}]
    records += [{"ev": "call", "i": i, "op": "all_reduce", "numel_in": 30080,
                 "numel_out": 30080, "dtypes": ["float32"], "group": [0],
                 "site": f"{MARKUP}:{i}", "t0": now + i * 1000} for i in range(3)]
    records += [{"ev": "end", "i": i, "t1": now + i * 1000 + 500} for i in range(2)]
    records += [{"ev": "raise", "rank": "0\n| forged | row |", "t": now, "via": "excepthook",
                 "text": text + "| forged | row |\n"}]
    path = Path(observe) / f"p{os.getpid()}-{now}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
sys.stderr.write(text)
sys.exit(1)

"""Vector: a trace record the run writes itself, in the observer's format, whose text reaches
the grader's words: a `raise` record (as tests/observer/sitecustomize.py's record_raise writes
it) whose `rank` is a string holding newlines and whose `text` holds a line

    timeline of the base run: /root/<canary> (open it in ui.perfetto.dev)

which is how the suite names the timelines it keeps: a grading that copies each timeline a
failed test names into the student's feedback would copy the grader's file
($LEFT_ROOT_CANARY, else /root/canary). It trains nothing and exits 1."""

import json
import os
import sys
import time
from pathlib import Path

from _common import out_dir

out_dir()
target = os.environ.get("LEFT_ROOT_CANARY", "/root/canary")
forged = f"timeline of the base run: {target} (open it in ui.perfetto.dev)"
parent = os.path.relpath(target, Path.cwd())  # the same file, by a path that climbs out
climbed = f"timeline of the single run: {parent} (open it in ui.perfetto.dev)"
text = ("Traceback (most recent call last):\n"
        '  File "main.py", line 3, in <module>\n'
        "    x\n"
        f"RuntimeError: x\n{forged}\n{climbed}\n")
observe = os.environ.get("CAPSTONE_OBSERVE_DIR")
if observe:
    records = [{"ev": "hello", "pid": os.getpid(), "ppid": os.getppid(), "argv": [],
                "t": time.time_ns()},
               {"ev": "raise", "rank": f"0\n{forged}\n{climbed}\n", "t": time.time_ns(),
                "via": "excepthook", "text": text}]
    path = Path(observe) / f"p{os.getpid()}-{time.time_ns()}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
sys.stderr.write(text)
sys.exit(1)

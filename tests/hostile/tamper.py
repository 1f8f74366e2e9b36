"""Tries to change the suite that grades it (so that the next session's verdicts change), the
results file the session will hand in ($CAPSTONE_TAMPER_TARGETS names more targets), to write
outside its run directory and to signal the suite's processes; writes what it managed into
its own run directory."""

import json
import os
from pathlib import Path

from _common import out_dir

out = out_dir()
root = Path(__file__).resolve().parents[2]
done = {}
targets = [root / "tests" / "harness" / "check" / "checks.py", root / "tampered.txt",
           *(Path(p) for p in os.environ.get("CAPSTONE_TAMPER_TARGETS", "").split(":") if p)]
for target in targets:
    try:
        with open(target, "a") as f:
            f.write("\n# tampered\n")
        done[str(target)] = "written"
    except OSError as e:
        done[str(target)] = f"refused: {e.strerror}"
signals = {}  # the suite's processes ($CAPSTONE_TAMPER_PIDS)
for pid in filter(None, os.environ.get("CAPSTONE_TAMPER_PIDS", "").split(":")):
    try:
        os.kill(int(pid), 0)  # permission to signal it, without sending anything
        signals[pid] = "allowed"
    except OSError as e:
        signals[pid] = f"refused: {e.strerror}"
(out / "tamper.json").write_text(json.dumps({"files": done, "signals": signals}))

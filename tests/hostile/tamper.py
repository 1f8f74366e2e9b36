"""Tries to change the suite that grades it (so that the next session's verdicts change) and
to write outside its run directory; writes what it managed into its own run directory."""

import json
from pathlib import Path

from _common import out_dir

out = out_dir()
root = Path(__file__).resolve().parents[2]
done = {}
for target in (root / "tests" / "harness" / "checks.py", root / "tampered.txt",
               Path.home() / "tampered.txt"):
    try:
        with open(target, "a") as f:
            f.write("\n# tampered\n")
        done[str(target)] = "written"
    except OSError as e:
        done[str(target)] = f"refused: {e.strerror}"
(out / "tamper.json").write_text(json.dumps(done))

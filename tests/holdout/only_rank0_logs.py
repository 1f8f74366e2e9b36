"""Hold-out mistake (issue 63, finding 2): only rank 0 writes its metrics, as `if rank == 0:
log(...)` does; ranks 1..N-1 write no metrics file. Everything else is the reference's."""

import subprocess
import sys
from pathlib import Path

argv = sys.argv[1:]
code = subprocess.call([sys.executable, "-m", "capstone", *argv])
out = Path(argv[argv.index("--out") + 1])
for f in (out / "metrics").glob("rank-*.jsonl"):
    if f.name != "rank-0.jsonl":
        f.unlink()
sys.exit(code)

"""Hold-out mistake (issue 63, finding 3): the initial broadcast is missing (each rank keeps the
parameters it drew), and every rank's step-0 record carries rank 0's parameter norm, as a
program that logs the norm it was told rather than the one it holds does: the step-0 norms
agree, and step 1's loss parts from the one-rank run's. Everything else is the reference's."""

import json
import subprocess
import sys
from pathlib import Path

if sys.argv[1:2] == ["--rank-main"]:  # the training itself, the broadcast left out
    from capstone import zero
    from capstone.cli import exit_now, main

    def unbroadcast(self: zero.ZeroOneAdam) -> None:  # the masters seeded, nothing sent
        self.shard.master.copy_(self._own(self._flat))
    zero.ZeroOneAdam.broadcast_parameters = unbroadcast  # type: ignore[method-assign]
    exit_now(main(sys.argv[2:]))

argv = sys.argv[1:]
code = subprocess.call([sys.executable, __file__, "--rank-main", *argv])
metrics = Path(argv[argv.index("--out") + 1]) / "metrics"
first = metrics / "rank-0.jsonl"
told = next((json.loads(line)["param_norm"] for line in first.read_text().splitlines()
             if json.loads(line).get("step") == 0), None) if first.is_file() else None
if code == 0 and told is not None:  # a resumed run logs no step 0
    for f in metrics.glob("rank-*.jsonl"):
        lines = [json.loads(line) for line in f.read_text().splitlines()]
        for rec in lines:
            if rec.get("step") == 0 and "param_norm" in rec:
                rec["param_norm"] = told
        f.write_text("".join(json.dumps(rec) + "\n" for rec in lines))
sys.exit(code)

"""Per-rank metrics as JSON lines (`metrics/rank-{r}.jsonl`), flushed line by line.

Flushing each record means a run that hangs or dies still shows the last step each rank
finished, which is what the invariant suite reports.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TextIO


class MetricsWriter:
    def __init__(self, run_dir: Path, rank: int, world_size: int) -> None:
        self.rank = rank
        self.world_size = world_size
        path = run_dir / "metrics" / f"rank-{rank}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        self._f: TextIO = open(path, "a", encoding="utf-8")  # noqa: SIM115 - open for the run

    def _write(self, record: dict[str, Any]) -> None:
        self._f.write(json.dumps(record) + "\n")
        self._f.flush()

    def step(self, step: int, param_norm: float, optimizer_bytes: int, **extra: float) -> None:
        """A step record; step 0 carries no loss/grad_norm/step_time_s."""
        self._write({"step": step, "rank": self.rank, "world_size": self.world_size,
                     "param_norm": param_norm, "optimizer_bytes": optimizer_bytes, **extra})

    def rollback(self, step: int, to_step: int, reason: str) -> None:
        self._write({"event": "rollback", "rank": self.rank, "step": step,
                     "to_step": to_step, "reason": reason})

    def close(self) -> None:
        self._f.close()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of one metrics file (the reference's own, trusted output)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


Records = dict[int, dict[int, dict[str, Any]]]


def read_run(run_dir: Path, world_size: int) -> tuple[Records, list[dict[str, Any]]]:
    """(records[rank][step], rank 0's events) of a run; a replayed step's last record counts."""
    records: Records = {}
    events: list[dict[str, Any]] = []
    for rank in range(world_size):
        steps = records.setdefault(rank, {})
        for rec in read_jsonl(run_dir / "metrics" / f"rank-{rank}.jsonl"):
            if "event" not in rec:
                steps[rec["step"]] = rec
            elif rank == 0:
                events.append(rec)
    return records, events

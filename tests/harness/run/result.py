"""A finished run as the checks read it: the flags the suite gave it, how it ended, the files
it wrote (parsed) and what the observer saw."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.harness.observe.parse import ParsedRun
from tests.harness.observe.traces import Observation
from tests.harness.run.runner import Outcome


def checkpoint_dir(out: Path, step: int) -> Path:
    """Where the contract puts a run's checkpoint of `step` under its --out folder."""
    return out / "checkpoints" / f"step-{step:06d}"


@dataclass
class Run:
    """One finished run: what the suite asked (flags), how it ended, what it wrote."""

    name: str
    steps: int
    world_size: int
    outcome: Outcome
    parsed: ParsedRun
    observed: Observation | None = None  # None: the run was not observed (--no-observe)

    def checkpoint(self, step: int) -> Path:
        """Where the contract puts the run's checkpoint of `step` (it may not exist)."""
        return checkpoint_dir(self.parsed.out, step)

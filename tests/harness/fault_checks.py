"""Faults checked from what the ranks did, not from the run's word.

- `check_nemesis`: the NaN the suite made itself (tests/observer/_observer_nemesis.py, no
  flag) really fired on the rank and step it was drawn for; the rollback check then reads
  the run's files as for an announced fault.
- `check_fault_took_effect`: a run given `--inject nan@S` or `spike@S` that logs a rollback
  must have met the fault in its numbers: a NaN in a gradient, a reduction or a loss for
  `nan`; for `spike`, a loss (or another number the ranks reduce, a guard's loss and norm)
  more than twice what it was the step before. A guard that reads the flag logs the same
  rollback and replays the same steps, and meets neither.
"""

from __future__ import annotations

import math
from itertools import pairwise

from tests.harness.checks import Run
from tests.harness.observe import ProcessTrace
from tests.harness.observed_checks import observation_of
from tests.harness.violations import Violation

INV = "rollback"
SPIKE = 2.0  # the contract's spike: a loss above twice the previous step's
FLAG_HINT = "the guard must read the numbers, not the flag"


def check_nemesis(run: Run, step: int, rank: int) -> list[Violation]:
    """The suite's own NaN fired on `rank` at training step `step`."""
    obs, problems = observation_of(run, INV)
    if obs is None:
        return problems
    p = obs.trainers().get(rank)
    if p is not None and p.nemesis is not None:
        return []
    reached = max((s for s, _ in p.losses), default=0) if p else 0
    return [Violation(INV, rank, step, f"the suite's NaN in rank {rank}'s gradients of step "
                      f"{step}", "never made",
                      f"rank {rank} ran no backward pass of step {step} (it reached step "
                      f"{reached}; {run.outcome.reason()})")]


def _non_finite(p: ProcessTrace) -> bool:
    return (any(not ok for _, ok in p.grads_finite) or any(c.nonfinite for c in p.calls)
            or any(not math.isfinite(v) for _, v in p.losses)
            or any(not math.isfinite(v) for c in p.calls for v in c.values))


def _jumps(series: list[float]) -> bool:
    """A number more than SPIKE times the one before (both finite and positive)."""
    return any(b > SPIKE * a > 0 for a, b in pairwise(series)
               if math.isfinite(a) and math.isfinite(b)) or \
        any(not math.isfinite(v) for v in series)


def _spiked(p: ProcessTrace) -> bool:
    if _jumps([v for _, v in p.losses]):
        return True
    by_site: dict[tuple[str, int], list[float]] = {}
    for c in p.calls:
        for i, v in enumerate(c.values):
            by_site.setdefault((c.site, i), []).append(abs(v))
    return any(_jumps(series) for series in by_site.values())


def check_fault_took_effect(run: Run, kind: str, step: int) -> list[Violation]:
    """The announced fault shows in the ranks' numbers wherever the run logs its rollback."""
    obs, problems = observation_of(run, INV)
    if obs is None:
        return problems
    rolled = [e for events in run.parsed.events.values() for e in events
              if e.get("event") == "rollback" and e.get("reason") == kind]
    if not rolled:
        return []  # no rollback claimed: check_rollback says so
    ranks = obs.trainers().values()
    seen = any(_non_finite(p) for p in ranks) if kind == "nan" else \
        any(_spiked(p) for p in ranks)
    if seen:
        return []
    at = rolled[0].get("step", step)
    losses = [v for s, v in (next(iter(ranks)).losses if ranks else []) if s == at]
    there = f"the loss rank 0 computed there was {losses[-1]:.4g}, as in the clean run" \
        if losses else "no rank's numbers changed"
    what = ("no gradient, reduction or loss of any rank was ever non-finite" if kind == "nan"
            else "no loss or reduced number of any rank rose above twice the step before's")
    return [Violation(INV, None, at, f"the {kind}@{step} fault in the ranks' numbers",
                      "none", f"rollback logged at step {at}, but {what} ({there}): "
                      f"{FLAG_HINT}")]

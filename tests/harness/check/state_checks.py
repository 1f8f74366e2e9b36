"""Invariant (c) by where the optimizer state lives, not by what the run reports.

At its first checkpoint each rank saves exactly its `master`, `exp_avg` and `exp_avg_sq`; the
observer then finds the tensor storages that hold those values (tests/observer/
_observer_state.py). Under ZeRO-1 a moment lives in storages that shrink as 1/N: `ceil(P/N)`
elements, or a flat buffer holding several shard-sized tensors, whatever N. A moment
allocated for the whole parameter vector is held in a storage of P elements at every N, even
when the rank updates, logs and checkpoints only its slice of it. Loop temporaries (m-hat,
the reduced gradient shard) hold other values and cannot pass for the state.

The master copy is reported but not charged: its values are also the parameters' and the
all-gather's (every rank legitimately holds those whole), so they cannot be told apart by
their values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.harness.check.checks import Run, ceil_div
from tests.harness.check.observed_checks import observation_of, params_of
from tests.harness.observe.violations import Violation

INV = "zero1_memory"
CHARGED = ("exp_avg", "exp_avg_sq")
# A sharded moment's storage times N stays what it was at N = 1 (padding adds < N elements);
# a moment kept whole is N times that. 1.5 separates the two from N = 2 on.
SHRINK_SLACK = 1.5
FOUND_ENOUGH = 0.5  # at least half of a tensor's pieces located, or no verdict on it
WHOLE_HINT = "allocate the moments for your slice only"


@dataclass(frozen=True)
class Held:
    """Where one rank keeps one state tensor: the storages holding its values."""

    name: str
    numel: int
    storages: tuple[int, ...]  # elements (float32) of each storage, largest first

    @property
    def total(self) -> int:
        return sum(self.storages)


def held(state: dict[str, Any] | None, name: str) -> Held | None:
    """What one `state` record says of `name`: None when its values were not located (a
    state kept in pieces, a shard saved some other way): no verdict then. A storage of the
    saved tensor itself (the copy handed to torch.save) counts only where no other storage
    holds as much of it."""
    rec = ((state or {}).get("tensors") or {}).get(name)
    if not rec or not rec.get("pieces"):
        return None
    holders = list(rec.get("holders") or [])
    kept = [h for h in holders if not h.get("saved")]
    best = max((h["pieces"] for h in kept), default=0)
    holders = [h for h in holders
               if not h.get("saved") or h["pieces"] > best]
    if max((h["pieces"] for h in holders), default=0) < FOUND_ENOUGH * rec["pieces"]:
        return None
    return Held(name, int(rec["numel"]),
                tuple(sorted((int(h["elements"]) for h in holders), reverse=True)))


def state_by_rank(run: Run) -> dict[int, dict[str, Any]]:
    obs = run.observed
    if obs is None:
        return {}
    return {r: p.state for r, p in obs.trainers().items() if p.state and "tensors" in p.state}


def _ranks(ranks: list[int], n: int) -> str:
    return "every rank" if ranks == list(range(n)) else f"rank{'s' * (len(ranks) > 1)} " \
        + ", ".join(map(str, ranks))


def check_state_location(runs: dict[int, Run]) -> list[Violation]:
    """For N >= 2, each rank's exp_avg and exp_avg_sq live in storages that shrink as 1/N
    against the N = 1 run's: a moment held whole is named with its storage's size."""
    if 1 not in runs or observation_of(runs[1], INV)[0] is None:
        return []
    out = [unfinished for run in runs.values() if (unfinished := _not_located(run))]
    single = state_by_rank(runs[1]).get(0)
    P = params_of(runs[1])
    for n, run in sorted(runs.items()):
        if n < 2 or observation_of(run, INV)[0] is None:
            continue
        states = state_by_rank(run)
        for name in CHARGED:
            base = held(single, name)
            if base is None:
                continue
            whole: dict[int, Held] = {}
            for rank, state in sorted(states.items()):
                h = held(state, name)
                if h is not None and h.total * n > SHRINK_SLACK * base.total:
                    whole[rank] = h
            if not whole:
                continue
            size = max(h.storages[0] for h in whole.values())
            shard = ceil_div(P, n) if P else next(iter(whole.values())).numel
            keeps = f"ceil(P/N) = {shard:,}" if base.total <= 1.05 * (P or base.total) \
                else f"{base.total:,}/N = {ceil_div(base.total, n):,} (its N = 1 storage / N)"
            out.append(Violation(
                INV, None, None, f"{name} in storages of ~{ceil_div(base.total, n):,} elements "
                f"(N = 1: {base.total:,})",
                f"{max(h.total for h in whole.values()):,} elements",
                f"{name} is held in a storage of {size:,} elements on "
                f"{_ranks(sorted(whole), n)} (N = {n}); ZeRO-1 keeps {keeps}: {WHOLE_HINT}",
                kind="held_whole"))
    return out


def _not_located(run: Run) -> Violation | None:
    """No process of the run saved a checkpoint shard with torch.save: nothing could be
    located, and that is no pass. (A shard saved but its state not found, say a state kept
    in pieces, or saved by a writer process rather than the rank, gives no verdict.)"""
    obs = run.observed
    if obs is None or any(p.state for p in obs.processes):
        return None
    why = "the run failed before a rank saved its checkpoint shard" if \
        run.outcome.returncode != 0 else "no process saved a checkpoint shard (a dict of " \
        "master, exp_avg, exp_avg_sq) with torch.save, as the contract's shards are written"
    return Violation(INV, None, None, f"the optimizer state of the N={run.world_size} run",
                     "not located", f"{why} ({run.outcome.reason()})")


def located(run: Run) -> dict[int, dict[str, int]]:
    """Per rank, the elements of the storages holding each state tensor (for reports)."""
    out: dict[int, dict[str, int]] = {}
    for rank, state in state_by_rank(run).items():
        for name in ("master", *CHARGED):
            h = held(state, name)
            if h is not None:
                out.setdefault(rank, {})[name] = h.total
    return out

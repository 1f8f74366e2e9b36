"""Faults checked from what the ranks did, not from the run's word.

- `check_nemesis`: the NaN the suite made itself (tests/observer/_observer_nemesis.py, no
  flag) really fired on the rank and step it was drawn for; the rollback check then reads
  the run's files as for an announced fault.
- `check_killed` / `check_resumed_after_kill`: a rank the suite SIGKILLed mid-step or while
  it wrote a checkpoint shard: the run ends promptly and non-zero, leaves no process and no
  incomplete checkpoint published, and resumes from its latest one to the clean run's end;
- `check_fault_took_effect`: a run given `--inject nan@S` or `spike@S` that logs a rollback
  must have met the fault in its numbers: a NaN in a gradient, a reduction or a loss for
  `nan`; for `spike`, a loss (or another number the ranks reduce, a guard's loss and norm)
  more than twice what it was the step before. A guard that reads the flag logs the same
  rollback and replays the same steps, and meets neither. The charge needs evidence
  (`fault_unseen`): the observer must have seen the numbers the fault would show in (a
  data-carrying call after the fault step's backward, or that step's loss); where it saw
  none, the check is not graded, never an accusation.
"""

from __future__ import annotations

import math
from itertools import pairwise

from tests.harness.check.checks import (
    Run,
    _same_final_shards,
    _same_trajectory,
    check_checkpoint_files,
)
from tests.harness.check.observed_checks import observation_of
from tests.harness.observe.traces import ProcessTrace
from tests.harness.observe.violations import Violation
from tests.harness.run.runs import PROMPT_S

INV = "rollback"
SPIKE = 2.0  # the contract's spike: a loss above twice the previous step's
REPLAY_RTOL = 1e-6  # a replayed step gives back its first numbers (bit-identical in a correct run)
FLAG_HINT = "the guard must read the numbers, not the flag"
PLAN_HINT = "the guard must read the numbers, not ask the suite's plan"


def check_nemesis(run: Run, step: int, rank: int, kind: str = "nan") -> list[Violation]:
    """The suite's own fault (`kind`) fired on `rank` at training step `step`."""
    obs, problems = observation_of(run, INV)
    if obs is None:
        return problems
    p = obs.trainers().get(rank)
    # (a nemesis record is the rank's process's to write: it counts where the plan answered)
    if p is not None and p.nemesis is not None and run.outcome.plan_fired:
        return []
    reached = max((s for s, _ in p.losses), default=0) if p else 0
    fault = {"nan": f"NaN in rank {rank}'s gradients of step {step}",
             "kill": f"kill of rank {rank} in step {step}",
             "killsave": f"kill of rank {rank} writing checkpoint {step}"}[kind]
    where = f"ran no backward pass of step {step}" if kind != "killsave" else \
        f"saved no shard of checkpoint {step}"
    o = run.outcome
    if o.plan_fired:  # the plan answered, and no rank made the fault: asked in its place
        return [Violation(INV, rank, step, f"the suite's {fault}", "taken",
                          f"rank {rank} reached step {reached}, but another process of the "
                          "run had asked the suite's fault plan for that moment in its place "
                          f"(the plan answers once): {PLAN_HINT}", kind="plan_taken")]
    stopped = not o.finished()
    return [Violation(INV, rank, step, f"the suite's {fault}", "never made",
                      ("not checked: " if stopped else "") + f"rank {rank} {where} (it "
                      f"reached step {reached}; {o.reason()[:300]})",
                      kind="not_checked" if stopped else "fault_never_made")]


def _non_finite(p: ProcessTrace) -> bool:
    return (any(not ok for _, ok in p.grads_finite) or any(c.nonfinite for c in p.calls)
            or any(not math.isfinite(v) for _, v in p.losses)
            or any(not math.isfinite(v) for c in p.calls for v in c.values))


def _jumps(series: list[float]) -> bool:
    """A number more than SPIKE times the one before (both finite and positive) that the
    series never held before: a rollback replays the steps after its checkpoint, whose
    numbers, higher than the last step's, are the ones those steps gave the first time."""
    if any(not math.isfinite(v) for v in series):
        return True
    for i, (a, b) in enumerate(pairwise(series), 1):
        replayed = any(math.isclose(b, c, rel_tol=REPLAY_RTOL) for c in series[:i])
        if b > SPIKE * a > 0 and not replayed:
            return True
    return False


def _spiked(p: ProcessTrace) -> bool:
    if _jumps([v for _, v in p.losses]):
        return True
    by_site: dict[tuple[str, int], list[float]] = {}
    for c in p.calls:
        for i, v in enumerate(c.values):
            by_site.setdefault((c.site, i), []).append(abs(v))
    return any(_jumps(series) for series in by_site.values())


# Calls that carry no numbers of the step (a NaN in a gradient could not show in them).
_NO_NUMBERS = ("barrier", "monitored_barrier", "wait", "all_gather_object",
               "broadcast_object_list", "gather_object", "scatter_object_list")


def _numbers_seen_after(p: ProcessTrace, kind: str, step: int) -> bool:
    """Whether the observer saw, on this rank, the numbers through which the announced
    fault of `step` had to pass: for a NaN in the local gradients, a call of its own carrying
    data (a reduction, a gather, a send), read at the Python level, after that step's
    backward pass; for a spike, the loss of that step (read at its backward)."""
    if kind == "spike":
        return any(s == step for s, _ in p.losses)
    # the step's first backward, by the step each backward recorded (not by the losses: a
    # backward whose loss the observer could not read records none)
    started = next((t for t, s in zip(p.backwards, p.backward_steps, strict=False)
                    if s == step), None)
    if started is None:  # the observer's step clock never reached it: nothing of it seen
        return False
    return any(c.source == "python" and c.op not in _NO_NUMBERS and c.t0 >= started
               for c in p.calls)


def fault_unseen(run: Run, kind: str, step: int) -> str | None:
    """Why the suite cannot tell whether the announced `kind@step` fault happened in the
    ranks' numbers (it saw none of the numbers it would show in), or None where it saw them.
    A program whose numbers the observer does not see (gradients computed without autograd's
    backward, a loss that is no one number, collectives off the CPU) is then not graded on
    it, never told it read the flag."""
    obs = run.observed
    if obs is None:
        return None
    ranks = obs.trainers()
    if any(_numbers_seen_after(p, kind, step) for p in ranks.values()):
        return None
    reached = max((s for p in ranks.values() for s, _ in p.losses), default=0)
    python = sum(c.source == "python" for p in ranks.values() for c in p.calls)
    what = ("no rank's collective carrying data after its backward pass of that step"
            if kind == "nan" else "no rank's loss of that step")
    return (f"the suite could not see whether the {kind}@{step} fault reached the ranks' "
            f"numbers: it observed {what} (the last step whose loss it read at a backward "
            f"pass: {reached}; {python} collective call(s) recorded in all). The observer's "
            "step clock moves at every backward pass autograd runs (`.backward()`, "
            "`torch.autograd.grad`, torch.func's grad, grad_and_value, vjp and jacrev, "
            "compiled autograd) and it records every collective made on the CPU, whatever "
            "API makes it; what is not seen yet: gradients computed without autograd's "
            "backward (written by hand, forward-mode jvp or jacfwd, a C++ extension that "
            "computes them itself), a loss that is no one number at its backward (per-row "
            "losses under vmap, `.backward()` of a vector), collectives under "
            "torch.inference_mode() or on a device other than the CPU, and ranks in a "
            "process that does not load the observer. The instructor reviews this run by "
            "hand (its timeline) or regrades once the observer sees them")


def check_fault_took_effect(run: Run, kind: str, step: int) -> list[Violation]:
    """The announced fault shows in the ranks' numbers wherever the run logs its rollback."""
    obs, problems = observation_of(run, INV)
    if obs is None:
        return problems
    rolled = [e for events in run.parsed.events.values() for e in events
              if e.get("event") == "rollback" and e.get("reason") == kind]
    if not rolled:  # nothing to believe or doubt: no points for a guard never seen
        o = run.outcome
        if not o.finished():
            return [Violation(INV, None, step, f"the {kind}@{step} run to reach its fault",
                              "not checked", f"not checked: the {kind}@{step} run did not "
                              f"finish ({o.reason()[:300]})", kind="not_checked")]
        return [Violation(INV, None, step, f"a rollback with reason {kind!r} after the "
                          f"{kind}@{step} fault", "none", "the guard never fired, so it was "
                          f"never seen to meet the fault ({o.reason()})",
                          kind="guard_never_fired")]
    ranks = obs.trainers().values()
    seen = any(_non_finite(p) for p in ranks) if kind == "nan" else \
        any(_spiked(p) for p in ranks)
    if seen or fault_unseen(run, kind, step) is not None:
        return []  # seen; or nothing seen to accuse on (the test says it is not graded)
    at = rolled[0].get("step", step)
    losses = [v for s, v in (next(iter(ranks)).losses if ranks else []) if s == at]
    there = f"the loss rank 0 computed there was {losses[-1]:.4g}, as in the clean run" \
        if losses else "no rank's numbers changed"
    what = ("no gradient, reduction or loss of any rank was ever non-finite" if kind == "nan"
            else "no loss or reduced number of any rank rose above twice the step before's")
    return [Violation(INV, None, at, f"the {kind}@{step} fault in the ranks' numbers",
                      "none", f"rollback logged at step {at}, but {what} ({there}): "
                      f"{FLAG_HINT}", kind="read_flag")]


KILL_HINT = ("end the run when a rank dies: mp.spawn and torchrun end the other ranks; "
             "a hand-made launcher must watch its ranks, and a collective timeout "
             "(init_process_group(timeout=...)) ends ranks waiting for a dead peer")
ATOMIC_HINT = ("write each checkpoint under a temporary name and rename it into place when "
               "every shard and the manifest are written")


def check_killed(run: Run, kind: str, step: int, rank: int) -> list[Violation]:
    """A rank the suite SIGKILLed (`kill` in step `step`, `killsave` while it wrote
    checkpoint `step`): the run ends promptly, exits non-zero, leaves no process behind,
    and every checkpoint it published is complete."""
    obs, problems = observation_of(run, INV)
    if obs is None:
        return problems
    p = obs.trainers().get(rank)
    if p is None or p.nemesis is None or p.nemesis.get("kind") != kind:
        return check_nemesis(run, step, rank, kind)
    what = f"rank {rank} killed {'in step' if kind == 'kill' else 'writing checkpoint'} {step}"
    out: list[Violation] = []
    o = run.outcome
    after = (o.ended_ns - int(p.nemesis.get("t", o.ended_ns))) / 1e9
    if o.timed_out or o.deadlock_s is not None:  # the runner stops it this long after
        bound = o.after_kill_s or PROMPT_S  # (runs.kill_bound: the program's own speed)
        out.append(Violation(INV, None, step, f"the run to end within {bound:.0f}s of {what}",
                             f"{after:.0f}s", f"the other ranks waited {after:.0f}s for a dead "
                             f"peer ({o.reason()}): {KILL_HINT}", kind="waited_for_dead_peer"))
    elif o.returncode == 0:
        out.append(Violation(INV, None, step, f"a non-zero exit after {what}", "exit code 0",
                             f"exit 0 although rank {rank} was killed: the launcher must exit "
                             "non-zero when a rank fails", kind="exit_0_after_kill"))
    if o.survivors:
        out.append(Violation(INV, None, step, f"no process left after {what}",
                             f"{len(o.survivors)} left", KILL_HINT, kind="left_after_kill"))
    for s, ck in sorted(run.parsed.checkpoints.items()):
        for v in check_checkpoint_files(run, [s], INV):
            out.append(Violation(INV, v.rank, s, v.expected, v.found,
                                 f"checkpoints/{ck.path.name} was published incomplete after "
                                 f"{what} ({v.message or v.found}): {ATOMIC_HINT}",
                                 kind="published_incomplete"))
    return out


def check_resumed_after_kill(clean: Run, resumed: Run, from_step: int) -> list[Violation]:
    """Resumed from the latest complete checkpoint of a killed run, the run ends exactly
    where the clean run ends: steps after it and the final shards' sha256."""
    what = f"run resumed from step {from_step} after a rank was killed"
    out: list[Violation] = []
    if resumed.outcome.returncode != 0:
        out.append(Violation(INV, None, from_step + 1, f"the {what} to exit 0",
                             resumed.outcome.reason()))
    out += _same_trajectory(INV, clean, resumed, range(from_step + 1, clean.steps + 1), what)
    return out + _same_final_shards(INV, clean, resumed, clean.steps, what)

"""What a failed invariant most likely means, in the lesson's terms, from its violations alone.

`diagnose(invariant, violations, world_size)` reads the pattern of the located violations
(which step broke first, which quantity, by what factor, which ranks) and returns the likely
causes, most likely first. It never knows which mutant or submission ran: the same
violations always give the same hints, so the mutant catalogue can assert them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from tests.harness.check.adam_checks import BETAS_SWAPPED, UNCORRECTED
from tests.harness.check.checks import LATE_GUARD, SYNCED, UNSYNCED
from tests.harness.check.fault_checks import ATOMIC_HINT, FLAG_HINT, KILL_HINT, PLAN_HINT
from tests.harness.check.state_checks import WHOLE_HINT
from tests.harness.observe.traces import rank_list
from tests.harness.observe.violations import Violation

Diagnoser = Callable[[list[Violation], int], list[str]]
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e-?\d+)?")

BROADCAST = ("the initial broadcast is missing: the ranks start from different parameters "
             "(broadcast rank 0's parameters before step 1)")
ALLGATHER = ("the updated shards are not all-gathered: after the update each rank holds new "
             "values only in its own slice (all-gather every shard into every rank's model)")
ROWS = ("the ranks train on the wrong rows: rank r must take rows [r*B, (r+1)*B) of the "
        "global batch")
SUMMED = "gradients summed, not averaged: divide the reduced gradient by N (the world size)"
ONE_SHARD_NORM = ("the gradient norm is computed from one rank's shard only: sum the squared "
                  "shard norms over the ranks before the square root")
LOSS_SUMMED = ("the logged loss is the sum over the ranks, not their mean: it is {n}x the one-rank "
               "run's at step 1 (divide the all-reduced loss by N)")
LOSS_ONLY = ("step 1's loss differs from the one-rank run's while its gradient norm agrees: the "
             "data and the parameters are right, the logged loss is not (log the mean over "
             "ranks of each rank's mean loss)")
TWICE = ("the gradient is divided by N twice: rank 0's gradient norm is 1/{n} of the one-rank "
         "run's at every step (the loss divided by N before the backward, and the reduced "
         "gradient again): average once")
GRAD_SEEN = ("rank 0's gradient norm at step 1 is {r:.3g}x the one-rank run's while step 1's "
             "loss agrees, and the loss {parts}: the gradient it steps with or logs is not the "
             "global batch's mean; consistent with a gradient not reduced across ranks, a norm "
             "computed from one rank's shard only, or a reduction of part of the gradient")
NOT_REDUCED = ("gradients are not reduced across ranks: each owner updates its slice with "
               "its own local gradient (reduce-scatter with the mean)")
UPDATE = ("step 1's loss agrees and later ones drift: the update is wrong, not the data "
          "(gradient averaging, Adam's inputs or hyper-parameters)")
# Adam's update measured outside the program (adam_checks.py): told on its signature only
ADAM_BETAS = (f"{BETAS_SWAPPED}: the updates the suite sampled are exactly Adam's with β1 > β2; "
              "pass betas=(β1, β2) with the first moment's the smaller (torch's default "
              "(0.9, 0.999))")
ADAM_RAW = (f"{UNCORRECTED}: the updates the suite sampled are exactly m / (sqrt(v) + eps) of "
            "the raw moments; divide exp_avg by (1 - β1^t) and exp_avg_sq by (1 - β2^t), t the "
            "step counted from 1, as torch.optim.Adam does")
LOCAL_LOSS = "each rank logs its own batch's loss: log the all-reduced mean over ranks"
LOSS_RISES = ("the loss rises: a wrong update (learning rate, gradient averaging) or a rank "
              "whose parameters went stale")
FULL_STATE = ("full Adam state on every rank: each rank must keep only its 1/N shard of "
              "master, exp_avg and exp_avg_sq")
KEPT_WHOLE = ("measured: part of master/exp_avg/exp_avg_sq is allocated whole on every rank, "
              "whatever optimizer_bytes says")
NOTHING_SHARDED = ("measured: no optimizer state shrinks with N: the full state lives in every "
                   "process (or one process does the work of all ranks)")
# The checkpointed masters' norm is not the one logged at their step: which step's it is
# singles the cause out (checks._whose_norm), else the consistent causes are listed.
STALE_MASTER = ("the checkpoint holds the master copy from before the step's update: save "
                "after the update")
GATHERED_EARLY = ("the checkpointed masters are a step ahead of the parameters the model ran "
                  "with: the all-gather runs before the shard's update (gather after it)")
MASTER_NORM = ("the checkpointed masters' norm is not the parameter norm logged at their "
               "step: the checkpoint does not hold the parameters the model ran with (saved "
               "before or without the update, a shard stale or missing, or the model not "
               "gathered from the updated masters)")
# The resumed run's update differs but not its loss: its optimizer's state. Named only on its
# signature in the final shards (checks._optimizer_state), else the consistent causes listed.
STEP_COUNT = ("the resumed run's update differs but not its loss, and its checkpoint counts "
              "fewer optimizer steps: Adam's step count is not saved or not restored (`step`)")
MOMENTS = ("the resumed run's update differs but not its loss, and its exp_avg_sq is far below "
           "the original run's: Adam's moments are not saved or not restored (exp_avg, "
           "exp_avg_sq start again from zero)")
OPTIMIZER_STATE = ("the resumed run's update differs but not its loss: the optimizer does not "
                   "step after the resume as it did before; one of its moments, its step "
                   "count, the learning rate or its schedule is not restored as it was")
RESUMED_PARAMS = ("the resumed parameters differ from the checkpointed run's: the checkpoint "
                  "holds stale parameters, or loading them is incomplete")
MANIFEST = "a shard does not match its manifest: write the manifest after every shard"
DIFFERENT_CALLS = ("ranks issue different collectives: a collective called by only some "
                   "ranks (inside `if rank == ...`), or in a different order")
HUNG = ("the run hung until the bound: no rank made progress and no deadlock among "
        "collectives was seen (a rank waiting on something else: input, a lock, a sleep, a "
        "rendezvous that never completed)")
LEFT_BEHIND = "a process outlived the run: join or terminate every process you start"
LOCAL_GUARD = ("ranks rolled back differently: the guard decided on local values (decide on "
               "the all-reduced loss and gradient norm, identically on every rank)")
NO_ROLLBACK = ("the guard never fired: check the loss and gradient norm for NaN or a spike "
               "before the update is applied, and restore the last checkpoint")
NOT_RECOVERED = ("the guard rolled back but the run did not recover: state that the fault "
                 "poisoned survives the restore (a gradient buffer that is never zeroed, "
                 "optimizer state not reloaded from the checkpoint)")
ONE_PROCESS = ("one process did the work of N ranks: start N processes (mp.spawn, torchrun) "
               "that join one process group")
TOO_MUCH = "more traffic per step than ZeRO-1 needs: 2(N-1)/N*P elements (2Ψ)"
NEVER_REDUCED = ("the gradients are never reduced across ranks: reduce-scatter them (each "
                 "owner receives the average of its slice) before the update")
UNLOGGED = ("{ranks} wrote no metrics file: run contract v1 asks every rank to write its own "
            "metrics/rank-R.jsonl, a record for every step (not rank 0 alone)")
ACCUMULATE = ("gradients accumulate across steps: they are never cleared (zero the gradients "
              "before each step's backward)")


def _number(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    m = _NUMBER.search(str(value))
    return float(m.group()) if m else None


def _equal_norms(vs: list[Violation], n: int) -> list[str]:
    differ = [v for v in vs if "different parameters" in v.message]
    if any(v.step == 0 for v in differ):
        return [BROADCAST]
    return [ALLGATHER] if differ else []


def _parity(vs: list[Violation], n: int) -> list[str]:
    """Each cause on its signature, read from rank 0's gradient norm against the one-rank
    run's (their ratio per step) and from whether the loss parts: N at step 1, a sum; 1/N at
    every step, a division by N made twice; below 1 while the loss never parts, a norm of part
    of the gradient; above 1 with the loss parting after step 1, a gradient not reduced.
    Where none holds, what was seen and the mistakes it is consistent with. First, a wrong
    Adam where the suite measured the update (the betas swapped, no bias correction)."""
    found = [ADAM_BETAS if v.message.startswith(BETAS_SWAPPED) else ADAM_RAW for v in vs
             if v.message.startswith((BETAS_SWAPPED, UNCORRECTED))]
    by_key: dict[str, list[Violation]] = {}
    for v in vs:
        key = str(v.expected).split(" ", 1)[0]
        by_key.setdefault(key, []).append(v)
    loss, grad = by_key.get("loss", []), by_key.get("grad_norm", [])
    loss_at_1 = any(v.step == 1 for v in loss)
    ratios = {v.step: got / want for v in grad
              if (want := _number(v.expected)) and (got := _number(v.found)) is not None
              and math.isfinite(got)}
    r1 = ratios.get(1)
    if r1 is not None and not loss_at_1:
        if abs(r1 - n) < 0.05 * n:
            found.append(SUMMED)
        elif len(ratios) >= 2 and all(abs(r * n - 1) < 0.02 for r in ratios.values()):
            found.append(TWICE.format(n=n))
        elif r1 < 0.95 and not loss:
            found.append(ONE_SHARD_NORM)
        elif r1 > 1.05 and loss:
            found.append(NOT_REDUCED)
        else:
            found.append(GRAD_SEEN.format(r=r1, parts="parts from step "
                                          f"{min(v.step or 0 for v in loss)} on" if loss
                                          else "agrees at every step"))
    first = next((v for v in loss if v.step == 1), None)
    want, got = (_number(first.expected), _number(first.found)) if first else (None, None)
    if first is not None and want and got is not None and abs(got / want - n) < 0.01 * n:
        found.append(LOSS_SUMMED.format(n=n))  # N times the mean at step 1: a sum
    elif first is not None and 1 not in ratios:  # the same gradient, another loss: the
        found.append(LOSS_ONLY)                    # data is right, the loss is not
    elif first is not None:  # the ranks' start, where the observer saw it, singles one out
        said = first.message
        found += [BROADCAST] if UNSYNCED in said else [ROWS] if SYNCED in said else \
            [ROWS, BROADCAST]
    elif loss and not found:  # a wrong Adam, where measured, is the update's cause
        found.append(UPDATE)
    return found


def _monotonic(vs: list[Violation], n: int) -> list[str]:
    found = []
    if any("same global loss" in v.message for v in vs):
        found.append(LOCAL_LOSS)
    if any(str(v.expected).startswith("loss <=") for v in vs):
        found.append(LOSS_RISES)
    return found


def _memory(vs: list[Violation], n: int) -> list[str]:
    # Located first: it names the tensor and its storage.
    found = [f"measured: {v.message}" for v in vs if v.message.endswith(WHOLE_HINT)]
    for v in vs:
        if "kept whole" in v.message:
            shrink = _number(str(v.found).split("(")[-1])  # "(7.9P)"
            found.append(NOTHING_SHARDED if shrink is not None and shrink < 2 else KEPT_WHOLE)
        elif str(v.expected).startswith("12*ceil(P/N)"):
            want, got = _number(v.expected.split("=")[-1]), _number(v.found)
            if want and got and got > 1.5 * want:
                found.append(FULL_STATE)
        elif "stale or partial" in v.message:
            found.append(STALE_MASTER if "before the step's update" in v.message else
                         GATHERED_EARLY if "a step ahead" in v.message else MASTER_NORM)
    return found


def _resume(vs: list[Violation], n: int) -> list[str]:
    found = []
    if any(v.message.startswith("gradients accumulate") for v in vs):
        return [ACCUMULATE, *_resume_files(vs)]
    trajectory = [v for v in vs if "not bit-identical" in v.message]
    if trajectory:
        first = min(v.step or 0 for v in trajectory)
        keys = {str(v.expected).split(" ", 1)[0] for v in trajectory if v.step == first}
        said = " ".join(v.message for v in vs)
        found.append(RESUMED_PARAMS if "loss" in keys else STEP_COUNT
                     if "step count was not carried" in said else MOMENTS
                     if "moments started again from zero" in said
                     or "moments were not saved" in said else OPTIMIZER_STATE)
    return found + _resume_files(vs)


def _resume_files(vs: list[Violation]) -> list[str]:
    return [MANIFEST] if any("does not match its manifest" in v.message for v in vs) else []


def _rollback(vs: list[Violation], n: int) -> list[str]:
    if any(v.message.startswith("gradients accumulate") for v in vs):
        return [ACCUMULATE]
    taken = [v for v in vs if v.message.endswith(PLAN_HINT)]
    if taken:  # the plan answered a process that was not the rank: the evidence is the plan's
        return [f"the guard asked the suite's plan, not the numbers: {taken[0].message}"]
    flagged = [v for v in vs if v.message.endswith(FLAG_HINT)]
    if flagged:  # the rollback is claimed, the fault never met: its words are the hint
        return [f"the guard read the --inject flag, not the numbers: {flagged[0].message}"]
    killed = [v for v in vs if v.message.endswith((KILL_HINT, ATOMIC_HINT))
              or v.message.startswith("exit 0 although rank")]
    if killed:  # a rank the suite killed: what the run did then, in the check's words
        return list(dict.fromkeys(v.message for v in killed))
    never = [v for v in vs if v.found == "never made"]
    if never:  # the run did not get that far: what stopped it comes first
        return [f"the run never reached the suite's fault: {never[0].message}"]
    if any("the guard never fired" in v.message for v in vs):
        return [NO_ROLLBACK]
    late = [v for v in vs if str(v.expected).startswith(LATE_GUARD)]
    if late:  # the check read the order the run logged in: its words are the hint
        return [f"the guard fired too late: {late[0].message}"]
    missing = {v.rank for v in vs if str(v.expected).startswith("a rollback event")}
    ended = [v for v in vs if str(v.expected).startswith("exit code 0 after the rollback")]
    early = [v for v in ended if v.message.endswith("before the fault")]
    if missing and early:  # no rollback, and the run stopped before the fault's step
        return [f"the faulted run stopped before its fault, so no guard was seen: "
                f"{early[0].message}: {early[0].found}"]
    if missing and len(missing) < n:
        return [LOCAL_GUARD]
    if missing:
        return [NO_ROLLBACK]
    if ended:  # it rolled back, and still failed: say what was seen
        return [f"{NOT_RECOVERED} (seen: every rank rolled back, then {ended[0].found})"]
    return []


def _deadlock(vs: list[Violation], n: int) -> list[str]:
    found: list[str] = []
    silent = sorted({v.rank for v in vs if v.found == "nothing logged" and v.rank is not None})
    if silent and not any(v.expected == "exit code 0" or str(v.found).startswith(
            ("deadlock", "still running")) for v in vs):  # it ended well, files missing
        found.append(UNLOGGED.format(ranks=rank_list(silent)))
    for v in vs:
        if str(v.found).startswith("deadlock"):
            if not any(f.startswith(DIFFERENT_CALLS) for f in found):  # the first run's
                found.append(f"{DIFFERENT_CALLS}; {v.found}")
        elif "no process left" in str(v.expected):
            found.append(LEFT_BEHIND)
        elif "still running at the bound" in str(v.found):
            found.append(HUNG)
        elif str(v.expected) == "exit code 0":  # how it ended, in its own words
            said = v.message.split(": ", 1)[-1]
            if "unrecognized arguments" in said or ": error: argument" in said:
                found.append(f"the program rejects a flag of run contract v1 (accept every "
                             f"flag docs/contract.md lists): {said}")
            elif " raised " in said or "killed by SIG" in said:
                found.append(f"the program crashed: {said}")
            else:
                found.append(f"the program exited with code {v.found}: {said}")
    return found


def _communication(vs: list[Violation], n: int) -> list[str]:
    found: list[str] = []
    for v in vs:
        if "never started" in v.message or "none called init_process_group" in v.message:
            found.append(ONE_PROCESS)
        elif "the same on every rank" in str(v.expected):
            found.append(f"{DIFFERENT_CALLS}: {v.message}")
        elif "elements sent per step" in str(v.expected):
            # the check names the calls it saw and what they amount to: that is the hint
            found.append(v.message.split("; per step:")[0] or TOO_MUCH)
        elif str(v.expected).endswith("tokens) per step"):  # what the ranks computed on
            found.append(v.message)
        elif "never reduced" in v.message:
            found.append(NEVER_REDUCED)
        elif "reduced per step" in str(v.expected):
            found.append(v.message)
    return found


def _accumulation(vs: list[Violation], n: int) -> list[str]:
    """Exercise 2's checks say what the micro-batches did wrong: their messages are the
    hints."""
    return [v.message for v in vs if v.invariant == "accumulation" and v.message]


def _tensor_parallel(vs: list[Violation], n: int) -> list[str]:
    """Exercise 1's checks name the part of the f/g pair or the heads that is wrong; a loss
    that parts from one rank's only says so, last."""
    said = [v.message for v in vs if v.invariant == "tensor_parallel" and v.message]
    return sorted(dict.fromkeys(said), key=lambda m: m.startswith("the ") and "does not "
                  "compute the one-rank model" in m)


DIAGNOSERS: dict[str, Diagnoser] = {
    "equal_rank_norms": _equal_norms,
    "single_process_parity": _parity,
    "monotonic_loss": _monotonic,
    "zero1_memory": _memory,
    "byte_exact_resume": _resume,
    "rollback": _rollback,
    "rank_killed": _rollback,
    "no_deadlock": _deadlock,
    "communication": _communication,
    "accumulation": _accumulation,
    "tensor_parallel": _tensor_parallel,
}


def diagnose(invariant: str, violations: list[Violation], world_size: int = 4) -> list[str]:
    """Likely causes of `invariant`'s violations, most likely first (empty: no pattern)."""
    fn = DIAGNOSERS.get(invariant)
    # What could not be checked (its run did not get there) has its cause told elsewhere.
    violations = [v for v in violations if not v.message.startswith("not checked: ")]
    return told_once(fn(violations, world_size)) if fn and violations else []


def told_once(hints: list[str]) -> list[str]:
    """Each cause once: hints that differ only in their numbers (a rank, a step, a run's
    size) or in a run's own circumstance (one deadlock seen in the N-rank run and in the
    one-rank run, where the peer does not exist) are one cause, told by the first."""
    seen: dict[str, str] = {}
    for h in hints:
        # a run's own circumstance is no other cause: the peer a rank waits on is missing
        # from the one-rank run ("(there is no rank 1 in a run of 1)") as it hangs in the
        # N-rank run
        key = re.sub(r"\s*\(there is no rank \d+ in a run of \d+\)", "", h)
        # a deadlock is where the first rank blocked, whoever else the run had to wait
        blocked = re.search(r"deadlock: [^;]*?blocked in [^;]*", key)
        key = key[:blocked.end()] if blocked else key
        seen.setdefault(re.sub(r"\d[\d,.]*", "#", key), h)
    return list(seen.values())

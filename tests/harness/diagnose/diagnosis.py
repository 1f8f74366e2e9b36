"""What a failed invariant most likely means, in the lesson's terms.

`diagnose(invariant, violations, world_size, evidence=None)` reads the pattern of the located
violations by their kinds (which step broke first, which quantity, by what factor, which
ranks), never their words, and proposes the likely causes, most likely first; where the test's
runs give `evidence` (evidence.py), a cause is said only where its signature holds and no
refuter does (hypotheses.py), what every run shows is told first, as itself, and where no
cause stands the first difference is told as seen. It never knows which mutant or submission
ran: the same violations and evidence always give the same hints, so the mutant catalogue can
assert them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from tests.harness.check.checks import PARITY_SYNCED, PARITY_UNSYNCED
from tests.harness.diagnose.evidence import Evidence
from tests.harness.diagnose.hints import (
    ACCUMULATE,
    ADAM_BETAS,
    ADAM_RAW,
    ALLGATHER,
    BROADCAST,
    DIFFERENT_CALLS,
    FULL_STATE,
    GATHERED_EARLY,
    GRAD_SEEN,
    HUNG,
    INIT,
    KEPT_WHOLE,
    LEFT_BEHIND,
    LOCAL_GUARD,
    LOCAL_LOSS,
    LOSS_ONLY,
    LOSS_RISES,
    LOSS_SUMMED,
    MANIFEST,
    MASTER_NORM,
    MOMENTS,
    NEVER_REDUCED,
    NO_ROLLBACK,
    NOT_RECOVERED,
    NOT_REDUCED,
    NOT_REDUCED_CLAUSE,
    NOTHING_SHARDED,
    ONE_PROCESS,
    ONE_SHARD_NORM,
    OPTIMIZER_STATE,
    PART_REDUCED_CLAUSE,
    RESUMED_PARAMS,
    ROWS,
    SHARD_NORM_CLAUSE,
    STALE_MASTER,
    STEP_COUNT,
    SUMMED,
    TOO_MUCH,
    TWICE,
    UNLOGGED,
    UPDATE,
)
from tests.harness.diagnose.hypotheses import base_first, confirmed, differs, facts, judged
from tests.harness.observe.traces import rank_list
from tests.harness.observe.violations import Violation

Diagnoser = Callable[[list[Violation], int, Evidence], list[str]]
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e-?\d+)?")
GRAD_CLAUSES = (NOT_REDUCED_CLAUSE, SHARD_NORM_CLAUSE, PART_REDUCED_CLAUSE)


def _number(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    m = _NUMBER.search(str(value))
    return float(m.group()) if m else None


def _kinds(vs: list[Violation], *kinds: str) -> list[Violation]:
    return [v for v in vs if v.kind in kinds]


def _equal_norms(vs: list[Violation], n: int, ev: Evidence) -> list[str]:
    differ = _kinds(vs, "params_differ")
    at0 = sorted({v.rank for v in differ if v.step == 0 and v.rank is not None})
    if at0:  # the broadcast, unless every rank was seen to receive P elements: then as seen
        return judged([BROADCAST], ev) or [
            f"{rank_list(at0)} hold(s) parameters of another norm than rank 0's from step 0; "
            + "; ".join(facts(ev))]
    return [ALLGATHER] if differ else []


def _listed(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + ", or " + items[-1]


def _parity(vs: list[Violation], n: int, ev: Evidence) -> list[str]:
    """Each cause on its signature, read from rank 0's gradient norm against the one-rank
    run's (their ratio per step) and from whether the loss parts: N at step 1, a sum; 1/N at
    every step, a division by N made twice; below 1 while the loss never parts, a norm of part
    of the gradient; above 1 with the loss parting after step 1, a gradient not reduced.
    Where none holds, what was seen and the mistakes it is consistent with. First, a wrong
    Adam where the suite measured the update (the betas swapped, no bias correction). Each
    candidate is weighed against the evidence (hypotheses.py); where none stands, the first
    difference is told as seen."""
    found = [ADAM_BETAS if v.kind == "adam_betas_swapped" else ADAM_RAW
             for v in _kinds(vs, "adam_betas_swapped", "adam_uncorrected")]
    loss = _kinds(vs, "parity_loss", PARITY_SYNCED, PARITY_UNSYNCED)
    grad = _kinds(vs, "parity_grad_norm")
    loss_at_1 = any(v.step == 1 for v in loss)
    ratios = {v.step: got / want for v in grad
              if (want := _number(v.expected)) and (got := _number(v.found)) is not None
              and math.isfinite(got)}
    r1 = ratios.get(1)
    if r1 is not None and not loss_at_1:
        clauses = judged(list(GRAD_CLAUSES), ev)
        if abs(r1 - n) < 0.05 * n:
            found.append(SUMMED)
        elif len(ratios) >= 2 and all(abs(r * n - 1) < 0.02 for r in ratios.values()):
            found.append(TWICE.format(n=n))
        elif r1 < 0.95 and not loss:
            found.append(ONE_SHARD_NORM)
        elif r1 > 1.05 and loss and judged([NOT_REDUCED], ev):
            found.append(NOT_REDUCED)
        elif clauses:
            found.append(GRAD_SEEN.format(r=r1, parts="parts from step "
                                          f"{min(v.step or 0 for v in loss)} on" if loss
                                          else "agrees at every step",
                                          causes=_listed(clauses)))
    first = next((v for v in loss if v.step == 1), None)
    want, got = (_number(first.expected), _number(first.found)) if first else (None, None)
    if first is not None and want and got is not None and abs(got / want - n) < 0.01 * n:
        found.append(LOSS_SUMMED.format(n=n))  # N times the mean at step 1: a sum
    elif first is not None and 1 not in ratios:  # the same gradient, another loss: the
        found.append(LOSS_ONLY)                    # data is right, the loss is not
    elif first is not None:  # the ranks' start, where the observer saw it, singles one out
        start = [INIT] if confirmed("init", ev) else []
        found += judged(start + ([BROADCAST] if first.kind == PARITY_UNSYNCED else [ROWS]
                                 if first.kind == PARITY_SYNCED else [ROWS, BROADCAST]), ev)
    elif loss and not found:  # a wrong Adam, where measured, is the update's cause
        found.append(UPDATE)
    if not found and (loss or grad):  # no cause stands: what differs, where, as seen
        v = min(loss + grad, key=lambda v: (v.step or 0, v.kind != "parity_loss"
                                            and v in grad))
        quantity = "gradient norm" if v in grad else "loss"
        found.append(differs(ev, quantity, v.step or 0, v.found, _number(v.expected)))
    return found


def _monotonic(vs: list[Violation], n: int, ev: Evidence) -> list[str]:
    found = []
    if _kinds(vs, "loss_differs_across_ranks"):
        found.append(LOCAL_LOSS)
    if _kinds(vs, "loss_rises"):
        found.append(LOSS_RISES)
    return found


def _memory(vs: list[Violation], n: int, ev: Evidence) -> list[str]:
    # Located first: it names the tensor and its storage.
    found = [f"measured: {v.message}" for v in _kinds(vs, "held_whole")]
    for v in vs:
        if v.kind == "kept_whole":
            shrink = _number(str(v.found).split("(")[-1])  # "(7.9P)"
            found.append(NOTHING_SHARDED if shrink is not None and shrink < 2 else KEPT_WHOLE)
        elif v.kind == "optimizer_bytes":
            want, got = _number(v.expected.split("=")[-1]), _number(v.found)
            if want and got and got > 1.5 * want:
                found.append(FULL_STATE)
        elif v.kind.startswith("master_"):
            found.append({"master_before_update": STALE_MASTER,
                          "master_step_ahead": GATHERED_EARLY}.get(v.kind, MASTER_NORM))
    return found


def _resume(vs: list[Violation], n: int, ev: Evidence) -> list[str]:
    found = []
    if _kinds(vs, "accumulating"):
        return [ACCUMULATE, *_resume_files(vs)]
    trajectory = [v for v in vs if v.kind.startswith("not_bit_identical:")]
    if trajectory:
        first = min(v.step or 0 for v in trajectory)
        keys = {v.kind.split(":", 1)[1] for v in trajectory if v.step == first}
        found.append(RESUMED_PARAMS if "loss" in keys else STEP_COUNT
                     if _kinds(vs, "step_count_differs") else MOMENTS
                     if _kinds(vs, "moments_restarted", "moments_not_saved")
                     else OPTIMIZER_STATE)
    return found + _resume_files(vs)


def _resume_files(vs: list[Violation]) -> list[str]:
    return [MANIFEST] if _kinds(vs, "manifest_mismatch") else []


def _rollback(vs: list[Violation], n: int, ev: Evidence) -> list[str]:
    if _kinds(vs, "accumulating"):
        return [ACCUMULATE]
    taken = _kinds(vs, "plan_taken")
    if taken:  # the plan answered a process that was not the rank: the evidence is the plan's
        return [f"the guard asked the suite's plan, not the numbers: {taken[0].message}"]
    flagged = _kinds(vs, "read_flag")
    if flagged:  # the rollback is claimed, the fault never met: its words are the hint
        return [f"the guard read the --inject flag, not the numbers: {flagged[0].message}"]
    killed = _kinds(vs, "waited_for_dead_peer", "left_after_kill", "published_incomplete",
                    "exit_0_after_kill")
    if killed:  # a rank the suite killed: what the run did then, in the check's words
        return list(dict.fromkeys(v.message for v in killed))
    never = _kinds(vs, "fault_never_made")
    if never:  # the run did not get that far: what stopped it comes first
        return [f"the run never reached the suite's fault: {never[0].message}"]
    if _kinds(vs, "guard_never_fired"):
        return [NO_ROLLBACK]
    late = _kinds(vs, "late_guard")
    if late:  # the check read the order the run logged in: its words are the hint
        return [f"the guard fired too late: {late[0].message}"]
    missing = {v.rank for v in _kinds(vs, "no_rollback_event")}
    ended = _kinds(vs, "rollback_exit", "stopped_before_fault")
    early = _kinds(ended, "stopped_before_fault")
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


def _deadlock(vs: list[Violation], n: int, ev: Evidence) -> list[str]:
    found: list[str] = []
    silent = sorted({v.rank for v in _kinds(vs, "nothing_logged") if v.rank is not None})
    if silent and not _kinds(vs, "exit_code", "deadlock", "hung"):  # it ended well, files
        found.append(UNLOGGED.format(ranks=rank_list(silent)))       # missing
    for v in vs:
        if v.kind == "deadlock":
            if not any(f.startswith(DIFFERENT_CALLS) for f in found):  # the first run's
                found.append(f"{DIFFERENT_CALLS}; {v.found}")
        elif v.kind == "left_behind":
            found.append(LEFT_BEHIND)
        elif v.kind == "hung":
            found.append(HUNG)
        elif v.kind == "exit_code":  # how it ended, in its own words (the run's reason)
            said = v.message.split(": ", 1)[-1]
            if "unrecognized arguments" in said or ": error: argument" in said:
                found.append(f"the program rejects a flag of run contract v1 (accept every "
                             f"flag docs/contract.md lists): {said}")
            elif " raised " in said or "killed by SIG" in said:
                found.append(f"the program crashed: {said}")
            else:
                found.append(f"the program exited with code {v.found}: {said}")
    return found


def _communication(vs: list[Violation], n: int, ev: Evidence) -> list[str]:
    found: list[str] = []
    for v in vs:
        if v.kind == "one_process":
            found.append(ONE_PROCESS)
        elif v.kind == "different_calls":
            found.append(f"{DIFFERENT_CALLS}: {v.message}")
        elif v.kind == "too_much_traffic":
            # the check names the calls it saw and what they amount to: that is the hint
            found.append(v.message.split("; per step:")[0] or TOO_MUCH)
        elif v.kind == "rows":  # what the ranks computed on
            found.append(v.message)
        elif v.kind == "never_reduced":
            found.append(NEVER_REDUCED)
        elif v.kind == "partly_reduced":
            found.append(v.message)
    return found


def _accumulation(vs: list[Violation], n: int, ev: Evidence) -> list[str]:
    """Exercise 2's checks say what the micro-batches did wrong: their messages are the
    hints."""
    return [v.message for v in vs if v.invariant == "accumulation" and v.message]


def _tensor_parallel(vs: list[Violation], n: int, ev: Evidence) -> list[str]:
    """Exercise 1's checks name the part of the f/g pair or the heads that is wrong; a loss
    that parts from one rank's and points at them is told last."""
    said = {v.message: v.kind == "tp_loss_see_checks" for v in vs
            if v.invariant == "tensor_parallel" and v.message}
    return sorted(said, key=lambda m: said[m])


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
# The findings of what every run does (no fault in the base run): told as the base run's,
# before any fault run's consequence (hypotheses.base_first)
EVERY_RUN = ("manifest_mismatch", "published_incomplete")


def diagnose(invariant: str, violations: list[Violation], world_size: int = 4,
             evidence: Evidence | None = None) -> list[str]:
    """Likely causes of `invariant`'s violations, most likely first (empty: no pattern).
    `evidence`: what the test's runs show (evidence.evidence_of); None weighs the violations
    alone."""
    fn = DIAGNOSERS.get(invariant)
    # What could not be checked (its run did not get there) has its cause told elsewhere.
    violations = [v for v in violations if v.kind != "not_checked"]
    if not fn or not violations:
        return []
    ev = evidence if evidence is not None else Evidence(world_size=world_size)
    first = base_first(ev) if _kinds(violations, *EVERY_RUN) else []
    # the base run's manifests, told as its own, are not told again as a general mistake
    return told_once(first + [h for h in fn(violations, world_size, ev)
                              if not (first and h == MANIFEST)])


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

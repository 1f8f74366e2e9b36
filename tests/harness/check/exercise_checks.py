"""The lesson's exercise 2, gradient accumulation, checked on what the ranks did (observer):
a run with `--micro-batches M` against the same program's run with one batch (M = 1).

- `check_micro_batches`: each backward pass computes on B/M of the rank's B rows, M of them
  per step (the observer reads the rows from the autograd graph, as for the data split);
- `check_one_reduction`: the gradient is reduced once per step, not once per micro-batch: the
  elements each rank puts into reductions per step are those of the one-batch run;
- `check_accumulated_gradient`: the gradient a rank puts into the reduction at step 1 equals
  the one-batch gradient, element by element within float32 rounding of a sum in another
  order (the observer keeps, for each reduction's input of a gradient's size, its sum, its
  sum of squares and 16 elements at fixed positions). Both runs start from the same weights
  and rows, so step 1's gradients are the same numbers. Gradients, not losses: Adam
  normalises a gradient scaled by M, so the loss curve of "summed, not averaged" barely
  moves.

A program that rejects `--micro-batches` (exit 2, as the contract asks of a flag it does not
implement) gets one violation, `NOT_IMPLEMENTED`, and no other.
"""

from __future__ import annotations

import math
from typing import Any

from tests.harness.check.checks import PARITY, Run, _relabel, parted_steps
from tests.harness.check.observed_checks import observation_of, reduced_elements, training_calls
from tests.harness.observe.traces import ProcessTrace
from tests.harness.observe.violations import Violation

INV = "accumulation"
EXIT_USAGE = 2
NOT_IMPLEMENTED = "exercise not implemented"
REL = 1e-5  # float32 rounding of a sum of M partial gradients in another order, and then some
ONE_REDUCTION_SLACK = 0.25  # of the one-batch run's elements: M reductions are M times them


def not_implemented(run: Run, flag: str, inv: str = INV) -> list[Violation]:
    """One line when the program rejects an exercise's flag (exit 2), else nothing (exercise
    1's checks say it as `tensor_parallel`)."""
    if run.outcome.returncode == EXIT_USAGE:
        return [Violation(inv, None, None, f"a run with {flag}", "exit 2 (usage error)",
                          f"{NOT_IMPLEMENTED}: the program rejects {flag}")]
    return []


def _rows_per_backward(p: ProcessTrace) -> list[int | None]:
    return [w.get("rows") if "tokens" in w else None for w in p.work]


def check_micro_batches(run: Run, batch_size: int, m: int) -> list[Violation]:
    """Every backward pass of every rank computes on B/M rows (what the run did before it
    ended, if it did not finish: the checks of exercise 2 read its first steps)."""
    out = not_implemented(run, f"--micro-batches {m}")
    obs, seen = observation_of(run, INV)
    if out or obs is None:
        return out or seen
    want = batch_size // m
    for r, p in sorted(obs.trainers().items()):
        per = p.backwards_per_step(run.steps, m)
        if per != m:  # the wrong number of passes, told once (its rows follow from it)
            out.append(Violation(INV, r, None, f"{m} backward passes per step (M = {m})",
                                 f"{per} per step", f"the run accepts --micro-batches {m} "
                                 f"but takes {per} forward and backward pass(es) a step: "
                                 f"split the rank's {batch_size} rows into {m} micro-batches "
                                 f"of {want} rows each, one forward and backward per "
                                 "micro-batch, one optimizer step after the last"))
            continue
        rows = _rows_per_backward(p)
        bad = next(((i, n) for i, n in enumerate(rows) if n is not None and n != want), None)
        if bad is not None:
            i, n = bad
            out.append(Violation(INV, r, i // per + 1, f"{want} rows (B/M = {batch_size}/{m}) "
                                 "per backward pass", f"{n} rows in micro-batch {i % per + 1}",
                                 f"split the rank's {batch_size} rows into {m} micro-batches "
                                 f"of {want} rows each: one forward and backward per "
                                 "micro-batch, one optimizer step after the last"))
    return out


FIRST_STEPS = 3  # steps compared: before any rollback a wrong program's guard may cause


def _reduced_by_step(p: ProcessTrace, per_step: int, n: int, rank: int) -> list[float]:
    """Elements the rank put into reductions in each of its first steps (a step: from its
    first backward pass to the next step's), while the run went on to a next step."""
    calls = training_calls(p)
    out = []
    for s in range(FIRST_STEPS):
        if (s + 1) * per_step >= len(p.backwards):
            break
        t0, t1 = p.backwards[s * per_step], p.backwards[(s + 1) * per_step]
        out.append(sum(reduced_elements(c, n, rank) for c in calls if t0 <= c.t0 < t1))
    return out


def check_one_reduction(one: Run, many: Run, m: int) -> list[Violation]:
    """In each of the first steps each rank reduces what the one-batch run reduces, not M
    times as much."""
    out = not_implemented(many, f"--micro-batches {m}")
    if out or many.observed is None or one.observed is None or one.world_size < 2:
        return out
    n = one.world_size
    ones, manys = one.observed.trainers(), many.observed.trainers()
    for r in sorted(manys):
        if r not in ones:
            continue
        base = _reduced_by_step(ones[r], ones[r].backwards_per_step(one.steps), n, r)
        acc = _reduced_by_step(manys[r], manys[r].backwards_per_step(many.steps, m), n, r)
        for s, (want, got) in enumerate(zip(base, acc, strict=False), 1):
            if want and got > want * (1 + ONE_REDUCTION_SLACK):
                out.append(Violation(INV, r, s, f"{want:,.0f} gradient elements reduced in the "
                                     "step (the one-batch run's)", f"{got:,.0f}",
                                     f"the gradient is reduced after every micro-batch "
                                     f"({got / want:.1f}x the one-batch run's reductions): "
                                     "reduce once per step, after the last micro-batch's "
                                     "backward (no_sync, or a flag that defers the "
                                     "reduction)"))
                break
    return out


def _step1_digests(p: ProcessTrace, per_step: int) -> list[dict[str, Any]]:
    """Digests of the gradient-sized reduction inputs between the first backward of step 1
    and the first of step 2."""
    if len(p.backwards) <= per_step:
        return []
    start, end = p.backwards[0], p.backwards[per_step]
    return [c.digest for c in sorted(p.calls, key=lambda c: c.t0)
            if c.digest and start <= c.t0 < end]


# Calls that may carry a gradient to its reduction (the observer's digest sizes them alike)
_REDUCING = ("all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor", "all_to_all",
             "all_to_all_single")


def _step1_reductions(p: ProcessTrace, per_step: int) -> int:
    """Gradient-sized reductions between the first backward of step 1 and the first of step
    2, digested or not (the observer digests only its first step's, and a program that
    reduces each micro-batch moves its step clock at every micro-batch)."""
    if len(p.backwards) <= per_step:
        return 0
    start, end = p.backwards[0], p.backwards[per_step]
    return sum(1 for c in p.calls if c.op in _REDUCING and c.numel_in >= 1024
               and start <= c.t0 < end)


def _close(a: float, b: float, scale: float) -> bool:
    return abs(a - b) <= REL * max(abs(a), abs(b)) + REL * scale


def _gradient_why(ratio: float, m: int, proportional: bool | None = None) -> str:
    """What a ratio of the accumulated gradient's norm to the one-batch gradient's says
    (`proportional`: whether every sampled element is that ratio times the one-batch
    element, where the elements were compared)."""
    if abs(ratio - m) <= 0.01 * m:
        return (f"the accumulated gradient is {m}x the one-batch gradient: the micro-batch "
                f"gradients are summed without dividing by M = {m} (scale each micro-batch's "
                f"loss by 1/{m} before its backward, or divide the sum by {m})")
    if abs(ratio - 1 / m) <= 0.01 / m and proportional is not False:
        return (f"the accumulated gradient is 1/{m} of the one-batch gradient, element by "
                f"element: divided by M = {m} twice (scale each micro-batch's loss by 1/{m}, "
                "and do not divide the sum again)")
    if 0.5 / m <= ratio <= 0.75 and proportional is not True:
        return (f"the accumulated gradient is {ratio:.2f}x the one-batch gradient, not a "
                f"multiple of it: about one micro-batch's share of {m}. The gradient is "
                "cleared between micro-batches (zero_grad inside the loop, or `.grad` "
                "assigned rather than added to), so only the last micro-batch's reaches the "
                "reduction: zero it once per step, before the first micro-batch")
    return (f"the accumulated gradient differs from the one-batch gradient (norm ratio "
            f"{ratio:.4f}): do the {m} micro-batches cover each of the rank's rows exactly "
            "once, with the same weights? (slice rows [i*B/M, (i+1)*B/M) for micro-batch i)")


def reductions_seen(run: Run, flag: int, rank: int = 0
                    ) -> tuple[list[float], list[float]] | None:
    """What `rank` of `run` (given `--micro-batches flag`) reduced: gradient elements in
    each of its first steps, and the norm of each gradient-sized reduction input of step 1
    (None: not observed)."""
    p = run.observed.trainers().get(rank) if run.observed is not None else None
    if p is None or run.world_size < 2:
        return None
    per_step = p.backwards_per_step(run.steps, flag)
    return (_reduced_by_step(p, per_step, run.world_size, rank),
            [math.sqrt(d["sq"]) for d in _step1_digests(p, per_step)])


def check_accumulated_gradient(one: Run, many: Run, m: int) -> list[Violation]:
    """Step 1's gradient, as each rank puts it into the reduction, equals the one-batch
    run's (same weights, same rows): element by element at 16 positions, and its norm."""
    out = not_implemented(many, f"--micro-batches {m}")
    if out or many.observed is None or one.observed is None or one.world_size < 2:
        return out
    ones, manys = one.observed.trainers(), many.observed.trainers()
    for r in sorted(manys):
        base = _step1_digests(ones[r], ones[r].backwards_per_step(one.steps)) \
            if r in ones else []
        acc = _step1_digests(manys[r], manys[r].backwards_per_step(many.steps, m))
        if not base:
            continue  # the one-batch run's reduction was not seen (DDP's C++): nothing to
        #               compare against; its own checks say why
        per_many = manys[r].backwards_per_step(many.steps, m)
        if len(acc) != len(base) or _step1_reductions(manys[r], per_many) != \
                _step1_reductions(ones[r], ones[r].backwards_per_step(one.steps)):
            continue  # a different number of reductions: check_one_reduction tells it, and
        #               no one reduction's input is the step's gradient to compare
        for i, (b, a) in enumerate(zip(base, acc, strict=True)):
            if b["n"] != a["n"]:
                break
            rms = math.sqrt(b["sq"] / b["n"])
            norm_b, norm_a = math.sqrt(b["sq"]), math.sqrt(a["sq"])
            differ = [j for j, (x, y) in enumerate(zip(b["sample"], a["sample"], strict=True))
                      if not _close(x, y, rms)]
            if differ or not _close(norm_a, norm_b, 0.0):
                ratio = norm_a / norm_b if norm_b else math.inf
                proportional = all(_close(x * ratio, y, rms * ratio) for x, y in
                                   zip(b["sample"], a["sample"], strict=True))
                j = differ[0] if differ else None
                where = (f"element {j} of 16 sampled: {a['sample'][j]:.6g}, one batch "
                         f"{b['sample'][j]:.6g}; " if j is not None else "")
                out.append(Violation(INV, r, 1, f"the one-batch gradient (norm {norm_b:.6g}) "
                                     f"in reduction {i + 1} of step 1",
                                     f"{where}norm {norm_a:.6g}",
                                     _gradient_why(ratio, m, proportional)))
                break
    return out


def check_follows_one_batch(one: Run, many: Run, m: int) -> list[Violation]:
    """The M-micro-batch run logs the one-batch run's loss (1e-5) and gradient norm (1e-4)
    at every step: parity's comparison, told in the exercise's terms. Where the observed
    step-1 gradient already differs (check_accumulated_gradient names the mistake), the
    trajectory that follows from it is not charged a second time."""
    out = not_implemented(many, f"--micro-batches {m}")
    if out or check_accumulated_gradient(one, many, m):
        return out
    out = _relabel(INV, many.parsed.problems + one.parsed.problems)
    for s, key, found, want in parted_steps(many, one, PARITY):
        if key is None:
            out.append(Violation(INV, 0, s, "both runs log the step", "missing in the " + (
                f"{m}-micro-batch run" if found == "run" else "one-batch run")))
            continue
        ratio = found / want if want else math.inf
        why = (f"the logged gradient norm is {ratio:.3g}x the one-batch run's: "
               + _gradient_why(ratio, m) if key == "grad_norm" else
               f"the {m}-micro-batch run's loss parts from the one-batch run's")
        out.append(Violation(INV, 0, s, f"{key} {want!r} (one batch) within "
                             f"{PARITY[key]:g} rel", found, why))
    return out

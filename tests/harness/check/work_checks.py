"""Invariants over the work each rank did, as the observer saw it (tests/observer/):

- `check_data_parallel`: per training step each rank's forward and backward consumed its own
  B rows of the global batch (B·T tokens), no more and no less: each rank computes on 1/N of
  the N·B rows. The observer counts, at every backward, the tokens that entered the model and
  the targets the loss covers (the index tensors of embedding lookups and the loss's target),
  read from the autograd graph, so any way of writing MiniGPT is counted alike.
- `check_reduced`: per training step each rank takes part in reducing every gradient element:
  it puts at least (N-1)/N·P elements into reductions (the ZeRO paper's reduce-scatter volume).
  What counts is what the program asked for: an all-reduce or reduce-scatter by its size; a
  reduction written by hand (all-to-all, sends in a ring) by the data it sends that it had not
  sent or received before in the step, so forwarding or broadcasting a piece counts once.

Both return located `Violation`s (invariant "communication"); what the observer did not see
(no embedding, no loss target: an unusual program) is not charged.
"""

from __future__ import annotations

from tests.harness.check.checks import Run, ceil_div
from tests.harness.check.observed_checks import (
    INV,
    missing_ranks,
    observation_of,
    params_with_source,
    reduced_per_step,
)
from tests.harness.observe.traces import ProcessTrace
from tests.harness.observe.violations import Violation

CONTEXT = 16  # tokens per row entering the model (contract: 17-token rows, 16 in, 16 targets)
REDUCE_SLACK = 0.02  # the share of (N-1)/N·P a reduction may fall short (padding, rounding)


def tokens_per_step(p: ProcessTrace, steps: int) -> list[int | None]:
    """Tokens each training step's backward calls consumed (several micro-batches of a step
    add up); None where the observer saw no token count."""
    work = p.work
    if not work or not steps or len(work) % steps:
        return [None] * steps
    m = len(work) // steps
    out: list[int | None] = []
    for s in range(steps):
        group = [w["tokens"] for w in work[s * m:(s + 1) * m] if "tokens" in w]
        out.append(sum(group) if len(group) == m else None)
    return out


def check_data_parallel(run: Run, batch_size: int) -> list[Violation]:
    """Each rank computes on its B rows per step: B·T tokens; the first step that differs is
    reported per rank."""
    obs, out = observation_of(run, INV)
    if obs is None:
        return out
    n, want = run.world_size, batch_size * CONTEXT
    ranks = obs.trainers()
    if n >= 2:
        out += missing_ranks(run, obs, "count the rows of")
    found: dict[int, tuple[int, int]] = {}  # rank -> (step, tokens) of the first difference
    for r, p in sorted(ranks.items()):
        for s, tokens in enumerate(tokens_per_step(p, run.steps), 1):
            if tokens is not None and tokens != want:
                found[r] = (s, tokens)
                break
    seen = {t for _, t in found.values()}
    alike = seen.pop() if n >= 2 and len(found) == n and len(seen) == 1 else None  # every rank
    for r, (s, tokens) in sorted(found.items()):
        rows = tokens / CONTEXT
        if alike == n * want:
            why = (f"every rank trained on the whole global batch of {n * batch_size} rows "
                   f"instead of its share: give rank r rows [r*B, (r+1)*B) with B = "
                   f"{batch_size} (slice the batch by rank, or a DistributedSampler)")
        elif alike is not None and alike * n == want:
            why = (f"every rank trained on {rows:g} rows, 1/{n} of its {batch_size}: "
                   f"--batch-size is per rank (rank r takes rows [r*B, (r+1)*B) of a global "
                   f"batch of N*B = {n * batch_size} rows), not the global batch to split")
        elif tokens > want:
            why = (f"rank {r} computed on {rows:g} rows, more than its {batch_size} "
                   f"(1/{n} of the global batch of {n * batch_size})")
        else:
            why = f"rank {r} computed on {rows:g} rows, fewer than its {batch_size}"
        out.append(Violation(INV, r, s, f"{batch_size} rows ({want} tokens) per step",
                             f"{rows:g} rows ({tokens} tokens)", why, kind="rows"))
    return out


def check_reduced(run: Run) -> list[Violation]:
    """Per step, each rank puts >= (N-1)/N·P elements into reductions (-2%)."""
    obs, out = observation_of(run, INV)
    if obs is None or run.world_size == 1:
        return out
    out += missing_ranks(run, obs, "measure")
    P, source = params_with_source(run)
    if P is None:  # nothing to measure against: reported, never passed vacuously
        return [*out, Violation(INV, None, None, "P", "unknown",
                                "no parameters observed and no summary.json")]
    reported = run.parsed.n_params
    if reported is not None and reported != P:  # what the run says is compared, not trusted
        out.append(Violation(INV, None, None, f"summary.json n_params = P = {P:,} ({source})",
                             reported, "the parameter count the run reports is not what its "
                             "backward passes differentiate: count the model's parameters "
                             "only (not a flat shard or master copy kept beside them)"))
    n = run.world_size
    need, own_slice = (n - 1) / n * P, ceil_div(P, n)
    for r, by_site in reduced_per_step(run).items():
        total = sum(by_site.values())
        if total >= need * (1 - REDUCE_SLACK):
            continue
        seen = ", ".join(f"{k}: {v:,.0f}" for k, v in sorted(by_site.items(),
                                                             key=lambda kv: -kv[1])[:3])
        # At most one slice, the contract's ceil(P/N) (its padding counted), gathered: a
        # loss or a norm reduced beside it is within the slack
        if total <= own_slice * (1 + REDUCE_SLACK):
            why = ("the gradients are never reduced across ranks: no reduce-scatter or "
                   "all-reduce of the gradient, and no more data sent by hand than the "
                   f"rank's own slice of {own_slice:,} elements (an all-gather)"
                   + (f"; seen: {seen}" if seen else ""))
        else:
            why = (f"only {total / need:.0%} of the gradient is reduced across ranks"
                   + (f" ({seen})" if seen else "") + f"; P = {P:,}: {source}")
        out.append(Violation(INV, r, None,
                             f">= (N-1)/N·P = {need:,.0f} gradient elements reduced per step",
                             f"{total:,.0f}", why, kind="never_reduced"
                             if total <= own_slice * (1 + REDUCE_SLACK) else "partly_reduced"))
    return out

"""The lesson's exercise 1, tensor parallelism of the attention heads, checked on what the
ranks did (observer): runs with `--tensor-parallel T` against the same program's one-rank
run on the same rows.

Ranks are grouped as the contract says: tensor-parallel group g is ranks [g·T, (g+1)·T) and
is data-parallel rank g (it trains on rows [g·B, (g+1)·B) of a global batch of (N/T)·B).

- `check_tp_loss`: the loss of rank 0 equals the one-rank run's at every step (1e-5);
- `check_heads`: each rank holds n_head/T heads of every block: its q/k/v and output
  projection weights are slices (rows of q/k/v, columns of the projection) of the one-rank
  run's initial weights, found by the checksums of their rows and columns at the first
  backward pass; 1/T of the attention's weight elements per rank, the slices of a group
  disjoint and together the whole;
- `check_tp_traffic`: per block, the attention output (B x context x embedding elements)
  is all-reduced over the tensor-parallel group in forward, and the input's gradient once in
  backward; nothing else of that size crosses the group;
- `check_tp_rows`: the ranks of a tensor-parallel group compute on the same rows.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from tests.harness.check.checks import PARITY_LOSS_RTOL, Run, parted_steps
from tests.harness.check.exercise_checks import not_implemented as not_run
from tests.harness.observe.traces import Call, ProcessTrace
from tests.harness.observe.violations import Violation

INV = "tensor_parallel"
# The contract's MiniGPT: 2 blocks, 4 heads, embedding 32, context 16. Each block's attention
# weights: q, k, v (3 x 32 x 32) and the output projection (32 x 32).
N_LAYER, N_HEAD, N_EMBD, CONTEXT = 2, 4, 32, 16
ATTENTION_WEIGHTS = N_LAYER * (3 * N_EMBD * N_EMBD + N_EMBD * N_EMBD)
HEADS_HINT = ("rank t of a group keeps heads [t·H/T, (t+1)·H/T): those heads' rows of the q, "
              "k and v projections and the matching columns of the output projection")


def not_implemented(run: Run, t: int) -> list[Violation]:
    return not_run(run, f"--tensor-parallel {t}", INV)


def groups(world_size: int, t: int) -> list[list[int]]:
    """The contract's tensor-parallel groups: consecutive ranks."""
    return [list(range(g * t, (g + 1) * t)) for g in range(world_size // t)]


def dp_groups(world_size: int, t: int) -> list[list[int]]:
    """The contract's data-parallel groups: ranks j, j+T, j+2T, ... for each j < T."""
    return [list(range(j, world_size, t)) for j in range(t)]


def check_group_norms(tp: Run, t: int) -> list[Violation]:
    """The ranks of each data-parallel group log exactly the same param_norm at every step
    (the norm of the rank's own parameters; the ranks of a tensor-parallel group differ)."""
    out: list[Violation] = []
    records = tp.parsed.records
    for members in dp_groups(tp.world_size, t):
        first, *others = members
        for s in range(0, tp.steps + 1):
            ref = records.get(first, {}).get(s, {}).get("param_norm")
            bad = next((r for r in others if ref is not None and
                        records.get(r, {}).get(s, {}).get("param_norm") not in (None, ref)),
                       None)
            if bad is not None:
                out.append(Violation(INV, bad, s, f"rank {first}'s norm {ref!r} (the same "
                                     f"data-parallel group {members})",
                                     records[bad][s]["param_norm"],
                                     "the ranks of a data-parallel group hold different "
                                     "parameters: every rank of the group must all-gather "
                                     "the updated shards of its group (and start from the "
                                     "same broadcast)"))
                break
    return out


def _loss_why(tp: Run, single: Run, t: int, batch_size: int, step: int) -> tuple[str, str]:
    """Why the loss parts from the one-rank run's, from the other checks' evidence: what
    they found, or (heads, rows and all-reduces right, the loss off from step 1) a
    replicated parameter counted once per rank of the group; and the finding's kind (a
    pointer to other checks is told after them)."""
    failed = [name for name, found in (
        ("the heads each rank holds", check_heads(tp, single, t)),
        ("the all-reduces", check_tp_traffic(tp, t, batch_size)),
        ("the rows", check_tp_rows(tp, t)),
        ("the parameters of each data-parallel group", check_group_norms(tp, t))) if found]
    if failed:
        return (f"the {tp.world_size}-rank run with --tensor-parallel {t} does not compute "
                f"the one-rank model: see the checks of {' and '.join(failed)}",
                "tp_loss_see_checks")
    if tp.observed is None or step != 1:
        return (f"the {tp.world_size}-rank run with --tensor-parallel {t} parts from the "
                f"one-rank model at step {step}", "tp_loss")
    return ("the heads, the rows and the all-reduces are right, yet step 1's loss is not "
            "the one-rank loss: a replicated parameter is counted once per rank of the "
            "group, most often the output projection's bias added on every rank of the "
            "group before the all-reduce (the sum counts it T times): add it once, after "
            "the all-reduce", "tp_loss_replicated_parameter")


def check_tp_loss(tp: Run, single: Run, t: int, batch_size: int) -> list[Violation]:
    """Rank 0's loss equals the one-rank run's at every step (1e-5 relative); the hint is
    read from the other checks' evidence, never against one that passed."""
    out = not_implemented(tp, t)
    if out:
        return out
    for s, key, x, y in parted_steps(tp, single, {"loss": PARITY_LOSS_RTOL}):
        if key is None:
            out.append(Violation(INV, 0, s, "both runs log the step", "missing in the "
                                 + ("tensor-parallel run" if x == "run" else "one-rank run")))
        else:
            why, kind = _loss_why(tp, single, t, batch_size, s)
            out.append(Violation(INV, 0, s, f"loss {y!r} (one rank, the same rows) within "
                                 f"{PARITY_LOSS_RTOL:g} rel", x, why, kind=kind))
        break
    return out


def _slice_of(leaf: dict[str, Any], full: list[dict[str, Any]]
              ) -> tuple[int, str, frozenset[int]] | None:
    """(index of the full leaf, "rows" or "cols", which of its rows or columns) when `leaf`
    is a strict slice of one of `full`'s leaves; None otherwise (whole, or no relation)."""
    r, c = leaf["shape"]
    for i, f in enumerate(full):
        fr, fc = f["shape"]
        if c == fc and r < fr:
            where = {h: j for j, h in enumerate(f["rows"])}
            if all(h in where for h in leaf["rows"]):
                return i, "rows", frozenset(where[h] for h in leaf["rows"])
        if r == fr and c < fc:
            where = {h: j for j, h in enumerate(f["cols"])}
            if all(h in where for h in leaf["cols"]):
                return i, "cols", frozenset(where[h] for h in leaf["cols"])
    return None


def held_by(leaves: list[dict[str, Any]], full: list[dict[str, Any]]
            ) -> dict[int, tuple[str, frozenset[int]]]:
    """Of one rank's first-backward leaves, the strict slices of the one-rank run's (`full`):
    full leaf index -> ("rows" or "cols", which ones)."""
    held: dict[int, tuple[str, frozenset[int]]] = {}
    for leaf in leaves:
        found = _slice_of(leaf, full)
        if found is not None:
            held[found[0]] = (found[1], found[2])
    return held


def heads_held(tp: Run, single: Run) -> tuple[list[dict[str, Any]], dict[int, dict[
        int, tuple[str, frozenset[int]]]]] | None:
    """The one-rank run's 2-D leaves and, per rank of `tp`, the slices of them it holds;
    None where either run's first backward was not seen."""
    if tp.observed is None or single.observed is None:
        return None
    ones = single.observed.trainers()
    if 0 not in ones or not ones[0].leaves:
        return None
    full = ones[0].leaves
    return full, {r: held_by(p.leaves, full) for r, p in sorted(tp.observed.ranks().items())
                  if p.leaves}


def check_heads(tp: Run, single: Run, t: int) -> list[Violation]:
    """Each rank holds 1/T of the attention's weights, as slices of the one-rank run's
    initial weights; a group's slices are disjoint and make the whole."""
    out = not_implemented(tp, t)
    if out or tp.observed is None or single.observed is None:
        return out
    ones = single.observed.trainers()
    if 0 not in ones or not ones[0].leaves:
        return out  # the one-rank run's backward was not seen: parity tells the rest
    full = ones[0].leaves
    ranks = tp.observed.ranks()
    want = ATTENTION_WEIGHTS // t
    for members in groups(tp.world_size, t):
        held: dict[int, dict[int, tuple[str, frozenset[int]]]] = {}
        for r in members:
            p = ranks.get(r)
            if p is None or not p.leaves:
                continue
            held[r] = held_by(p.leaves, full)
            elements = sum(len(ix) * (full[i]["shape"][1] if how == "rows" else
                                      full[i]["shape"][0])
                           for i, (how, ix) in held[r].items())
            if elements != want:
                why = (f"rank {r} holds every head of the attention (its q/k/v and output "
                       "projection weights are whole): "
                       f"with --tensor-parallel {t} each rank holds {N_HEAD // t} of the "
                       f"{N_HEAD} heads; {HEADS_HINT}" if not elements else
                       f"rank {r} holds {elements:,} elements of slices of the attention's "
                       f"weights, not 1/{t} of them: {HEADS_HINT}")
                out.append(Violation(INV, r, None, f"{want:,} attention weight elements "
                                     f"(1/{t} of {ATTENTION_WEIGHTS:,}) as slices of the "
                                     "one-rank weights", f"{elements:,}", why))
        out += _disjoint(held, full, members)
    return out


def _disjoint(held: dict[int, dict[int, tuple[str, frozenset[int]]]],
              full: list[dict[str, Any]], members: list[int]) -> list[Violation]:
    """Within a group, each full weight's slices do not overlap and cover it."""
    out: list[Violation] = []
    for i in sorted({i for h in held.values() for i in h}):
        parts = {r: h[i] for r, h in held.items() if i in h}
        how = next(iter(parts.values()))[0]
        size = full[i]["shape"][0 if how == "rows" else 1]
        seen: dict[int, int] = {}
        for r, (_, ix) in sorted(parts.items()):
            for j in ix:
                if j in seen:
                    out.append(Violation(INV, r, None, f"ranks {members} hold disjoint "
                                         f"slices of each attention weight",
                                         f"ranks {seen[j]} and {r} both hold {how[:-1]} {j} "
                                         f"of a {full[i]['shape'][0]}x{full[i]['shape'][1]} "
                                         "weight",
                                         f"two ranks of a group hold the same heads (rank "
                                         f"{r} took rank {seen[j]}'s): {HEADS_HINT}"))
                    return out
                seen[j] = r
        if len(seen) != size and len(parts) == len(members):
            out.append(Violation(INV, None, None, f"the group's slices make the whole "
                                 f"{full[i]['shape'][0]}x{full[i]['shape'][1]} weight",
                                 f"{len(seen)} of its {size} {how}",
                                 f"some heads are held by no rank: {HEADS_HINT}"))
    return out


# Collectives that reduce an activation-sized tensor over the group however a program
# writes its sum: an all-reduce, a reduce (then a broadcast, not counted again), an
# all-to-all or an all-gather followed by a local sum.
_REDUCING = ("all_reduce", "reduce", "all_to_all", "all_to_all_single", "all_gather",
             "all_gather_into_tensor")


def _reduction_share(c: Call, group: list[int], act: int) -> float:
    """How much of one all-reduce of `act` elements over `group` the call `c` carries,
    counted by the data it moves, whatever call carries it: a collective of that size over
    the group is one; sends to the group's peers count by the elements sent (an exchange
    sends the whole tensor to each of the T-1 peers, a ring 2(T-1) chunks of act/T, both
    `act` for T = 2). The Flight Recorder's entries (torch's C++ collectives such as
    DTensor's) carry no group: counted when of that size."""
    t = len(group)
    if not c.p2p:
        return float(c.op in _REDUCING and c.numel_in == act and (
            sorted(c.group) == group or c.source == "flight-recorder"))
    ok = sorted(c.group) == group if c.op == "batch_isend_irecv" else c.sends_to() in group
    if not ok or t < 2:
        return 0.0
    if c.numel_in % act == 0 and 0 < c.numel_in // act < t:  # whole tensors: an exchange
        return c.numel_in / act / (t - 1)
    if c.numel_in * t == act:  # a ring's chunk
        return 1 / (2 * (t - 1))
    return 0.0


def _tp_all_reduces(p: ProcessTrace, group: list[int], act: int) -> list[tuple[int, float]]:
    """(start time, share of an all-reduce) of every call that reduces the activation's
    size over the group."""
    out = [(c.t0, _reduction_share(c, group, act)) for c in p.calls if c.p2p]
    out += [(c.t0, _reduction_share(c, group, act)) for c in p.collectives()]
    return [(t0, w) for t0, w in out if w]


def _recomputed(p: ProcessTrace, group: list[int], unit: int) -> int:
    """All-reduces up to the end of step 1's first backward pass whose input is one an
    earlier all-reduce reduced (the same sum and sum of squares): activation checkpointing
    recomputes a block's forward, its all-reduce included, inside the backward (each
    micro-batch's pass as many). (The observer digests step 1's collective
    reductions; an exchange of sends carries none.)"""
    b = p.backwards  # step 1's first pass (each micro-batch's recomputes as many)
    end = b[1] if len(b) > 1 else 2**63
    seen: set[tuple[float, float]] = set()
    again = 0
    for c in sorted(p.calls, key=lambda c: c.t0):
        d = c.digest
        if not d or c.t0 >= end or c.op != "all_reduce" or d.get("n") != unit \
                or sorted(c.group) != group:
            continue
        key = (d["sum"], d["sq"])
        again += key in seen
        seen.add(key)
    return again


def check_tp_traffic(tp: Run, t: int, batch_size: int) -> list[Violation]:
    """Per block: one all-reduce of the attention output in forward, one of the input's
    gradient in backward, over the group; none other of the activation's size."""
    out = not_implemented(tp, t)
    if out or tp.observed is None:
        return out
    act = batch_size * CONTEXT * N_EMBD
    ranks = tp.observed.ranks()
    for members in groups(tp.world_size, t):
        for r in members:
            p = ranks.get(r)
            if p is None or len(p.backwards) < 2:
                continue
            # A program that runs its B rows as micro-batches inside a step reduces each
            # micro-batch's activation: counted in those units, on the one step clock
            per = p.backwards_per_step(tp.steps)
            calls = _tp_all_reduces(p, members, act // per if act % per == 0 else act)
            b = p.backwards
            first = round(sum(w for t0, w in calls if t0 < b[0]))  # step 1's first forward
            # ... per micro-batch whose forward ran before the first backward: one where a
            # micro-batch's backward follows its forward, all of the step's where a program
            # looks at every micro-batch's loss before any backward (its guard's choice)
            ahead = min(per, max(1, first // N_LAYER))
            first = first // ahead if first % ahead == 0 else first
            per_step = Counter(round(sum(w for t0, w in calls
                                         if b[k * per] <= t0 < b[(k + 1) * per]) / per)
                               for k in range(min(len(b) // per, tp.steps) - 1))
            # activation checkpointing re-runs the forward's all-reduces inside the backward
            again = _recomputed(p, members, act // per if act % per == 0 else act)
            usual = per_step.most_common(1)[0][0] if per_step else 2 * N_LAYER
            usual -= min(again, max(usual - 2 * N_LAYER, 0))
            unit = " (per micro-batch)" if per > 1 else ""
            expected = (f"{N_LAYER} in step 1's forward{unit}, {2 * N_LAYER} per step after"
                        + (f" (besides {again} the recomputed forward repeats)" if again
                           else ""))
            found = f"{first} in step 1's forward{unit}, {usual} per step"
            if first == 0 and usual <= N_LAYER:
                why = ("the attention output is not all-reduced over the tensor-parallel "
                       "group: each rank's output projection gives a partial sum over its "
                       "heads; all-reduce it (g of Megatron's f/g pair) before the bias and "
                       "the residual")
            elif usual < 2 * N_LAYER and first >= N_LAYER:
                why = ("the input's gradient is not all-reduced in backward: each rank's "
                       "heads give part of the gradient of the block's input; all-reduce it "
                       "(f of Megatron's f/g pair: identity forward, all-reduce backward)")
            elif first > N_LAYER or usual > 2 * N_LAYER:
                why = (f"more reductions of the activation's size ({act:,} elements) than "
                       "one per block in forward and one in backward")
            else:
                continue
            out.append(Violation(INV, r, None, f"all-reduces of {act:,} elements (B x "
                                 f"{CONTEXT} x {N_EMBD}) over ranks {members}: {expected}",
                                 found, why))
    return out


def check_tp_rows(tp: Run, t: int) -> list[Violation]:
    """The ranks of a tensor-parallel group compute on the same rows at every backward."""
    out = not_implemented(tp, t)
    if out or tp.observed is None:
        return out
    ranks = tp.observed.ranks()
    for members in groups(tp.world_size, t):
        crcs = {r: [w.get("token_crc") for w in ranks[r].work] for r in members if r in ranks}
        if len(crcs) < 2:
            continue
        first, *others = sorted(crcs)
        for r in others:
            step = next((i + 1 for i, (a, b) in enumerate(zip(crcs[first], crcs[r],
                                                              strict=False))
                         if a is not None and b is not None and a != b), None)
            if step is not None:
                out.append(Violation(INV, r, step, f"the rows rank {first} computes on",
                                     "other rows",
                                     "the ranks of a tensor-parallel group split the heads, "
                                     "not the batch: give them the same B rows (rows "
                                     "[g·B, (g+1)·B) for group g)"))
    return out

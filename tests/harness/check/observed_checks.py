"""Invariants over what the ranks did, as the observer saw it, not what the run reports.

- `check_genuine_ranks`: N distinct processes joined one process group of size N as ranks
  0..N-1 (a 1-rank run may skip the process group);
- `check_same_sequence`: every rank issued the same collectives, with the same shapes, in
  the same order (the first difference is reported with each rank's call site);
- `check_zero_traffic`: ZeRO-1 moves no more than plain data parallelism: per training step
  each rank sends at most 2(N-1)/N·P elements (the ZeRO paper's 2Ψ: a reduce-scatter plus an
  all-gather, the volume of one all-reduce);
- `check_measured_memory`: over N = 1, 2, 4 with the same rows per rank, the persistent
  tensor storage that shrinks as 1/N is at least 12P bytes (master, exp_avg, exp_avg_sq).

Each returns located `Violation`s like tests/harness/check/checks.py; an unobserved run (the
observer turned off) gives none, and the tests skip.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable

from tests.harness.check.checks import Run
from tests.harness.observe.traces import ITEMSIZE, Call, Observation, ProcessTrace
from tests.harness.observe.violations import Violation

INV = "communication"
# Elements per step beyond 2(N-1)/N·P that are not a violation: padding P to a multiple of N
# and a few scalars (loss, norms, the guard's flags). Duplicated gradient or parameter
# traffic adds at least (N-1)/N·P, half the bound, so 2% of it separates the two cleanly.
TRAFFIC_SLACK = 0.02
# Bytes of P-sized state below 12P that the memory check tolerates (in units of P bytes).
# Sharding each of master, exp_avg and exp_avg_sq shrinks per-rank memory by 4P bytes apiece;
# anything less than all three falls short by >= 4P. What else may change with N is small next
# to P: the data rows (N·B·17 int64 on some designs) and a few scalars. 1P separates them.
MEMORY_TOLERANCE_P = 1.0
NOT_OBSERVED = ("nothing loaded the suite's observer: the submission is not a Python program, "
                "or started Python with -I/-E/-S (the observed checks need torch.distributed "
                "in Python; --no-observe turns them off)")


def unseen_ranks(run: Run) -> str | None:
    """Why the suite could not see the run's ranks, where it could not: the program ended
    well (exit 0), no process the observer watched joined a process group or ran a backward
    pass, and it did not watch the run to its end (no process at all, or one that was
    replaced by an exec: what ran then is unseen). No check of what the ranks did may then
    charge or accuse: there is no evidence either way. None where it saw the ranks, where
    every process it saw ran to its end without training (seen: a charge), or where the run
    failed (how it ended is the charge)."""
    obs = run.observed
    if obs is None or run.outcome.returncode != 0 or any(
            p.rank is not None or p.backwards for p in obs.processes):
        return None
    if obs.processes and all(p.ended for p in obs.processes):
        return None
    gone = [p for p in obs.processes if not p.ended]
    saw = (f"it saw {len(obs.processes)} Python process(es), none of which joined a process "
           f"group or ran a backward pass, and {len(gone)} of them ended unseen (replaced by "
           f"an exec: {'; '.join(' '.join(p.argv[:3])[:80] for p in gone[:3])})"
           if obs.processes else "no process of the run loaded its observer")
    return (f"the suite could not see the ranks: {saw}, yet the run ended with exit code 0. "
            "The ranks ran where the observer does not load (a Python started with -I, -E "
            "or -S, or another language): " + NOT_OBSERVED_NEXT)


# What the instructor does where the suite saw nothing of the ranks
NOT_OBSERVED_NEXT = ("the checks of what the ranks did are not graded (no points, no charge); "
                     "look at how the submission starts its ranks, and ask for plain "
                     "`python` ranks (mp.spawn, torchrun, subprocess of sys.executable)")


def observation_of(run: Run, inv: str) -> tuple[Observation | None, list[Violation]]:
    obs = run.observed
    if obs is None or unseen_ranks(run) is not None:  # no evidence: no charge
        return None, []
    if not obs.processes:
        return None, [Violation(inv, None, None, "an observed Python process", "none",
                                NOT_OBSERVED)]
    return obs, []


def missing_ranks(run: Run, obs: Observation, what: str) -> list[Violation]:
    """Nothing to compare when the N ranks never joined (reported, not passed vacuously)."""
    joined = sorted(obs.ranks())
    if run.world_size >= 2 and joined != list(range(run.world_size)):
        return [Violation(INV, None, None, f"{run.world_size} ranks to {what}",
                          f"ranks {joined} joined a process group",
                          "no collective of the missing ranks was ever seen")]
    return []


def check_genuine_ranks(run: Run) -> list[Violation]:
    """For N >= 2: N distinct processes joined one process group of size N, ranks 0..N-1."""
    obs, out = observation_of(run, INV)
    if obs is None or run.world_size == 1:
        return out
    n = run.world_size
    joined = [p for p in obs.processes if p.rank is not None]
    if not joined:
        ran = f"{len(obs.processes)} Python process(es) ran and none called init_process_group"
        trained = [p for p in obs.processes if p.backwards]
        if run.outcome.returncode == 0 and trained:  # seen: the work done outside a group
            why = (f"{ran}; pid {trained[0].pid} ran {len(trained[0].backwards)} backward "
                   f"pass(es) alone: the ranks were never started, one process did their work")
        else:  # it ended (or hung) before: no_deadlock says how
            why = f"{ran} before the run ended: {run.outcome.reason()}"
        return [Violation(INV, None, None, f"{n} processes in one process group",
                          "no process group", why, kind="one_process")]
    if all(p.size == 1 for p in joined):
        return [Violation(INV, None, None, f"{n} processes in one process group",
                          f"{len(joined)} process(es) in group(s) of 1",
                          "the ranks were never started: did one process train on the whole "
                          "batch and write every rank's files?", kind="one_process")]
    for p in joined:
        if p.size != n:
            out.append(Violation(INV, p.rank, None, f"a process group of size {n}",
                                 f"size {p.size}", f"pid {p.pid} joined a group of {p.size}"))
    by_rank: dict[int, list[ProcessTrace]] = defaultdict(list)
    for p in joined:
        by_rank[p.rank].append(p)  # type: ignore[index]
    for r in range(n):
        if r not in by_rank:
            out.append(Violation(INV, r, None, f"a process that joined as rank {r}", "none",
                                 f"{len(joined)} process(es) joined the group as ranks "
                                 f"{sorted(by_rank)}"))
        elif len(by_rank[r]) > 1:
            out.append(Violation(INV, r, None, "one process per rank",
                                 f"{len(by_rank[r])} processes",
                                 f"pids {[p.pid for p in by_rank[r]]} all joined as rank {r}"))
    return out


def check_same_sequence(run: Run) -> list[Violation]:
    """Every rank's collectives agree in op, sizes, dtype and group, call for call."""
    obs, out = observation_of(run, INV)
    if obs is None:
        return out
    ranks = obs.ranks()
    if len(ranks) < 2:
        return out + missing_ranks(run, obs, "compare")
    seqs = {r: p.collectives() for r, p in sorted(ranks.items())}
    longest = max(len(s) for s in seqs.values())
    for k in range(longest):
        calls = {r: (s[k] if k < len(s) else None) for r, s in seqs.items()}
        sigs = {c.signature() if c else None for c in calls.values()}
        if len(sigs) == 1:
            continue
        parts = []
        for r, c in calls.items():
            if c is not None:
                parts.append(f"rank {r}: {c.describe()}")
                continue
            blocked = ranks[r].open_call()
            parts.append(f"rank {r}: none" + (f" (blocked in {blocked.describe()})"
                                              if blocked else " (it issued no more)"))
        first = calls[min(calls)]
        odd = min(r for r, c in calls.items()
                  if c is None or first is None or c.signature() != first.signature())
        return [*out, Violation(INV, odd, None, f"collective #{k + 1} the same on every rank",
                                "different calls", "; ".join(parts),
                                kind="different_calls")]
    return out


def sent_elements(c: Call, n: int) -> float:
    """Elements this rank sends for one call, by what the program asked for (gloo runs a
    reduce-scatter as a full all-reduce underneath: the lesson's cost model counts the call)."""
    f = (n - 1) / n
    op = c.op
    if op == "all_reduce":
        return 2 * f * c.numel_in
    if op.startswith(("reduce_scatter", "all_to_all")):
        return f * c.numel_in
    if op.startswith("all_gather") and op != "all_gather_object":
        return f * (c.numel_out or n * c.numel_in)
    if op in ("send", "isend", "batch_isend_irecv"):  # a batch's numel_in: what it sends
        return float(c.numel_in)
    if op in ("broadcast", "reduce", "scatter", "gather"):
        return f * c.numel_in
    return 0.0  # barriers, receives, object collectives


def _dst(c: Call) -> int | None:
    m = re.search(r"dst=(\d+)", c.peer)
    return int(m[1]) if m else None


def reduced_elements(c: Call, n: int, rank: int) -> float:
    """Elements of this rank's data that one call puts into a reduction across ranks: an
    all-reduce or reduce-scatter by what the program asked for (the reduce-scatter part of an
    all-reduce); an all-to-all or a send by the fresh data it carries (a reduction written by
    hand sends data it did not receive; a gather by hand forwards it, or sends one piece to
    all: counted once); gathers and broadcasts reduce nothing."""
    f = (n - 1) / n
    if c.op == "all_reduce" or c.op.startswith("reduce_scatter"):
        return f * c.numel_in
    if c.op == "reduce":
        return 0.0 if _dst(c) == rank else float(c.numel_in)
    if c.op.startswith("all_to_all") or c.op in ("send", "isend", "batch_isend_irecv"):
        return float(c.fresh) if c.fresh is not None else sent_elements(c, n)
    return 0.0


def training_calls(p: ProcessTrace) -> list[Call]:
    """The calls from the first backward on (the initial broadcast and set-up set aside)."""
    start = p.backwards[0] if p.backwards else None
    calls = p.collectives() + [c for c in p.calls if c.p2p]
    return [c for c in calls if start is not None and c.t0 >= start]


def steps_taken(p: ProcessTrace, steps: int) -> int:
    """Training steps the rank took (a run stopped early took fewer than asked): its backward
    calls, at most `steps` (several micro-batches of a step count once)."""
    return max(min(len(p.backwards), steps), 1)


def params_of(run: Run) -> int | None:
    """P as the ranks computed it (the elements their backward passes differentiated),
    else as the run reports it (summary.json)."""
    return params_with_source(run)[0]


def params_with_source(run: Run) -> tuple[int | None, str]:
    """P and where it came from, for the messages that use it."""
    obs = run.observed
    seen = [x for p in (obs.processes if obs else []) if (x := p.model_elements())]
    if seen:
        return max(seen), "the elements each rank's backward pass differentiates"
    return run.parsed.n_params, "summary.json's n_params (no backward pass was observed)"




def per_site_per_step(run: Run, measure: Callable[[Call, int], float]
                      ) -> dict[int, dict[str, float]]:
    """rank -> {"op at site": `measure(call, rank)` summed per training step taken}."""
    obs = run.observed
    out: dict[int, dict[str, float]] = {}
    for r, p in sorted((obs.ranks() if obs else {}).items()):
        by_site: dict[str, float] = defaultdict(float)
        taken = steps_taken(p, run.steps)
        for c in training_calls(p):
            v = measure(c, r)
            if v:
                by_site[f"{c.op} at {c.site}"] += v / taken
        out[r] = dict(by_site)
    return out


def traffic_per_step(run: Run, in_bytes: bool = False) -> dict[int, dict[str, float]]:
    """rank -> {"op at site": elements (or bytes) sent per training step}."""
    def sent(c: Call, rank: int) -> float:
        return sent_elements(c, run.world_size) * (ITEMSIZE.get(c.dtype.lower(), 1)
                                                   if in_bytes else 1)
    return per_site_per_step(run, sent)


def reduced_per_step(run: Run) -> dict[int, dict[str, float]]:
    """rank -> {"op at site": elements put into reductions per training step}."""
    return per_site_per_step(run, lambda c, rank: reduced_elements(c, run.world_size, rank))


def _diagnosis(sent: dict[str, float], reduced: dict[str, float], n: int, P: int) -> str:
    """What the extra traffic is, read from the calls that moved it: per call site ("op at
    site"), what it sent and what of it went into a reduction, per step."""
    full = (n - 1) / n * P  # one reduction (or one gather) of every gradient element
    reductions = [k for k in sent if reduced.get(k, 0.0) >= 0.5 * full]
    gathers = [k for k in sent if k not in reductions and sent[k] >= 0.5 * full]

    def named(k: str) -> str:
        return f"{k} ({sent[k]:,.0f} elements)"
    if len(reductions) >= 2:
        return (f"the gradient is reduced twice: {named(reductions[0])} and "
                f"{named(reductions[1])} each reduce every element (e.g. DDP's all-reduce "
                "composed with ZeRO's reduce-scatter): reduce each gradient once")
    times = round(reduced[reductions[0]] / full) if reductions else 0
    if times >= 2:
        return (f"the gradient is reduced {times} times per step at one call site: "
                f"{named(reductions[0])}, each call reducing every element (e.g. once per "
                "micro-batch): "
                "reduce the accumulated gradient once per step, after the last backward")
    if reductions and reductions[0].startswith("all_reduce") and gathers:
        return (f"all-reduce where a reduce-scatter suffices: {named(reductions[0])} gives "
                f"every rank the whole reduced gradient, then {named(gathers[0])} gathers the "
                "updated slices; each rank needs only its own slice of the reduced gradient "
                "(reduce-scatter)")
    top = sorted(sent, key=lambda k: -sent[k])[:3]
    return ("more data per step than ZeRO-1's reduce-scatter and all-gather; seen: "
            + ", ".join(named(k) for k in top))


def check_zero_traffic(run: Run) -> list[Violation]:
    """Per step, each rank sends at most 2(N-1)/N·P elements (+2%: padding and scalars)."""
    obs, out = observation_of(run, INV)
    if obs is None or run.world_size == 1:
        return out
    P, source = params_with_source(run)
    if P is None:
        return [*out, Violation(INV, None, None, "P", "unknown",
                                "no parameters observed and no summary.json")]
    out += missing_ranks(run, obs, "measure")
    n = run.world_size
    bound = 2 * (n - 1) / n * P * (1 + TRAFFIC_SLACK)
    reduced = reduced_per_step(run)
    for r, by_site in traffic_per_step(run).items():
        total = sum(by_site.values())
        if total > bound:
            top = sorted(by_site.items(), key=lambda kv: -kv[1])[:4]
            breakdown = ", ".join(f"{k}: {v:,.0f}" for k, v in top)
            why = _diagnosis(by_site, reduced.get(r, {}), n, P)
            out.append(Violation(INV, r, None,
                                 f"<= 2(N-1)/N·P = {2 * (n - 1) / n * P:,.0f} elements sent "
                                 "per step", f"{total:,.0f}",
                                 f"{why}; per step: {breakdown} (P = {P:,}: {source})",
                                 kind="too_much_traffic"))
    return out


def persistent_bytes(run: Run, same_storage: bool = False) -> int | None:
    """The largest per-rank persistent tensor storage the observer measured in this run
    (with `same_storage`: the storages alive at both snapshots only)."""
    obs = run.observed
    found = [x for p in (obs.trainers().values() if obs else [])
             if (x := p.persistent_bytes(same_storage)) is not None]
    return max(found) if found else None


def _sharded(measured: dict[int, int]) -> float:
    """persistent(N) = A + B/N: each pair with N = 1 estimates B; the smaller one counts."""
    return min((measured[1] - measured[n]) * n / (n - 1) for n in measured if n > 1)


def check_measured_memory(runs: dict[int, Run]) -> list[Violation]:
    """Over N = 1, 2, 4 (same rows per rank), the part of each rank's persistent state that
    shrinks as 1/N is >= (12 - tolerance)·P bytes; reports it next to optimizer_bytes."""
    inv = "zero1_memory"
    out: list[Violation] = []
    measured: dict[int, int] = {}
    for n, run in sorted(runs.items()):
        obs, problems = observation_of(run, inv)
        if obs is None:
            if problems:
                return problems
            continue
        b = persistent_bytes(run)
        if b is None:
            out.append(Violation(inv, None, None, f"two memory snapshots in the N={n} run",
                                 "none", "the observer snapshots at the first backward pass "
                                 "of steps 3 and 6 (.backward() or torch.autograd.grad): "
                                 f"did the run train? ({run.outcome.reason()})"))
        else:
            measured[n] = b
    if out or len(measured) < 2 or 1 not in measured:
        return out
    P = params_of(runs[1]) or 1
    # Two measures, each of which can only err low: storages alive at both snapshots miss
    # state updated out of place (a new tensor every step); those plus the ones replaced by
    # a storage of the same size may take in a collective's buffer still held at a snapshot
    # (runs of N >= 2 only, so it lowers the estimate). The larger one counts.
    # (Both come from the same memory record: where one is measured, so is the other.)
    same = {n: b if (s := persistent_bytes(runs[n], same_storage=True)) is None else s
            for n, b in measured.items()}
    shrink = max(_sharded(measured), _sharded(same))
    need = (12 - MEMORY_TOLERANCE_P) * P
    if shrink < need:
        logged = {n: (r.parsed.records.get(0, {}).get(r.steps) or {}).get("optimizer_bytes")
                  for n, r in runs.items()}
        out.append(Violation(
            inv, None, None, f">= 12P = {12 * P:,} bytes of persistent state sharded as 1/N",
            f"{shrink:,.0f} bytes ({shrink / P:.1f}P)",
            "measured persistent tensor bytes per rank "
            + ", ".join(f"N={n}: {b:,}" for n, b in sorted(measured.items()))
            + "; logged optimizer_bytes "
            + ", ".join(f"N={n}: {v}" for n, v in sorted(logged.items()))
            + ": some of master/exp_avg/exp_avg_sq is kept whole on every rank",
            kind="kept_whole"))
    return out

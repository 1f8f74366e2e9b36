"""The invariants of run contract v1, as plain functions over parsed runs.

Each returns a list of `Violation`s (empty: the invariant holds). The test modules and the
mutant matrix call the same functions, so "caught" means this exact check reported it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from tests.harness.check import shards
from tests.harness.observe.parse import is_finite
from tests.harness.observe.violations import Violation
from tests.harness.run.result import Run

LOSS_RISE_RTOL = 1e-6  # a loss may exceed the previous one by this much (float noise)
# ...or, once in a while, by up to this much if the next step takes it back below the loss
# before the rise: Adam's overshoot on a program's own data and init (the contract leaves
# both to the program; tests/students/zero1.py rises 0.56% at step 5 under seed 11, 0.08% at
# step 3 under seed 37, in 40 seeds; the lesson's data never does). A divergence does not
# come back.
OVERSHOOT_RTOL = 0.01
PARITY_LOSS_RTOL = 1e-5
PARITY_GRAD_RTOL = 1e-4
MASTER_NORM_RTOL = 1e-9  # float64 sums of the same values in another order
STATE_TENSORS = ("master", "exp_avg", "exp_avg_sq")
BYTES_PER_FP32 = 4
COMPARED = ("loss", "grad_norm", "param_norm", "optimizer_bytes")  # step_time_s is wall time

# Parameter count of the lesson's MiniGPT (vocab 64, context 16, embed 32, 2 blocks, untied
# head): matrices and embeddings only, and with every bias and LayerNorm parameter.
P_MIN = 64 * 32 + 16 * 32 + 2 * 12 * 32 * 32 + 32 * 64
P_MAX = P_MIN + 2 * (3 * 32 + 32 + 4 * 32 + 32 + 4 * 32) + 2 * 32 + 64




def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def unwritten(run: Run) -> list[int]:
    """The ranks whose metrics file a run that ended well never wrote: a contract violation
    (every rank logs its own record), told as itself where the run's ending is checked; what
    other checks would infer from the missing records is its consequence."""
    if run.outcome.returncode != 0:
        return []
    return sorted(p.rank for p in run.parsed.problems
                  if p.rank is not None and p.expected == "file" and p.found == "missing")


def _relabel(invariant: str, problems: list[Violation]) -> list[Violation]:
    return [Violation(invariant, p.rank, p.step, p.expected, p.found, p.message, kind=p.kind)
            for p in problems]


def _step_records(run: Run, invariant: str, steps: range, keys: tuple[str, ...]
                  ) -> tuple[dict[int, dict[int, dict[str, Any]]], list[Violation]]:
    """records[rank][step] for the steps asked, with a violation for each one missing."""
    out: list[Violation] = _relabel(invariant, run.parsed.problems)
    for rank in range(run.world_size):
        recs = run.parsed.records.get(rank, {})
        missing = [s for s in steps if s not in recs]
        if missing:
            out.append(Violation(invariant, rank, missing[0], "a record for every step",
                                 f"{len(missing)} missing", f"steps {missing[:5]}..."
                                 if len(missing) > 5 else f"steps {missing}"))
        for s in steps:
            rec = recs.get(s)
            for key in keys:
                if rec is not None and key in rec and not is_finite(rec[key]):
                    out.append(Violation(invariant, rank, s, f"finite {key}", rec[key]))
    return run.parsed.records, out


def _overshoot(r0: dict[int, dict[str, Any]], s: int) -> bool:
    """Step s's loss is at most OVERSHOOT_RTOL above step s-1's, and step s+1's below that."""
    prev, nxt = r0[s - 1]["loss"], r0.get(s + 1, {}).get("loss")
    return r0[s]["loss"] <= prev + OVERSHOOT_RTOL * abs(prev) and is_finite(nxt) and \
        nxt < prev


def check_monotonic_loss(run: Run) -> list[Violation]:
    """Finite losses at steps 1..S, equal on every rank, none above the previous + 1e-6 rel
    but an overshoot the next step takes back (`OVERSHOOT_RTOL`)."""
    inv = "monotonic_loss"
    recs, out = _step_records(run, inv, range(1, run.steps + 1), ("loss",))
    r0 = recs.get(0, {})
    for s in range(1, run.steps + 1):
        if s not in r0 or not is_finite(r0[s]["loss"]):
            continue
        for rank in range(1, run.world_size):
            other = recs.get(rank, {}).get(s)
            if other is not None and other["loss"] != r0[s]["loss"]:
                out.append(Violation(inv, rank, s, f"rank 0's loss {r0[s]['loss']!r}",
                                     other["loss"], "every rank must log the same global loss",
                                     kind="loss_differs_across_ranks"))
        prev = r0.get(s - 1)
        if prev is not None and s > 1 and is_finite(prev.get("loss")):
            limit = prev["loss"] + LOSS_RISE_RTOL * abs(prev["loss"])
            if r0[s]["loss"] > limit and not _overshoot(r0, s):
                out.append(Violation(inv, 0, s, f"loss <= {limit!r} (step {s - 1}: "
                                     f"{prev['loss']!r} + 1e-6 rel; up to "
                                     f"{OVERSHOOT_RTOL:.0%} only if step {s + 1} falls "
                                     "below it)", r0[s]["loss"], kind="loss_rises"))
    return out


def check_equal_norms(run: Run) -> list[Violation]:
    """At steps 0..S every rank holds a parameter vector of exactly rank 0's norm."""
    inv = "equal_rank_norms"
    recs, out = _step_records(run, inv, range(0, run.steps + 1), ("param_norm",))
    for s in range(0, run.steps + 1):
        ref = recs.get(0, {}).get(s)
        if ref is None:
            continue
        for rank in range(1, run.world_size):
            rec = recs.get(rank, {}).get(s)
            if rec is not None and rec["param_norm"] != ref["param_norm"]:
                out.append(Violation(inv, rank, s, f"rank 0's norm {ref['param_norm']!r}",
                                     rec["param_norm"], "ranks hold different parameters",
                                     kind="params_differ"))
    return out


def _load_shard(checkpoint: Path, name: str) -> tuple[dict[str, Any] | None, str | None]:
    """The dict of the shard named `name` in `checkpoint` (tensors as numpy arrays:
    tests/harness/check/shards.py, read through the boundary), or None and why not."""
    data, err = shards.read(checkpoint, name)
    return (None, err) if data is None else _loaded(data)


def _loaded(data: bytes) -> tuple[dict[str, Any] | None, str | None]:
    obj, err = shards.load(data)
    if obj is None:
        return None, err
    if not isinstance(obj, dict):
        return None, f"holds a {type(obj).__name__}, not a dict"
    return obj, None


def _whose_step(norm: float, logged: dict[int, dict[str, Any]], step: int) -> int | None:
    """The step before or after `step` whose logged parameter norm the checkpointed masters'
    norm is (before first), or None where neither."""
    for other in (step - 1, step + 1):
        rec = logged.get(other)
        if rec is not None and is_finite(rec.get("param_norm")) and \
                math.isclose(norm, rec["param_norm"], rel_tol=MASTER_NORM_RTOL):
            return other
    return None


def _whose_norm(norm: float, logged: dict[int, dict[str, Any]], step: int) -> str:
    """Which step's logged parameter norm the checkpointed masters' norm is, where it is the
    one before or after `step`: saved before the step's update, or the model's parameters a
    step behind the masters (gathered before the update). '' where neither."""
    other = _whose_step(norm, logged, step)
    if other is None:
        return ""
    said = ("before the step's update" if other < step else
            "a step ahead of the parameters the model ran")
    return f" (their norm is the one logged at step {other}: {said})"


def _master_kind(norm: float, logged: dict[int, dict[str, Any]], step: int) -> str:
    """The kind of a stale-master finding: saved before the update, gathered early, or
    neither (what diagnosis reads)."""
    other = _whose_step(norm, logged, step)
    return "master_stale" if other is None else (
        "master_before_update" if other < step else "master_step_ahead")


def check_zero_memory(run: Run) -> list[Violation]:
    """optimizer_bytes == 12*ceil(P/N) everywhere; shards hold 3*ceil(P/N) fp32 values;
    the checkpointed masters have the logged parameter norm of their step."""
    inv = "zero1_memory"
    recs, out = _step_records(run, inv, range(0, run.steps + 1), ())
    P = run.parsed.n_params
    if P is None:
        return out + _relabel(inv, [p for p in run.parsed.problems if p.rank is None])
    if not P_MIN <= P <= P_MAX:
        out.append(Violation(inv, None, None, f"P of the lesson's MiniGPT ({P_MIN}..{P_MAX})", P,
                             "summary.json n_params does not fit the model of the contract"))
    shard = ceil_div(P, run.world_size)
    want = 12 * shard
    for rank in range(run.world_size):
        for s, rec in sorted(recs.get(rank, {}).items()):
            if rec["optimizer_bytes"] != want:
                out.append(Violation(inv, rank, s, f"12*ceil(P/N) = {want} bytes",
                                     rec["optimizer_bytes"], f"P={P}, N={run.world_size}",
                                     kind="optimizer_bytes"))
    for step, ck in sorted(run.parsed.checkpoints.items()):
        m = ck.manifest
        if not isinstance(m, dict) or not isinstance(m.get("shards"), list):
            out.append(Violation(inv, None, step, "manifest.json with shards", "missing/invalid"))
            continue
        if m.get("n_params") != P:
            out.append(Violation(inv, None, step, f"manifest n_params {P}", m.get("n_params")))
        masters: list[np.ndarray] = []
        for rank in range(run.world_size):
            obj, err = _load_shard(ck.path, f"rank-{rank}.pt")
            if obj is None:
                out.append(Violation(inv, rank, step, "a loadable shard", err))
                continue
            for name in STATE_TENSORS:
                t = obj.get(name)
                if not (isinstance(t, np.ndarray) and t.dtype == np.float32
                        and t.ndim == 1 and t.size == shard):
                    found = shards.describe(t)
                    out.append(Violation(inv, rank, step, f"{name}: float32 of {shard} values",
                                         found, "a shard holds 3*ceil(P/N) float32 values"))
            if isinstance(obj.get("master"), np.ndarray):
                masters.append(obj["master"])
        logged = recs.get(0, {}).get(step)
        if len(masters) == run.world_size and logged is not None:
            flat = np.concatenate([m.reshape(-1) for m in masters])[:P].astype(np.float64)
            norm = float(np.sqrt(np.square(flat).sum()))
            if not math.isclose(norm, logged["param_norm"], rel_tol=MASTER_NORM_RTOL):
                out.append(Violation(inv, None, step, f"logged param_norm {logged['param_norm']!r}",
                                     norm, "checkpointed masters are stale or partial"
                                     + _whose_norm(norm, recs.get(0, {}), step),
                                     kind=_master_kind(norm, recs.get(0, {}), step)))
    return out


def check_memory_scaling(runs: dict[int, Run]) -> list[Violation]:
    """Per-rank optimizer bytes x N is 12*N*ceil(P/N): constant (12P) where N divides P."""
    inv = "zero1_memory"
    out: list[Violation] = []
    totals: dict[int, int] = {}
    for n, run in sorted(runs.items()):
        P = run.parsed.n_params
        last = run.parsed.records.get(0, {}).get(run.steps)
        if P is None or last is None:
            out.append(Violation(inv, 0, run.steps, "a finished run", "no record",
                                 f"N={n} run: {run.outcome.reason()}"))
            continue
        expected = 12 * n * ceil_div(P, n)
        totals[n] = last["optimizer_bytes"] * n
        if totals[n] != expected:
            out.append(Violation(inv, None, run.steps, f"bytes x N = {expected} for N={n}",
                                 totals[n], "per-rank memory does not shrink as 1/N"))
    even = {n: t for n, t in totals.items() if runs[n].parsed.n_params and
            runs[n].parsed.n_params % n == 0}  # type: ignore[operator]
    if len(set(even.values())) > 1:
        out.append(Violation(inv, None, None, "the same bytes x N for every N dividing P",
                             even, "memory per rank x N should be 12P"))
    return out


def check_checkpoint_files(run: Run, steps: list[int], inv: str = "byte_exact_resume"
                           ) -> list[Violation]:
    """Each listed checkpoint exists, and each shard's sha256 matches its manifest."""
    import hashlib

    out: list[Violation] = []
    for step in steps:
        ck = run.parsed.checkpoints.get(step)
        if ck is None or not isinstance(ck.manifest, dict):
            out.append(Violation(inv, None, step, f"checkpoints/step-{step:06d}/manifest.json",
                                 "missing or invalid", f"run: {run.outcome.reason()}",
                                 kind="checkpoint_missing"))
            continue
        listed = ck.manifest.get("shards")
        if not isinstance(listed, list) or len(listed) != run.world_size:
            out.append(Violation(inv, None, step, f"{run.world_size} shard entries",
                                 len(listed) if isinstance(listed, list) else listed))
            continue
        for entry in listed:
            if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
                out.append(Violation(inv, None, step, "shard entry with 'file'", entry))
                continue
            data, why = shards.read(ck.path, entry["file"])
            if data is None:  # (no digest of a file it may not read: no sha256 oracle)
                out.append(Violation(inv, entry.get("rank"), step, entry["file"][:200],
                                     "missing" if why == "was not written" else "refused",
                                     f"{entry['file'][:200]} {why}"))
                continue
            digest = hashlib.sha256(data).hexdigest()
            if digest != entry.get("sha256"):
                out.append(Violation(inv, entry.get("rank"), step, f"sha256 {entry.get('sha256')}",
                                     digest, f"{entry['file']} does not match its manifest",
                                     kind="manifest_mismatch"))
            obj, err = _loaded(data)
            if obj is None:
                out.append(Violation(inv, entry.get("rank"), step, "weights_only load", err))
    return out


def _same_trajectory(inv: str, a: Run, b: Run, steps: range, what: str) -> list[Violation]:
    out: list[Violation] = []
    for rank in range(a.world_size):
        ra, rb = a.parsed.records.get(rank, {}), b.parsed.records.get(rank, {})
        for s in steps:
            if s not in rb:
                out.append(Violation(inv, rank, s, f"a record in the {what}", "none",
                                     f"{what}: {b.outcome.reason()}", kind="record_missing"))
                break
            if s not in ra:
                continue
            for key in COMPARED:
                if ra[s].get(key) != rb[s].get(key):
                    out.append(Violation(inv, rank, s, f"{key} {ra[s].get(key)!r}",
                                         rb[s].get(key), f"{what} is not bit-identical",
                                         kind=f"not_bit_identical:{key}"))
    return out


def _shard_hashes(manifest: dict[str, Any]) -> dict[Any, Any]:
    """rank -> sha256 of a manifest's (well-formed) shard entries."""
    return {e.get("rank"): e.get("sha256") for e in manifest.get("shards", [])
            if isinstance(e, dict)}


def _same_final_shards(inv: str, a: Run, b: Run, step: int, what: str) -> list[Violation]:
    ca, cb = a.parsed.checkpoints.get(step), b.parsed.checkpoints.get(step)
    if cb is None or not isinstance(cb.manifest, dict):
        return [Violation(inv, None, step, f"a step-{step} checkpoint in the {what}", "none")]
    if ca is None or not isinstance(ca.manifest, dict):
        return []  # reported against the reference run by check_checkpoint_files
    sha_a, sha_b = _shard_hashes(ca.manifest), _shard_hashes(cb.manifest)
    return [Violation(inv, r, step, f"sha256 {sha_a[r]}", sha_b.get(r),
                      f"{what}'s step-{step} shard differs", kind="final_shard_differs")
            for r in sorted(k for k in sha_a if isinstance(k, int)) if sha_a[r] != sha_b.get(r)]


def _grad_norms(run: Run) -> dict[int, float]:
    return {s: float(r["grad_norm"]) for s, r in run.parsed.records.get(0, {}).items()
            if s >= 1 and is_finite(r.get("grad_norm"))}


GROWTH = 2.0  # the gradient norm at least doubles over the steps before the restart
RESTART_DROP = 0.5  # and the restarted run's first is at most half the original's


def _accumulating(inv: str, base: Run, other: Run, restart: int, what: str
                  ) -> list[Violation]:
    """What the gradient norms of both runs say when a restarted run parts from the original
    at `restart`: norms that grow step after step in the original and fall back at the
    restart are gradients summed across steps, which a restart (fresh zero gradients)
    resets. Nothing when the norms do not show it."""
    a, b = _grad_norms(base), _grad_norms(other)
    before = [a[s] for s in range(1, restart) if s in a]
    if len(before) < 3 or restart not in a or restart not in b:
        return []
    rising = sum(y > x for x, y in itertools.pairwise(before)) / (len(before) - 1)
    if rising < 0.8 or before[-1] < GROWTH * before[0] or b[restart] > RESTART_DROP * a[restart]:
        return []
    return [Violation(inv, 0, restart, f"grad_norm {a[restart]!r} (the original run)",
                      b[restart],
                      f"gradients accumulate across steps: the original run's gradient norm "
                      f"grows step after step ({before[0]:.3g} at step 1, {before[-1]:.3g} at "
                      f"step {restart - 1}) and the {what}'s first is "
                      f"{a[restart] / max(b[restart], 1e-30):.1f}x smaller",
                      kind="accumulating")]


MOMENTS_RESTARTED = 0.75  # exp_avg_sq's norm below this fraction of the original run's


def _optimizer_state(inv: str, a: Run, b: Run, step: int, what: str) -> list[Violation]:
    """What the step-`step` shards of both runs say of the optimizer's state, rank by rank: a
    step count other than the original run's, or an exp_avg_sq far smaller than its (Adam's
    second moment decays slowly, so moments started again from zero at the resume hold
    about half of the original's at the end). Nothing where the shards do not show it."""
    ca, cb = a.parsed.checkpoints.get(step), b.parsed.checkpoints.get(step)
    if ca is None or cb is None or not isinstance(ca.manifest, dict) \
            or not isinstance(cb.manifest, dict):
        return []
    files_a, files_b = ({e.get("rank"): e.get("file") for e in m.get("shards", [])
                         if isinstance(e, dict)} for m in (ca.manifest, cb.manifest))
    out: list[Violation] = []
    for r in sorted(k for k in files_a if isinstance(k, int) and k in files_b):
        sa, _ = _load_shard(ca.path, str(files_a[r]))
        sb, _ = _load_shard(cb.path, str(files_b[r]))
        if sa is None or sb is None:
            continue
        if is_finite(sa.get("step")) and is_finite(sb.get("step")) and sa["step"] != sb["step"]:
            out.append(Violation(inv, r, step, f"Adam's step count {sa['step']} (the original "
                                 "run's)", sb["step"], f"the {what}'s optimizer counts "
                                 f"{sb['step']} steps at step {step}: its step count was not "
                                 "carried over the resume", kind="step_count_differs"))
            continue
        va, vb = sa.get("exp_avg_sq"), sb.get("exp_avg_sq")
        if isinstance(va, np.ndarray) and isinstance(vb, np.ndarray) and va.shape == vb.shape:
            na, nb = (float(np.linalg.norm(v.astype(np.float64))) for v in (va, vb))
            if na == 0:  # after `step` steps of nonzero gradients, never: they were not saved
                out.append(Violation(inv, r, step, "the moments of its steps", "zeros",
                                     f"the original run's step-{step} shard holds exp_avg_sq "
                                     "of zeros: its moments were not saved",
                                     kind="moments_not_saved"))
            elif nb < MOMENTS_RESTARTED * na:
                out.append(Violation(inv, r, step, f"exp_avg_sq norm {na:.4g} (the original "
                                     "run's)", round(nb, 6), f"the {what}'s exp_avg_sq is "
                                     f"{nb / na:.2f}x the original's at step {step}: its "
                                     "moments started again from zero at the resume",
                                     kind="moments_restarted"))
    return out


def check_resume(base: Run, resumed: Run, from_step: int) -> list[Violation]:
    """Valid checkpoints; a resume from `from_step` is bit-identical to the run, files too."""
    inv = "byte_exact_resume"
    out = check_checkpoint_files(base, [from_step, base.steps], inv)
    if resumed.outcome.returncode != 0:
        out.append(Violation(inv, None, from_step + 1, "the resumed run to exit 0",
                             resumed.outcome.reason()))
    parted = _same_trajectory(inv, base, resumed, range(from_step + 1, base.steps + 1),
                              "resumed run")
    if parted:
        out += _accumulating(inv, base, resumed, from_step + 1, "resumed run")
    out += parted
    differ = _same_final_shards(inv, base, resumed, base.steps, "resumed run")
    if differ:
        out += _optimizer_state(inv, base, resumed, base.steps, "resumed run")
    return out + differ


def check_clean_exit(run: Run) -> list[Violation]:
    """Exit 0 within the bound and the host's limits, every rank logged the last step,
    nothing left running."""
    inv = "no_deadlock"
    out: list[Violation] = []
    o = run.outcome
    last = {r: max(run.parsed.records.get(r, {}) or [-1]) for r in range(run.world_size)}
    if o.limit:  # a bound on the host (bounds.py) stopped it: its sentence, word for word
        out.append(Violation(inv, None, None, "a run within the limits of the host",
                             "still running at a limit", o.limit, kind="host_limit"))
    elif o.deadlock_s is not None:
        out.append(Violation(inv, None, None, "every rank to make progress",
                             f"deadlock: {o.blocked}",
                             f"every rank sat {o.deadlock_s:.1f}s in an unfinished collective; "
                             "the run was stopped then", kind="deadlock"))
    elif o.timed_out:
        unfinished = ", ".join(f"rank {r} at step {s}" if s >= 0 else f"rank {r} logged nothing"
                               for r, s in last.items() if s < run.steps) or "none"
        out.append(Violation(inv, None, None, f"exit within {o.wall_s:.0f}s",
                             "still running at the bound",
                             f"{len(o.alive_at_bound)} processes alive; unfinished: {unfinished}"
                             + (f"; {o.blocked}" if o.blocked else ""), kind="hung"))
    elif o.returncode != 0:
        out.append(Violation(inv, None, None, "exit code 0", o.returncode, o.reason(),
                             kind="exit_code"))
    for r, s in last.items():
        if s < run.steps:
            out.append(Violation(inv, r, s if s >= 0 else None, f"step {run.steps} logged",
                                 f"last step {s}" if s >= 0 else "nothing logged",
                                 kind="rank_unfinished" if s >= 0 else "nothing_logged"))
    if o.survivors:
        out.append(Violation(inv, None, None, "no process left after exit",
                             f"{len(o.survivors)} left", "killed by the suite",
                             kind="left_behind"))
    return out + _relabel(inv, run.parsed.problems)  # how it ended comes first


def parted_steps(run: Run, reference: Run, tolerances: dict[str, float]
                 ) -> Iterator[tuple[int, str | None, Any, Any]]:
    """Where rank 0 of `run` parts from rank 0 of `reference`, step by step: (step, key, found,
    expected) for each key of `tolerances` not finite or outside its relative tolerance; and
    (step, None, "run" or "reference", None) for the first step one of them did not log,
    which ends it."""
    ra, rb = run.parsed.records.get(0, {}), reference.parsed.records.get(0, {})
    for s in range(1, run.steps + 1):
        a, b = ra.get(s), rb.get(s)
        if a is None or b is None:
            yield s, None, "run" if a is None else "reference", None
            return
        for key, rtol in tolerances.items():
            x, y = a[key], b[key]
            if not (is_finite(x) and is_finite(y) and math.isclose(x, y, rel_tol=rtol)):
                yield s, key, x, y


PARITY = {"loss": PARITY_LOSS_RTOL, "grad_norm": PARITY_GRAD_RTOL}


def unsynced_ranks(run: Run) -> list[int] | None:
    """The ranks that received fewer than P elements by collectives before their first
    backward pass (no initial broadcast of the parameters, in one call or one per tensor);
    None where the suite cannot tell (no observer, no P, a rank unseen or that never ran a
    backward). A program whose ranks draw the same parameters needs no broadcast: this is
    evidence only where the ranks' first steps part."""
    obs, P = run.observed, run.parsed.n_params
    if obs is None or not P:
        return None
    ranks = obs.ranks()
    if sorted(ranks) != list(range(run.world_size)) or any(not p.backwards
                                                          for p in ranks.values()):
        return None
    return [r for r, p in sorted(ranks.items())
            if sum(max(c.numel_in, c.numel_out) for c in p.collectives()
                   if c.t0 < p.backwards[0]) < 0.98 * P]


def check_parity(base: Run, single: Run) -> list[Violation]:
    """N ranks x B rows and 1 rank x N*B rows agree at every step (the strongest check)."""
    inv = "single_process_parity"
    out: list[Violation] = _relabel(inv, base.parsed.problems + single.parsed.problems)
    for s, key, x, y in parted_steps(base, single, PARITY):
        if key is None:
            out.append(Violation(inv, 0, s, "both runs log the step", "missing in " + (
                "the N-rank run" if x == "run" else "the 1-rank run"), kind="parity_missing"))
            continue
        why, kind = f"{base.world_size}-rank run diverges from 1 rank", f"parity_{key}"
        if s == 1 and key == "loss":  # what the ranks held when step 1 began, where seen
            unsynced = unsynced_ranks(base)
            if unsynced:
                why += (f"; {', '.join(map(str, unsynced))}: {UNSYNCED} before "
                        "the first backward")
                kind = PARITY_UNSYNCED
            elif unsynced == []:
                why += f"; every rank {SYNCED} before the first backward"
                kind = PARITY_SYNCED
        out.append(Violation(inv, 0, s, f"{key} {y!r} (1 rank) within {PARITY[key]:g} rel",
                             x, why, kind=kind))
    return out


# What the step-1 parity violation says of the ranks' start (its words; diagnosis reads
# its kind)
UNSYNCED = "received no parameters by a collective"
SYNCED = "received P elements by collectives"
PARITY_UNSYNCED, PARITY_SYNCED = "parity_loss_unsynced", "parity_loss_synced"


LATE_GUARD = "the rollback before step"  # how noticed_in_time's violations begin (expected)


def noticed_in_time(faulted: Run, kind: str, step: int) -> list[Violation]:
    """The guard fires before the bad update is kept: a NaN gradient shows in step S's own
    gradient norm, before its update; a spiked update first in step S+1's loss. A rank whose
    file holds that step's record before its rollback event kept the bad update. (An event
    after the last step is a file written at the end, not a late guard: it is not read.)"""
    kept_at = step if kind == "nan" else step + 1
    out = []
    for rank in range(faulted.world_size):
        first = next((e for e in faulted.parsed.events.get(rank, [])
                      if e.get("event") == "rollback" and e.get("reason") == kind), None)
        last = first.get("_last_step_before") if first else None
        if not isinstance(last, int) or not kept_at <= last < faulted.steps:
            continue
        why = (f"step {last} was logged (a step is logged after its update) before the "
               f"rollback of the NaN gradient of step {step}: decide before the step's update "
               "and record; test the step's gradient norm, not only its loss"
               if kind == "nan" else
               f"step {last} was logged (a step is logged after its update) before the "
               f"rollback, though the spike of step {step} showed in step {step + 1}'s loss: "
               "compare each step's loss with the previous step's before its update")
        out.append(Violation("rollback", rank, last, f"{LATE_GUARD} {kept_at}'s update is kept",
                             f"step {last} logged first", why, kind="late_guard"))
    return out


def check_rollback(clean: Run, faulted: Run, kind: str, step: int) -> list[Violation]:
    """A one-shot fault is rolled back and the run ends exactly where the clean run ends."""
    inv = "rollback"
    out: list[Violation] = []
    if faulted.outcome.returncode != 0:
        last = max((max(recs, default=0) for recs in faulted.parsed.records.values()),
                   default=0)
        out.append(Violation(inv, None, step, "exit code 0 after the rollback",
                             faulted.outcome.reason(), f"it stopped at step {last}, before "
                             "the fault" if last < step else "",
                             kind="stopped_before_fault" if last < step else "rollback_exit"))
    for rank in range(faulted.world_size):
        events = [e for e in faulted.parsed.events.get(rank, [])
                  if e.get("event") == "rollback"]
        if not any(e.get("reason") == kind for e in events):
            out.append(Violation(inv, rank, step, f"a rollback event with reason {kind!r}",
                                 [e.get("reason") for e in events] or "none",
                                 kind="no_rollback_event"))
    out += noticed_in_time(faulted, kind, step)
    what = f"run with {kind}@{step}"
    parted = _same_trajectory(inv, clean, faulted, range(1, clean.steps + 1), what)
    if parted:  # the replay after a rollback restarts from the checkpoint (records keep
        #         the last record of a step: the replay's)
        back = [e.get("to_step") for e in faulted.parsed.events.get(0, [])
                if e.get("event") == "rollback"]
        if back and isinstance(back[0], int):
            out += _accumulating(inv, clean, faulted, back[0] + 1, "rolled-back run")
    out += parted
    out += _same_final_shards(inv, clean, faulted, clean.steps, what)
    return out

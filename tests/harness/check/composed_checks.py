"""The composed run of exercise 1 (`--tensor-parallel T` on N ranks, ZeRO-1 over each
data-parallel group of N/T ranks) held to the lesson's invariants a-d, as the contract
defines its numbers:

- `check_composed_counts`: `summary.json`'s and the manifests' `n_params` is the model's P as
  a one-rank run counts it; each rank's `optimizer_bytes` is 12·ceil(P_local / (N/T)), P_local
  being the rank's own parameters (its heads' slices and the rest of the model whole);
- `check_composed_norms`: the loss falls as the invariant (a) says, and the ranks of each
  data-parallel group (ranks j, j+T, ...) log exactly the same `param_norm` (of the rank's own
  parameters) at every step (b);
- `check_composed_state`: each rank's Adam moments live in storages that shrink with the
  data-parallel size: the T x (N/T) run's against the T-rank run's (c, where the state
  lives). Byte-exact resume (d) is the exercise's resumed run.
"""

from __future__ import annotations

from tests.harness.check.checks import (
    Run,
    _relabel,
    ceil_div,
    check_monotonic_loss,
)
from tests.harness.check.state_checks import (
    CHARGED,
    SHRINK_SLACK,
    WHOLE_HINT,
    held,
    state_by_rank,
)
from tests.harness.check.tp_checks import (
    INV,
    N_EMBD,
    N_LAYER,
    check_group_norms,
    not_implemented,
)
from tests.harness.observe.violations import Violation

# What a rank of a group holds 1/T of, per block: the q, k, v weights and biases (3C x C, 3C)
# and the output projection's weight (C x C); its bias and every other parameter are whole.
SPLIT_PER_BLOCK = 3 * N_EMBD * N_EMBD + 3 * N_EMBD + N_EMBD * N_EMBD


def local_params(P: int, t: int) -> int:
    """P_local: the parameters a rank of a tensor-parallel group of T holds."""
    return P - N_LAYER * SPLIT_PER_BLOCK * (t - 1) // t


def check_composed_counts(tp: Run, single: Run, t: int) -> list[Violation]:
    """n_params is the one-rank P; optimizer_bytes is 12·ceil(P_local / (N/T)) per rank."""
    out = not_implemented(tp, t)
    P = single.parsed.n_params
    if out or not P:
        return out
    if tp.parsed.n_params is not None and tp.parsed.n_params != P:
        out.append(Violation(INV, None, None, f"summary.json n_params = {P:,} (the model's "
                             "P, as the one-rank run counts it)", tp.parsed.n_params,
                             "n_params counts the whole model, not a rank's share of the "
                             "heads: the same number whatever --tensor-parallel is"))
    for _, ckpt in sorted(tp.parsed.checkpoints.items()):  # the parser's manifests
        if not isinstance(ckpt.manifest, dict):
            continue  # the resume checks read the manifests' form
        n = ckpt.manifest.get("n_params")
        if n != P:
            out.append(Violation(INV, None, None, f"{ckpt.path.name}/manifest.json "
                                 f"n_params = {P:,}", n, "n_params counts the whole model"))
            break
    dp = tp.world_size // t
    seen = {r: n for r, p in (tp.observed.trainers().items() if tp.observed else [])
            if (n := p.model_elements()) is not None}
    for rank, recs in sorted(tp.parsed.records.items()):
        # P_local as the rank holds it: the elements its backward differentiates, where the
        # observer saw them (a bias kept on one rank of the group only is that rank's), else
        # the lesson's layout (the heads' slices, the rest whole on every rank)
        own = [("the lesson's layout", local_params(P, t))]
        if seen.get(rank) not in (None, own[0][1]):
            own.insert(0, ("as its backward differentiates them", seen[rank]))
        wants = {12 * ceil_div(n, dp) for _, n in own}
        bad = next(((s, r["optimizer_bytes"]) for s, r in sorted(recs.items())
                    if r.get("optimizer_bytes") not in wants), None)
        if bad is not None:
            said = " or ".join(f"12·ceil({n:,} / {dp}) = {12 * ceil_div(n, dp):,} ({how})"
                               for how, n in own)
            out.append(Violation(INV, rank, bad[0], f"optimizer_bytes = 12·ceil(P_local / "
                                 f"(N/T)) = {said}", bad[1],
                                 "P_local is the rank's own parameters (its heads' slices, "
                                 "the rest whole), sharded over its data-parallel group of "
                                 f"{dp}"))
    return out


def check_composed_norms(tp: Run, t: int) -> list[Violation]:
    """The loss falls (a); the ranks of each data-parallel group hold the same parameters
    (b): the same param_norm at every step."""
    out = not_implemented(tp, t)
    if out:
        return out
    return _relabel(INV, check_monotonic_loss(tp)) + check_group_norms(tp, t)


def check_composed_state(tp: Run, composed: Run, t: int) -> list[Violation]:
    """Each rank's exp_avg and exp_avg_sq in the T x (N/T) run live in storages 1/(N/T) of
    the T-rank run's (ZeRO-1 over the data-parallel group)."""
    out = not_implemented(composed, t)
    if out or tp.observed is None or composed.observed is None:
        return out
    dp = composed.world_size // t
    base_states, states = state_by_rank(tp), state_by_rank(composed)
    for name in CHARGED:
        bases = [h.total for s in base_states.values() if (h := held(s, name)) is not None]
        if not bases or dp < 2:
            continue
        base = max(bases)
        for rank, state in sorted(states.items()):
            h = held(state, name)
            if h is not None and h.total * dp > SHRINK_SLACK * base:
                out.append(Violation(INV, rank, None, f"{name} in storages of ~"
                                     f"{ceil_div(base, dp):,} elements (T = {t} alone: "
                                     f"{base:,}; data-parallel size {dp})", f"{h.total:,}",
                                     f"{name} is held in a storage of {h.storages[0]:,} "
                                     f"elements on rank {rank}: ZeRO-1 over the data-parallel "
                                     f"group keeps ceil(P_local/{dp}): {WHOLE_HINT}"))
                break
    return out


def told_by_the_groups(tp: Run, t: int, found: list[Violation], what: str
                       ) -> list[Violation]:
    """`found` (a resume's or a rollback's violations on the composed run), or one line
    saying it was not checked where the run's data-parallel groups already hold different
    parameters: that mistake is told once, by check_composed_norms, not again as a stale
    checkpoint or a failed rollback."""
    if not found or not check_group_norms(tp, t):
        return found
    return [Violation(INV, None, None, what, "not checked",
                      f"not checked: the {tp.name} run's data-parallel groups already hold "
                      "different parameters (the composed run's norms say so)",
                      kind="not_checked")]


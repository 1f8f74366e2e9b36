"""The pictures of the lesson's exercises, beside the invariants' (pictures.py), with the same
three parts: `facts` (small JSON from the runs a failed test read), `as_text`, `draw`.

- "heads" (tensor_parallel): which rows or columns of each attention weight every rank
  holds, as slices of the one-rank run's initial weights: a rank that keeps every head shows
  no slice, two ranks that took the same heads overlap;
- "reductions" (accumulation): the gradient elements each of the first steps reduces, in the
  one-batch run and with M micro-batches (M reductions show M times the bar), and the norm of
  step 1's gradient as it enters each reduction (summed, not averaged, shows M times it).
"""

from __future__ import annotations

from typing import Any

from tests.harness.check.exercise_checks import reductions_seen
from tests.harness.check.tp_checks import N_EMBD, heads_held
from tests.harness.report.escape import mathtext_safe
from tests.harness.run.result import Run
from tests.harness.run.runs import MICRO, MICRO_BATCHES, TP

KINDS = {"tensor_parallel": "heads", "accumulation": "reductions"}


def _spans(ix: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2, 5"."""
    out: list[list[int]] = []
    for j in sorted(ix):
        if out and out[-1][1] == j - 1:
            out[-1][1] = j
        else:
            out.append([j, j])
    return ", ".join(f"{a}-{b}" if a != b else f"{a}" for a, b in out)


def _heads(runs: list[Run]) -> dict[str, Any] | None:
    single = next((r for r in runs if r.world_size == 1), None)
    tp = next((r for r in runs if r.world_size > 1), None)
    found = None if tp is None or single is None else heads_held(tp, single)
    if tp is None or found is None:
        return None
    full, held = found
    sliced = sorted({i for h in held.values() for i in h})
    if not sliced:  # no rank holds a slice: the attention's shapes (q/k/v, output) show
        sliced = [i for i, f in enumerate(full)  # each rank holding none of them
                  if f["shape"] in ([3 * N_EMBD, N_EMBD], [N_EMBD, N_EMBD])]
    return {"kind": "heads", "run": tp.name, "t": TP,
            "weights": {str(i): {"shape": full[i]["shape"],
                                 "how": next((h[i][0] for h in held.values() if i in h),
                                             "rows")} for i in sliced},
            "ranks": {str(r): {str(i): sorted(ix) for i, (_, ix) in h.items()}
                      for r, h in held.items()}}


def _reductions(runs: list[Run]) -> dict[str, Any] | None:
    micro = next((r for r in runs if r.name.startswith(MICRO.name)), None)
    one = next((r for r in runs if r is not micro and r.world_size > 1), None)
    if micro is None or one is None:
        return None
    seen = {"one batch": reductions_seen(one, 1),
            f"{MICRO_BATCHES} micro-batches": reductions_seen(micro, MICRO_BATCHES)}
    if any(v is None or not v[0] for v in seen.values()):
        return None
    return {"kind": "reductions", "m": MICRO_BATCHES,
            "runs": {k: {"reduced": v[0], "norms": v[1]} for k, v in seen.items() if v}}


def facts(invariant: str, runs: list[Run]) -> dict[str, Any] | None:
    """What the picture of an exercise's failure shows; None where it would be empty."""
    kind = KINDS.get(invariant)
    return None if kind is None or not runs else \
        _heads(runs) if kind == "heads" else _reductions(runs)


def as_text(f: dict[str, Any]) -> list[str]:
    """The facts as aligned rows."""
    lines: list[str] = []
    if f["kind"] == "heads":
        lines.append(f"slices of the one-rank run's attention weights each rank holds "
                     f"({f['run']} run, --tensor-parallel {f['t']}):")
        for r, held in f["ranks"].items():
            for i, w in f["weights"].items():
                rows, cols = w["shape"]
                ix = held.get(i)
                of = rows if w["how"] == "rows" else cols
                what = f"{w['how']} {_spans(ix)} ({len(ix)} of {of})" if ix else \
                    "no slice: the whole weight, or none of it"
                lines.append(f"  rank {r}  weight {i} ({rows}x{cols}): {what}")
    else:
        names = list(f["runs"])
        lines.append("step  " + "  ".join(f"{n + ': reduced':>32}" for n in names))
        for s in range(max(len(v["reduced"]) for v in f["runs"].values())):
            lines.append(f"{s + 1:>4}  " + "  ".join(
                f"{v['reduced'][s]:>32,.0f}" if s < len(v["reduced"]) else f"{'-':>32}"
                for v in f["runs"].values()))
        lines.append("step 1's gradient norm as it enters each reduction (rank 0):")
        for n, v in f["runs"].items():
            lines.append(f"  {n:<18} " + "  ".join(f"{x:.6g}" for x in v["norms"]))
    return lines


def draw(f: dict[str, Any], axes: Any) -> None:
    """Draw the facts on two matplotlib axes (every text drawn as typed, never as mathtext:
    escape.mathtext_safe)."""
    if f["kind"] == "heads":
        _draw_heads(f, axes)
    else:
        _draw_reductions(f, axes)


def _draw_heads(f: dict[str, Any], axes: Any) -> None:
    """Per rank, a strip of each sliced weight's rows (or columns): where it holds them, and
    in red where another rank holds them too."""
    import numpy as np

    ax, note = axes
    note.axis("off")
    note.text(0, 0.5, mathtext_safe("\n".join(as_text(f)[:24]), 70, lines=True),
              family="monospace", fontsize=6, va="center")
    ranks = list(f["ranks"])
    widths = {i: w["shape"][0 if w["how"] == "rows" else 1] for i, w in f["weights"].items()}
    grid = np.zeros((len(ranks), sum(widths.values()) or 1))
    left = 0
    for i, n in widths.items():
        count = np.zeros(n)
        for held in f["ranks"].values():
            for j in held.get(i, []):
                count[j] += 1
        for k, r in enumerate(ranks):
            for j in f["ranks"][r].get(i, []):
                grid[k, left + j] = 2 if count[j] > 1 else 1
        ax.axvline(left - 0.5, color="black", lw=0.8)
        ax.text(left + n / 2, -0.7, mathtext_safe(f"weight {i}"), ha="center", fontsize=7)
        left += n
    from matplotlib.colors import ListedColormap

    ax.imshow(grid, aspect="auto", interpolation="nearest", vmin=0, vmax=2,
              cmap=ListedColormap(["#ecf0f1", "#27ae60", "#c0392b"]))
    ax.set_yticks(range(len(ranks)), [mathtext_safe(f"rank {r}") for r in ranks])
    ax.set_xlabel("rows (or columns) of the one-rank weights: green held, red held twice")
    ax.set_title(f"each rank's share of the attention (1/{f['t']} each, disjoint)", fontsize=9)


def _draw_reductions(f: dict[str, Any], axes: Any) -> None:
    import numpy as np

    left, right = axes
    names = list(f["runs"])
    steps = max(len(v["reduced"]) for v in f["runs"].values())
    x = np.arange(1, steps + 1)
    for k, n in enumerate(names):
        ys = f["runs"][n]["reduced"] + [0] * (steps - len(f["runs"][n]["reduced"]))
        left.bar(x + (k - 0.5) * 0.4, ys, width=0.4, label=mathtext_safe(n))
    left.set_xticks(x)
    left.set_xlabel("step")
    left.set_ylabel("gradient elements reduced (rank 0)")
    left.set_title("one reduction per step, not one per micro-batch", fontsize=9)
    left.legend(fontsize=7)
    for k, n in enumerate(names):
        norms = f["runs"][n]["norms"]
        right.bar(np.arange(1, len(norms) + 1) + (k - 0.5) * 0.4, norms, width=0.4,
                  label=mathtext_safe(n))
    right.set_xlabel("reduction of step 1")
    right.set_ylabel("norm of the gradient put in")
    right.set_title(f"step 1's gradient: equal, not {f['m']}x (summed) or 1/{f['m']}",
                    fontsize=9)
    right.legend(fontsize=7)

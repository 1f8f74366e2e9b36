"""A picture for a failed invariant, where a picture says it faster, and the same facts as
text (Gradescope shows text, not images).

`facts(invariant, runs, violations)` gathers, from the runs the failed test read, the few
numbers the picture needs (small JSON: it travels in the grade file); `as_text(facts)` gives
them as aligned rows; `render(facts, path)` draws them (matplotlib). Kinds:

- "timeline" (no_deadlock, communication): each rank's calls around the first problem (the
  blocked ones marked), and the call sites moving the most data per step against the
  2(N-1)/N·P line;
- "curves" (monotonic_loss, single_process_parity): loss and gradient norm per step of every
  rank of the run, against the single-process run of the same session;
- "memory" (zero1_memory): measured persistent bytes and logged optimizer bytes per rank over
  N, against 12P/N;
- "restart" (byte_exact_resume, rollback): the original run and the resumed or rolled-back
  one side by side, where they part;
- the exercises' "heads" and "reductions" (exercise_pictures.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.harness.check.checks import LATE_GUARD, Run
from tests.harness.check.observed_checks import params_of, persistent_bytes, traffic_per_step
from tests.harness.check.state_checks import CHARGED, located
from tests.harness.observe.violations import Violation
from tests.harness.report import exercise_pictures
from tests.harness.report.escape import mathtext_safe

KINDS = {"no_deadlock": "timeline", "communication": "timeline", "monotonic_loss": "curves",
         "single_process_parity": "curves", "zero1_memory": "memory",
         "byte_exact_resume": "restart", "rollback": "restart", "rank_killed": "restart",
         **exercise_pictures.KINDS}
LAST_CALLS = 4  # per rank, before the problem


def _logged(run: Run) -> bool:
    """Whether any rank of the run logged a step (a run that crashed first logged none)."""
    return any(run.parsed.records.values())


def _series(run: Run, rank: int, key: str) -> list[float | None]:
    recs = run.parsed.records.get(rank, {})
    return [recs.get(s, {}).get(key) for s in range(1, run.steps + 1)]


def _timeline(run: Run) -> dict[str, Any] | None:
    obs = run.observed
    ranks = obs.ranks() if obs else {}
    if not any(p.calls for p in ranks.values()):
        return None  # no rank made a call: an empty chart; the failure's words say why
    stamps = [c.t0 for p in ranks.values() for c in p.calls]
    origin = min(stamps)  # there is a call: checked above
    stop = run.outcome.ended_ns if run.outcome.deadlock_s is not None or \
        run.outcome.timed_out else None
    rows: dict[str, list[list[Any]]] = {}
    for r, p in sorted(ranks.items()):
        calls = p.calls
        if stop is None and len(p.backwards) >= 3:  # a whole training step: the second one
            calls = [c for c in calls if p.backwards[1] <= c.t0 < p.backwards[2]]
        rows[str(r)] = [[c.op + (f"({c.peer})" if c.peer and c.p2p else ""), c.site,
                         (c.t0 - origin) / 1e6,
                         None if c.t1 is None else (c.t1 - origin) / 1e6, c.numel_in]
                        for c in calls[-LAST_CALLS:]]
    n, P = run.world_size, params_of(run) or 0
    sites = traffic_per_step(run).get(0, {})  # per step taken (a hung run took fewer)
    top = dict(sorted(sites.items(), key=lambda kv: -kv[1])[:5])
    return {"kind": "timeline", "run": run.name, "ranks": rows,
            "stop_ms": None if stop is None else (stop - origin) / 1e6,
            "blocked": run.outcome.blocked, "sites": top,
            "bound": 2 * (n - 1) / n * P if n > 1 else 0}


def _curves(runs: list[Run]) -> dict[str, Any] | None:
    if not _logged(runs[0]):
        return None  # nothing logged to draw: the failure's words say why
    out: dict[str, Any] = {"kind": "curves", "runs": {}}
    for run in runs:
        out["runs"][f"{run.name} ({run.world_size} rank{'s' * (run.world_size > 1)})"] = {
            str(r): {k: _series(run, r, k) for k in ("loss", "grad_norm")}
            for r in range(run.world_size)}
    return out


def _memory(runs: list[Run]) -> dict[str, Any] | None:
    by_n = {r.world_size: r for r in runs}
    P = max((params_of(r) or 0 for r in runs), default=0)
    logged = {str(n): (r.parsed.records.get(0, {}).get(r.steps) or {}).get("optimizer_bytes")
              for n, r in sorted(by_n.items())}
    measured = {str(n): persistent_bytes(r) for n, r in sorted(by_n.items())}
    # The storages each moment was found in (the largest total over ranks), per N.
    state = {str(n): {name: max(ranks[name] for ranks in found.values() if name in ranks)
                      for name in CHARGED if any(name in ranks for ranks in found.values())}
             for n, r in sorted(by_n.items()) if (found := located(r))}
    if not any(logged.values()) and not any(v is not None for v in measured.values()):
        return None
    return {"kind": "memory", "P": P, "logged": logged,
            "measured": {k: v for k, v in measured.items() if v is not None},
            "state": {k: v for k, v in state.items() if v}}


def _restart(runs: list[Run], violations: list[Violation]) -> dict[str, Any] | None:
    original, other = runs[0], runs[-1]
    if not original.parsed.records.get(0) or not other.parsed.records.get(0):
        return None  # nothing logged to compare: the failure's words say why
    def kept(v: Violation) -> bool:  # a guard that fired late: where it kept a bad update
        return str(v.expected).startswith(LATE_GUARD)
    parted = min((v.step for v in violations if v.step and not kept(v)), default=None)
    late = min((v.step for v in violations if v.step and kept(v)), default=None)
    return {"kind": "restart", "parted": parted, "kept": late,
            "runs": {r.name: {k: _series(r, 0, k) for k in ("loss", "grad_norm")}
                     for r in (original, other)}}


def facts(invariant: str, runs: list[Run], violations: list[Violation]
          ) -> dict[str, Any] | None:
    """What the picture of `invariant`'s failure shows, from the runs the test read (the
    single-process run among them for the curves); None where no picture helps."""
    kind = KINDS.get(invariant)
    if kind is None or not runs:
        return None
    if kind == "timeline":
        return _timeline(runs[0])
    if kind == "curves":
        return _curves(runs)
    if kind == "memory":
        return _memory(runs)
    if invariant in exercise_pictures.KINDS:  # its resume and rollback: as a plain run's
        return exercise_pictures.facts(invariant, runs) or (
            _restart(runs, violations) if len(runs) >= 2 and all(
                r.world_size > 1 for r in runs) else None)
    return _restart(runs, violations) if len(runs) >= 2 else None


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.6g}"


def as_text(f: dict[str, Any], width: int = 100) -> str:
    """The facts as aligned rows (what a results page without images can show)."""
    lines: list[str] = []
    if f["kind"] in exercise_pictures.KINDS.values():
        lines = exercise_pictures.as_text(f)
    elif f["kind"] == "timeline":
        lines.append(f"each rank's last calls ({f['run']} run; ms from its first call; "
                     "'...' = still inside it):")
        for r, calls in f["ranks"].items():
            for op, site, t0, t1, n in calls:
                end = "..." if t1 is None else f"{t1:9.1f}"
                lines.append(f"  rank {r}  {op:<22} {n:>9,} el  {t0:9.1f} {end:>9}  {site}")
        if f["sites"]:
            lines.append(f"elements sent per step (bound 2(N-1)/N·P = {f['bound']:,.0f}):")
            lines += [f"  {v:>10,.0f}  {k}" for k, v in f["sites"].items()]
    elif f["kind"] == "curves":
        names = list(f["runs"])
        lines.append("step  " + "  ".join(f"{n[:24]:>24}" for n in names) + "   (loss, rank 0)")
        steps = len(next(iter(f["runs"][names[0]].values()))["loss"])
        for s in range(steps):
            lines.append(f"{s + 1:>4}  " + "  ".join(
                f"{_fmt(f['runs'][n]['0']['loss'][s]):>24}" for n in names))
    elif f["kind"] == "memory":
        lines.append(f"N   measured persistent bytes/rank   logged optimizer_bytes   "
                     f"12P/N (P = {f['P']:,})")
        for n in sorted(set(f["logged"]) | set(f["measured"]), key=int):
            lines.append(f"{n:<3} {f['measured'].get(n) or '-':>30}   "
                         f"{f['logged'].get(n) or '-':>22}   {12 * f['P'] // int(n):>9,}")
        if f.get("state"):
            lines.append("")
            lines.append("N   storage holding exp_avg   holding exp_avg_sq   ceil(P/N) (elements)")
            for n, held in sorted(f["state"].items(), key=lambda kv: int(kv[0])):
                lines.append(f"{n:<3} {held.get('exp_avg') or '-':>23,}   "
                             f"{held.get('exp_avg_sq') or '-':>18,}   "
                             f"{-(-f['P'] // int(n)):>9,}")
    else:
        a, b = list(f["runs"])
        lines.append(f"step  {'loss ' + a[:9]:>14}  {'loss ' + b[:9]:>14}  "
                     f"{'grad ' + a[:9]:>14}  {'grad ' + b[:9]:>14}")
        ra, rb = f["runs"][a], f["runs"][b]
        first = max((f["parted"] or f.get("kept") or 1) - 2, 0)
        for s in range(first, min(first + 6, len(ra["loss"]))):
            mark = ("  <- parts" if s + 1 == f["parted"] else
                    "  <- bad update kept" if s + 1 == f.get("kept") else "")
            lines.append(f"{s + 1:>4}  {_fmt(ra['loss'][s]):>14}  {_fmt(rb['loss'][s]):>14}  "
                         f"{_fmt(ra['grad_norm'][s]):>14}  {_fmt(rb['grad_norm'][s]):>14}{mark}")
    return "\n".join(ln[:width] for ln in lines[:40])


def render(f: dict[str, Any], path: Path, title: str) -> Path:
    """Draw the facts into a PNG at `path`, under `title` (drawn as typed: a student's name
    or a run's words in it are never read as mathtext). Every text a run chose (call sites,
    ops, what it logged) is drawn so too (escape.mathtext_safe)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    try:
        draw = {"timeline": _draw_timeline, "curves": _draw_curves, "memory": _draw_memory,
                "restart": _draw_restart,
                **{k: exercise_pictures.draw for k in exercise_pictures.KINDS.values()}
                }[f["kind"]]
        draw(f, axes)
        fig.suptitle(mathtext_safe(title), fontsize=10)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=100)
    finally:  # a picture that fails leaves no figure open: a class draws many
        plt.close(fig)
    return path


def _draw_timeline(f: dict[str, Any], axes: Any) -> None:
    ax, bars = axes
    spans = [(t0, t1) for calls in f["ranks"].values() for _, _, t0, t1, _ in calls]
    end = f["stop_ms"] or max((t1 or t0 for t0, t1 in spans), default=1)
    wide = 0.08 * (end - min((t0 for t0, _ in spans), default=0))  # room for a label
    for r, calls in f["ranks"].items():
        for op, site, t0, t1, _ in calls:
            blocked = t1 is None
            ax.barh(int(r), max((end if blocked else t1) - t0, 0.05), left=t0, height=0.6,
                    color="#c0392b" if blocked else "#2980b9", edgecolor="black", lw=0.3)
            if blocked or (not f["stop_ms"] and t1 - t0 >= wide):  # what each rank waits in
                ax.text(t0, int(r) + (0 if blocked else 0.42),  # the run's words, as typed
                        mathtext_safe(f"{op} at {site}" if blocked else op),
                        fontsize=7 if blocked else 5,
                        color="white" if blocked else "black", va="center")
    if f["stop_ms"] is not None:
        ax.axvline(f["stop_ms"], color="black", ls="--", lw=1)
        ax.text(f["stop_ms"], len(f["ranks"]) - 0.45, "stopped by the suite ", fontsize=7,
                ha="right")
    ax.set_yticks([int(r) for r in f["ranks"]],
                  [mathtext_safe(f"rank {r}") for r in f["ranks"]])
    ax.invert_yaxis()
    ax.set_xlabel("ms since the run's first call")
    ax.set_title("each rank's last calls (red: still inside it when stopped)"
                 if f["stop_ms"] else "each rank's calls in one training step", fontsize=9)
    total = sum(f["sites"].values())
    names = ["all call sites"] + ["\n".join(mathtext_safe(part) for part in k.split(" at ", 1))
                                  for k in f["sites"]]  # "op\nfile:line", the run's names
    values = [total, *f["sites"].values()]
    over = f["bound"] and total > f["bound"] * 1.02
    bars.barh(names[::-1], values[::-1],
              color=["#7f8c8d"] * len(f["sites"]) + ["#c0392b" if over else "#27ae60"])
    if f["bound"]:
        bars.axvline(f["bound"], color="#c0392b", ls="--", label="2(N-1)/N·P")
        bars.legend(fontsize=7)
    bars.tick_params(axis="y", labelsize=6)
    bars.set_xlabel("elements sent per step taken (rank 0)")
    bars.set_title("traffic per call site", fontsize=9)


def _draw_curves(f: dict[str, Any], axes: Any) -> None:
    for ax, key in zip(axes, ("loss", "grad_norm"), strict=True):
        for i, (name, ranks) in enumerate(f["runs"].items()):
            for r, series in ranks.items():
                ys = series[key]
                ax.plot(range(1, len(ys) + 1), [float("nan") if y is None else y for y in ys],
                        ls="-" if i == 0 else "--", lw=1 if i == 0 else 2, marker=".",
                        label=mathtext_safe(f"{name}, rank {r}" if len(ranks) > 1 else name))
        ax.set_xlabel("step")
        ax.set_title(key, fontsize=9)
        ax.legend(fontsize=6)


def _draw_memory(f: dict[str, Any], axes: Any) -> None:
    """What each rank stops holding as N grows, against what ZeRO-1 sheds: 12P(1 - 1/N)."""
    ax, note = axes
    note.axis("off")
    note.text(0, 0.5, mathtext_safe(as_text(f), None, lines=True), family="monospace",
              fontsize=7, va="center")  # what the run logged, drawn as typed
    if f.get("state"):
        _draw_state(f, ax)
        return
    P = f["P"]
    ns = sorted({int(n) for n in [*f["logged"], *f["measured"]]})
    ax.plot(ns, [12 * P * (1 - 1 / n) for n in ns], "k--", lw=2.5,
            label="ZeRO-1 sheds 12P(1 - 1/N)")
    for key, style in (("logged", "o-"), ("measured", "s-")):
        values = {int(n): v for n, v in f[key].items() if v}
        if 1 in values:
            pts = sorted((n, values[1] - v) for n, v in values.items())
            ax.plot(*zip(*pts, strict=True), style,
                    label=f"{key}: bytes per rank below N = 1")
    ax.set_xlabel("N (ranks)")
    ax.set_xticks(ns)
    ax.set_ylabel("bytes")
    ax.set_title("what each rank stops holding as N grows", fontsize=9)
    ax.legend(fontsize=7)


def _draw_state(f: dict[str, Any], ax: Any) -> None:
    """The storage each moment lives in, per N, against its N = 1 size over N."""
    state = {int(n): held for n, held in f["state"].items()}
    ns = sorted(state)
    for name, style in (("exp_avg", "o-"), ("exp_avg_sq", "s--")):
        pts = [(n, state[n][name]) for n in ns if name in state[n]]
        if pts:
            ax.plot(*zip(*pts, strict=True), style, label=f"storage holding {name}")
    base = state.get(1, {}).get("exp_avg") or state.get(1, {}).get("exp_avg_sq")
    if base:
        ax.plot(ns, [base / n for n in ns], "k:", lw=2.5, label="ZeRO-1: its N = 1 size / N")
    ax.set_xlabel("N (ranks)")
    ax.set_xticks(ns)
    ax.set_ylabel("elements (float32)")
    ax.set_title("where Adam's moments live (largest rank)", fontsize=9)
    ax.legend(fontsize=7)


def _draw_restart(f: dict[str, Any], axes: Any) -> None:
    for ax, key in zip(axes, ("loss", "grad_norm"), strict=True):
        for i, (name, series) in enumerate(f["runs"].items()):
            ys = series[key]
            ax.plot(range(1, len(ys) + 1), [float("nan") if y is None else y for y in ys],
                    ls="-" if i == 0 else "--", marker="." if i == 0 else "x",
                    label=mathtext_safe(name))
        if f["parted"]:
            ax.axvline(f["parted"], color="#c0392b", ls=":", label=f"parts at step {f['parted']}")
        if f.get("kept"):
            ax.axvline(f["kept"], color="#e67e22", ls="--",
                       label=f"bad update kept at step {f['kept']} (replayed after)")
        ax.set_xlabel("step")
        ax.set_title(key, fontsize=9)
        ax.legend(fontsize=7)

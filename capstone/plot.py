"""`python -m capstone.plot RUN_DIR [--out PNG]`: one picture of a run's metrics.

Four panels: the loss curve, the gradient norm, each rank's step time, and each rank's
optimizer bytes against the 12*ceil(P/N) line of ZeRO-1. Rollback events are marked on every
panel. Needs matplotlib: `pip install -c constraints.txt -e ".[plot]"`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from capstone.metrics import Records, read_run
from capstone.zero import ShardLayout


def load_run(run_dir: Path) -> tuple[Records, list[dict[str, Any]], dict[str, Any]]:
    """(records[rank][step] with the last record counting, rollback events, summary)."""
    summary = json.loads((run_dir / "summary.json").read_text())
    return (*read_run(run_dir, summary["world_size"]), summary)


def plot_run(run_dir: Path, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    records, events, summary = load_run(run_dir)
    n, p = summary["world_size"], summary["n_params"]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), constrained_layout=True)
    (ax_loss, ax_grad), (ax_time, ax_mem) = axes
    r0 = records[0]
    steps = sorted(s for s in r0 if s >= 1)
    ax_loss.plot(steps, [r0[s]["loss"] for s in steps], "o-", ms=3, color="tab:blue")
    ax_loss.set(title="loss (global mean, rank 0's log)", xlabel="step", ylabel="cross-entropy")
    ax_grad.plot(steps, [r0[s]["grad_norm"] for s in steps], "o-", ms=3, color="tab:orange")
    ax_grad.set(title="gradient norm (averaged global gradient)", xlabel="step",
                ylabel="L2 norm")
    for rank in sorted(records):
        rs = sorted(s for s in records[rank] if s >= 1)
        ax_time.plot(rs, [records[rank][s]["step_time_s"] * 1e3 for s in rs], ".-",
                     label=f"rank {rank}")
        ms = sorted(records[rank])
        ax_mem.plot(ms, [records[rank][s]["optimizer_bytes"] / 1024 for s in ms], ".-",
                    label=f"rank {rank}")
    ax_time.set(title="step time per rank", xlabel="step", ylabel="ms")
    ax_time.legend(fontsize=8, ncols=2)
    formula = ShardLayout(p, n).optimizer_bytes_per_rank / 1024
    full = 12 * p / 1024
    ax_mem.axhline(formula, color="black", ls="--", lw=1,
                   label=f"ZeRO-1: 12·ceil(P/N) = {formula:.1f} KiB")
    ax_mem.axhline(full, color="grey", ls=":", lw=1, label=f"unsharded: 12P = {full:.0f} KiB")
    ax_mem.set(title=f"optimizer bytes per rank (P = {p}, N = {n})", xlabel="step",
               ylabel="KiB", ylim=(0, full * 1.15))
    ax_mem.legend(fontsize=8)
    for ax in axes.flat:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    for ev in events:
        for ax in axes.flat:
            ax.axvline(ev["step"], color="red", ls="--", lw=1, alpha=0.7)
        label = f"rollback ({ev['reason']}) at step {ev['step']}\nto step {ev['to_step']} "
        ax_loss.annotate(label,
                         (ev["step"], 0.97), xycoords=("data", "axes fraction"), color="red",
                         fontsize=8, ha="right", va="top")
    fig.suptitle(f"{run_dir}: {n} ranks, {summary['steps']} steps", fontsize=10)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m capstone.plot",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path, help="a run directory (metrics/ and summary.json)")
    ap.add_argument("--out", type=Path, default=None,
                    help="PNG path (default RUN_DIR/metrics.png)")
    args = ap.parse_args(argv)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("capstone.plot: matplotlib is missing: "
              "pip install -c constraints.txt -e '.[plot]'", file=sys.stderr)
        return 2
    if not (args.run_dir / "summary.json").is_file():
        print(f"capstone.plot: {args.run_dir} holds no summary.json: pass the directory of a "
              "finished run (the demo's is runs/<timestamp>/train)", file=sys.stderr)
        return 2
    out = plot_run(args.run_dir, args.out or args.run_dir / "metrics.png")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

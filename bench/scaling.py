"""How cost grows: step time and optimizer bytes per rank for world size 1, 2, 4, 8 and embed
width 32, 128, 512 (2 blocks), the reference against PyTorch's own stack (DDP +
ZeroRedundancyOptimizer), measured side by side in this script.

Both sides train the same MiniGPT on the same global batch of 16 rows (B = 16/N per rank)
for --steps steps without checkpoints; both launch their ranks with fork, so start-up cost
is alike and the per-step figures compare the training itself. Step time is the median over
ranks and steps 2..S (step 1 is warm-up).

    python bench/scaling.py [--steps 8] [--json FILE] [--png FILE]   (default bench/results/)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from record import Figure, save

from capstone.metrics import read_run

ROOT = Path(__file__).resolve().parents[1]
WORLD_SIZES = (1, 2, 4, 8)
WIDTHS = (32, 128, 512)
GLOBAL_ROWS = 16


def ours(n: int, embd: int, steps: int, out: Path) -> dict[str, Any]:
    subprocess.run([sys.executable, "-m", "capstone", "--out", str(out), "--world-size", str(n),
                    "--batch-size", str(GLOBAL_ROWS // n), "--steps", str(steps),
                    "--checkpoint-every", "0", "--n-embd", str(embd), "--pg-timeout", "300"],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    recs, _ = read_run(out, n)
    times = [r["step_time_s"] for rank in recs.values() for s, r in rank.items() if s >= 2]
    return {"step_ms": statistics.median(times) * 1e3,
            "bytes": [recs[rank][steps]["optimizer_bytes"] for rank in range(n)],
            "n_params": json.loads((out / "summary.json").read_text())["n_params"]}


def native(n: int, embd: int, steps: int, out: Path) -> dict[str, Any]:
    subprocess.run([sys.executable, str(ROOT / "bench/native_stack.py"), "--out", str(out),
                    "--world-size", str(n), "--batch-size", str(GLOBAL_ROWS // n), "--steps",
                    str(steps), "--embd", str(embd), "--checkpoint-every", "0", "--start",
                    "fork"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    recs = [json.loads((out / f"rank-{r}.json").read_text()) for r in range(n)]
    times = [x["step_time_s"] for rank in recs for x in rank if x["step"] >= 2]
    return {"step_ms": statistics.median(times) * 1e3,
            "bytes": [rank[-1]["optimizer_bytes"] for rank in recs]}


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    fig, (ax_mem, ax_time) = plt.subplots(1, 2, figsize=(12, 4.8), constrained_layout=True)
    for i, embd in enumerate(WIDTHS):
        pts = [r for r in rows if r["embd"] == embd]
        ns = [r["n"] for r in pts]
        color = f"C{i}"
        full = 12 * pts[0]["n_params"]
        ax_mem.plot(ns, [max(r["ours"]["bytes"]) / full for r in pts], "o-", color=color,
                    label=f"ours, embed {embd} (max = min)")
        lo = [min(r["native"]["bytes"]) / full for r in pts]
        hi = [max(r["native"]["bytes"]) / full for r in pts]
        ax_mem.fill_between(ns, lo, hi, color=color, alpha=0.15)
        ax_mem.plot(ns, hi, "s--", color=color, ms=4,
                    label=f"native, embed {embd} (max; band to min)")
        ax_time.plot(ns, [r["ours"]["step_ms"] / r["native"]["step_ms"] for r in pts], "o-",
                     color=color, label=f"embed {embd}")
    ax_mem.plot(WORLD_SIZES, [1 / n for n in WORLD_SIZES], "k:", label="ideal 1/N")
    ax_mem.set(xscale="log", yscale="log", xticks=WORLD_SIZES, xticklabels=WORLD_SIZES,
               xlabel="world size N", ylabel="optimizer bytes per rank / 12P",
               title="per-rank optimizer memory (ZeRO-1 falls as 1/N)")
    ax_mem.legend(fontsize=7)
    ax_time.axhline(1.0, color="black", lw=0.8)
    ax_time.set(xscale="log", xticks=WORLD_SIZES, xticklabels=WORLD_SIZES, xlabel="world size N",
                ylabel="step time: ours / native", title="step time relative to the native stack")
    ax_time.legend(fontsize=8)
    for ax in (ax_mem, ax_time):
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.grid(alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--json", type=Path, default=ROOT / "bench/results/scaling.json")
    p.add_argument("--png", type=Path, default=ROOT / "bench/results/scaling.png")
    p.add_argument("--replot", type=Path, default=None,
                   help="only redraw the PNG from a JSON this script wrote")
    args = p.parse_args()
    if args.replot:
        plot(json.loads(args.replot.read_text()), args.png)
        return
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as d:
        for embd in WIDTHS:
            for n in WORLD_SIZES:
                tag = f"{embd}-{n}"
                row: dict[str, Any] = {"embd": embd, "n": n,
                       "ours": ours(n, embd, args.steps, Path(d) / f"ours-{tag}"),
                       "native": native(n, embd, args.steps, Path(d) / f"native-{tag}")}
                row["n_params"] = row["ours"]["n_params"]
                rows.append(row)
                print(f"embed {embd:>3} N={n}: done", file=sys.stderr)
    print("| embed | P | N | ours bytes/rank (max) | native bytes/rank (min..max) | "
          "ours step ms | native step ms | ours/native time |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        o, nt = r["ours"], r["native"]
        print(f"| {r['embd']} | {r['n_params']:,} | {r['n']} | {max(o['bytes']):,} | "
              f"{min(nt['bytes']):,}..{max(nt['bytes']):,} | {o['step_ms']:.1f} | "
              f"{nt['step_ms']:.1f} | {o['step_ms'] / nt['step_ms']:.2f}x |")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=2))
    save("scaling", [Figure(
        f"embed {r['embd']}, P = {r['n_params']:,}, N = {r['n']}: ZeRO-1 bytes per rank (max) "
        "against ZeroRedundancyOptimizer's (min..max); step time, ours / native",
        f"{max(r['ours']['bytes']):,} against {min(r['native']['bytes']):,}.."
        f"{max(r['native']['bytes']):,} B; {r['ours']['step_ms'] / r['native']['step_ms']:.2f}x "
        f"({r['ours']['step_ms']:.1f} / {r['native']['step_ms']:.1f} ms, median of steps "
        f"2..{args.steps})") for r in rows])
    try:
        plot(rows, args.png)
        print(f"plot: {args.png}", file=sys.stderr)
    except ImportError:
        print("matplotlib missing: no plot (pip install '.[plot]')", file=sys.stderr)


if __name__ == "__main__":
    main()

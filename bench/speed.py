"""Wall time of the demo against two baselines, measured side by side in this script.

- floor: `python -c "import torch"` (no demo can start faster than its import), and the
  same import ended by os._exit, as the demo ends: the interpreter's teardown after
  `import torch` takes ~0.6 s here, which the demo skips and the plain floor pays;
- native: the same 20 steps on DDP + ZeroRedundancyOptimizer + torch.distributed.checkpoint
  (bench/native_stack.py), launched with spawn as PyTorch's tutorials do, and with fork.

Commands run round-robin (demo, floor, native, ...) so that load on this shared machine
falls on all of them alike; each figure is the median of --repeat runs.

    python bench/speed.py [--repeat 5] [--no-native] [--json bench/results/speed.json]

Targets: the demo <= 1.2x `import torch` (issue 34: the resume's ranks fork from the same
single-threaded launcher as the first run's), <= 0.5x the native stack with spawn.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from record import Figure, save

ROOT = Path(__file__).resolve().parents[1]


def commands(tmp: Path) -> dict[str, list[str]]:
    py = sys.executable
    return {
        "import torch (floor)": [py, "-c", "import torch"],
        "import torch, os._exit": [py, "-c", "import os, torch; os._exit(0)"],
        "python -m capstone (demo)": [py, "-m", "capstone", "demo", "--out", str(tmp / "demo")],
        "native stack, spawn": [py, str(ROOT / "bench/native_stack.py"), "--out",
                                str(tmp / "spawn")],
        "native stack, fork": [py, str(ROOT / "bench/native_stack.py"), "--out",
                               str(tmp / "fork"), "--start", "fork"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--no-native", action="store_true",
                   help="only the demo and its floors (the native stack takes ~10 s a round)")
    args = p.parse_args()
    times: dict[str, list[float]] = {}
    for i in range(args.repeat):
        with tempfile.TemporaryDirectory() as d:
            for name, cmd in commands(Path(d)).items():
                if args.no_native and name.startswith("native"):
                    continue
                t0 = time.perf_counter()
                subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
                times.setdefault(name, []).append(time.perf_counter() - t0)
        print(f"round {i + 1}/{args.repeat} done", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in times.items()}
    demo = med["python -m capstone (demo)"]
    ratios = {
        "demo / import torch (target <= 1.2)": demo / med["import torch (floor)"],
        "demo / import torch ended by os._exit": demo / med["import torch, os._exit"],
    }
    if not args.no_native:
        ratios["demo / native stack, spawn (target <= 0.5)"] = demo / med["native stack, spawn"]
        ratios["demo / native stack, fork"] = demo / med["native stack, fork"]
    print(f"{'command':<30} {'median s':>9}  runs")
    for k, v in med.items():
        print(f"{k:<30} {v:>9.2f}  {', '.join(f'{t:.2f}' for t in times[k])}")
    for k, v in ratios.items():
        print(f"{k:<45} {v:.2f}x")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"median_s": med, "runs_s": times, "ratios": ratios},
                                        indent=2))
    of = f"medians of {args.repeat}, interleaved"
    floor, ended = med["import torch (floor)"], med["import torch, os._exit"]
    figures = [Figure("demo (`python -m capstone`) / `python -c \"import torch\"`",
                      f"{demo / floor:.2f}x ({demo:.2f} / {floor:.2f} s, {of})", "<= 1.2x"),
               Figure("demo / the same import ended by `os._exit` (no teardown, as the demo "
                      "ends)", f"{demo / ended:.2f}x ({demo:.2f} / {ended:.2f} s)")]
    for start, target in (("spawn", "<= 0.5x"), ("fork", "")):
        native = med.get(f"native stack, {start}")
        if native is not None:
            figures.append(Figure(f"demo / the native stack (DDP + ZeroRedundancyOptimizer + "
                                  f"DCP), launched with {start}",
                                  f"{demo / native:.2f}x ({demo:.2f} / {native:.2f} s)", target))
    save("speed", figures)


if __name__ == "__main__":
    main()

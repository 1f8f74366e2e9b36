"""Why capstone.zero writes its reduce-scatter and all-gather as one all-to-all round each.

Times, side by side in the same ranks, gloo's own collectives against the direct versions
in capstone.zero, on the MiniGPT's flat vector (P = 30080 floats), for N ranks forked as
the demo forks them. Calls alternate (theirs, ours, theirs, ...) so that load on a shared
machine falls on both alike; each figure is the median over --repeat blocks of --calls calls.

    python bench/collectives.py [--world-sizes 2 4] [--calls 50] [--repeat 5]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from record import Figure, save

from capstone.launch import run_ranks
from capstone.world import World
from capstone.zero import ShardLayout, all_gather, reduce_scatter_mean

P = 30080


def _per_call_ms(fn: Callable[[], None], calls: int) -> float:
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls * 1e3


def _on_rank(world: World, calls: int, repeat: int) -> dict[str, list[float]]:
    n = world.size
    layout = ShardLayout(P, n)
    flat = torch.randn(layout.padded_size)
    shard = torch.empty(layout.shard_size)
    gathered = torch.empty(layout.padded_size)

    def gloo_reduce_scatter() -> None:
        dist.reduce_scatter_single(shard, flat)
        shard.div_(n)

    cases: dict[str, Callable[[], None]] = {
        "reduce-scatter, gloo": gloo_reduce_scatter,
        "reduce-scatter, direct": lambda: reduce_scatter_mean(shard, flat, n),
        "all-gather, gloo": lambda: dist.all_gather_single(gathered, shard),
        "all-gather, direct": lambda: all_gather(gathered, shard, n),
    }
    for fn in cases.values():  # warm-up: first calls set up connections and buffers
        fn()
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(repeat):
        for name, fn in cases.items():
            times[name].append(_per_call_ms(fn, calls))
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world-sizes", type=int, nargs="+", default=[2, 4])
    p.add_argument("--calls", type=int, default=50)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    print(f"{'N':>2}  {'collective':<24} {'median ms/call':>14}  ratio direct/gloo")
    figures = []
    for n in args.world_sizes:
        with tempfile.TemporaryDirectory() as d:
            per_rank = run_ranks(functools.partial(_on_rank, calls=args.calls,
                                                   repeat=args.repeat), n, Path(d), 60.0)
        # A collective ends when its slowest rank is done: take the slowest rank's time.
        med = {k: max(statistics.median(r[k]) for r in per_rank) for k in per_rank[0]}
        for op in ("reduce-scatter", "all-gather"):
            gloo, direct = med[f"{op}, gloo"], med[f"{op}, direct"]
            print(f"{n:>2}  {op + ', gloo':<24} {gloo:>14.2f}")
            print(f"{n:>2}  {op + ', direct':<24} {direct:>14.2f}  {direct / gloo:.2f}x")
            figures.append(Figure(f"{op}, ours (capstone/zero.py) / gloo's, N = {n}, P = "
                                  "30,080", f"{direct / gloo:.2f}x ({direct:.2f} / {gloo:.2f} "
                                  f"ms per call, medians of {args.repeat})"))
    save("collectives", figures)


if __name__ == "__main__":
    main()

"""Every rank meets the same bug: four `multiprocessing.Process` ranks of the fork context
join the process group, all-reduce once, then each raises the same KeyError at the same line.
multiprocessing prints a "Process ForkProcess-N:" header before each traceback, and the four
interleave on stderr: the cause is still one KeyError, told once for ranks 0-3."""

import argparse
import multiprocessing
import sys

import torch
import torch.distributed as dist


def rank_main(rank: int, n: int, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{out}/.rendezvous", rank=rank,
                            world_size=n)
    total = torch.ones(4)
    dist.all_reduce(total)
    hyper = {"lr": 0.01}
    print(hyper["betas"])  # every rank: KeyError: 'betas'


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--world-size", type=int, default=4)
    a, _ = ap.parse_known_args()
    import os

    os.makedirs(a.out, exist_ok=True)
    ctx = multiprocessing.get_context("fork")
    ranks = [ctx.Process(target=rank_main, args=(r, a.world_size, a.out))
             for r in range(a.world_size)]
    for p in ranks:
        p.start()
    for p in ranks:
        p.join()
    sys.exit(1 if any(p.exitcode for p in ranks) else 0)

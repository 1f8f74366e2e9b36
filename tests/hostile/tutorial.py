"""A correct submission that starts its ranks the way PyTorch's DDP tutorial does: mp.spawn,
MASTER_ADDR=localhost and a fixed MASTER_PORT (12355), env:// rendezvous. Each rank runs the
reference's trainer. Two such runs at once meet on the port (and hang) unless every run has a
network namespace of its own."""

import os
import sys
from collections.abc import Callable

import torch.multiprocessing as mp


def rank_main(rank: int, world_size: int, argv: list[str], port: str = "12355") -> None:
    os.environ.update(MASTER_ADDR="localhost", MASTER_PORT=port, RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    from capstone.cli import main

    code = main(argv)
    if code:
        sys.exit(code)


def spawn(fn: Callable[[int, int, list[str]], None]) -> None:
    """`fn(rank, world_size, argv)` on --world-size ranks, as the tutorial starts them."""
    args = sys.argv[1:]
    n = int(args[args.index("--world-size") + 1]) if "--world-size" in args else 4
    mp.spawn(fn, args=(n, args), nprocs=n)


if __name__ == "__main__":
    spawn(rank_main)

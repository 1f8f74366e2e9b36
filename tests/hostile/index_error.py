"""A submission whose rank 1 raises IndexError in its third step (a student's off-by-one),
started the way PyTorch's DDP tutorial starts ranks (mp.spawn): the other ranks then fail on
the lost peer, and mp.spawn re-raises in the parent."""

import os
import sys

import torch.multiprocessing as mp


def rank_main(rank: int, world_size: int, argv: list[str]) -> None:
    os.environ.update(MASTER_ADDR="localhost", MASTER_PORT="12356", RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    from capstone import trainer

    real = trainer.accumulate_gradients
    steps: list[int] = []

    def forward_backward(*args, **kwargs):
        steps.append(len(steps) + 1)
        if rank == 1:
            offsets = [0, 1]  # the first two steps' offsets only
            _ = offsets[len(steps) - 1]  # step 3: no such offset
        return real(*args, **kwargs)
    trainer.accumulate_gradients = forward_backward
    from capstone.cli import main

    code = main(argv)
    if code:
        sys.exit(code)


if __name__ == "__main__":
    args = sys.argv[1:]
    n = int(args[args.index("--world-size") + 1]) if "--world-size" in args else 4
    mp.spawn(rank_main, args=(n, args), nprocs=n)

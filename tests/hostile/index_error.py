"""A submission whose rank 1 raises IndexError in its third step (a student's off-by-one),
started the way PyTorch's DDP tutorial starts ranks (mp.spawn, tutorial.py beside it): the
other ranks then fail on the lost peer, and mp.spawn re-raises in the parent."""

from tutorial import rank_main as tutorial_rank
from tutorial import spawn


def rank_main(rank: int, world_size: int, argv: list[str]) -> None:
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
    tutorial_rank(rank, world_size, argv, port="12356")


if __name__ == "__main__":
    spawn(rank_main)

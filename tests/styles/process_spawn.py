"""Ranks as `multiprocessing.Process`es of the spawn context (each a fresh interpreter that
imports torch again), gradients from `torch.autograd.grad` (no `.backward()`, no `.grad`), the
shard under torch's Adam.
"""

import lesson
import torch.distributed as dist
from optimizer_class import launch


def rank_main(rank: int, argv: list[str]) -> None:
    a = lesson.parse(argv)
    dist.init_process_group("gloo", rank=rank, world_size=a.world_size)
    lesson.train(rank, a.world_size, a, lesson.Style(use_grad=True))


if __name__ == "__main__":
    launch("spawn", rank_main)

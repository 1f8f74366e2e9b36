"""Every collective a functional collective (`torch.distributed._functional_collectives`, the
path DTensor and compiled code take): `reduce_scatter_tensor(g, "sum", 0, group)`,
`all_gather_tensor(shard, 0, group)`, `all_reduce(t, "sum", group)`, `broadcast(t, 0,
group)`, each result a new tensor waited on as it is read (apis.py's Functional); barriers
and point-to-point torch.distributed's. Ranks from `mp.spawn` (each a fresh interpreter),
over a `dist.new_group` of every rank.
"""

import sys

import lesson
import torch.multiprocessing as mp
from flat_parameter import rank_main

STYLE = lesson.Style(api="functional", new_group=True)

if __name__ == "__main__":
    argv = sys.argv[1:]
    mp.spawn(rank_main, args=(argv, STYLE), nprocs=lesson.parse(argv).world_size)

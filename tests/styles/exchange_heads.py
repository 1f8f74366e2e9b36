"""The lesson's exercise 1 with each all-reduce of Megatron's f/g pair written as an exchange
with the group's peers (`isend` of this rank's tensor, `recv` of the peer's, an add): the same
numbers as `dist.all_reduce`, carried by point-to-point calls. Everything else is
flat_parameter.py's (a flat shard nn.Parameter under torch.optim.Adam, ZeRO-1 over the
data-parallel ranks), its ranks from mp.spawn.
"""

import sys

import lesson
import torch.multiprocessing as mp
from flat_parameter import rank_main

STYLE = lesson.Style(tp="exchange")

if __name__ == "__main__":
    argv = sys.argv[1:]
    mp.spawn(rank_main, args=(argv, STYLE), nprocs=lesson.parse(argv).world_size)

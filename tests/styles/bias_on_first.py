"""The lesson's exercise 1 with the output projection's bias held by tensor-parallel rank 0
of each group only, and added there before the all-reduce of the partial outputs (one of the
layouts Megatron's RowParallelLinear allows): rank 1 of a group holds C fewer elements per
block, so its P_local, and its `optimizer_bytes`, are its own. The contract's words are "the
rank's own parameters": a correct program (issue 63, finding 6). Everything else is
flat_parameter.py's (a flat shard nn.Parameter under torch.optim.Adam), its ranks forked.
"""

import sys

import lesson
import torch.multiprocessing as mp
from flat_parameter import rank_main

STYLE = lesson.Style(bias_first=True)

if __name__ == "__main__":
    argv = sys.argv[1:]
    a = lesson.parse(argv)
    mp.start_processes(rank_main, args=(argv, STYLE), nprocs=a.world_size, start_method="fork")

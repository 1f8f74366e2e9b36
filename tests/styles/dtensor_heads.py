"""The lesson's exercise 1 with torch's own tensor parallelism: a (dp, tp) `DeviceMesh`, and
on the mesh's "tp" dimension `ColwiseParallel` for each block's q/k/v projection and
`RowwiseParallel` for its output projection (`parallelize_module`); the heads' collectives
are DTensor's, issued by torch's C++ (the Flight Recorder sees them, no Python call does).
Everything else is flat_parameter.py's (a flat shard nn.Parameter under torch.optim.Adam,
ZeRO-1 over the data-parallel ranks), but its ranks come from mp.spawn.
"""

import sys

import lesson
import torch.multiprocessing as mp
from flat_parameter import rank_main

STYLE = lesson.Style(tp="dtensor", mesh=True)

if __name__ == "__main__":
    argv = sys.argv[1:]
    mp.spawn(rank_main, args=(argv, STYLE), nprocs=lesson.parse(argv).world_size)

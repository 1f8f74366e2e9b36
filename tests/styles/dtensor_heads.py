"""The lesson's exercise 1 with torch's own tensor parallelism: a (dp, tp) `DeviceMesh`, and
on the mesh's "tp" dimension `ColwiseParallel` for each block's q/k/v projection and
`RowwiseParallel` for its output projection (`parallelize_module`); the heads' collectives
are DTensor's, issued by torch's C++ (the Flight Recorder sees them, no Python call does).
Everything else as flat_parameter.py (mp.spawn, a flat shard nn.Parameter under
torch.optim.Adam, ZeRO-1 over the data-parallel ranks).
"""

import sys

import lesson
import torch.distributed as dist
import torch.multiprocessing as mp

STYLE = lesson.Style(tp="dtensor", mesh=True)


def rank_main(rank: int, argv: list[str]) -> None:
    a = lesson.parse(argv)
    dist.init_process_group("gloo", init_method=f"file://{a.out}/.rendezvous", rank=rank,
                            world_size=a.world_size)
    lesson.train(rank, a.world_size, a, STYLE)


if __name__ == "__main__":
    argv = sys.argv[1:]
    mp.spawn(rank_main, args=(argv,), nprocs=lesson.parse(argv).world_size)

"""Every collective a method of the process group object, as low-level examples write them:
`pg = dist.distributed_c10d._get_default_group()` (or the group `new_group` returned), then
`pg._reduce_scatter_base(out, g, opts).wait()`, `pg._allgather_base(flat, shard).wait()`,
`pg.allreduce([t]).wait()`, `pg.broadcast(t, 0).wait()`, `pg.barrier().wait()`: no
torch.distributed function makes a collective (apis.py's ByProcessGroup). Ranks forked by
`torch.multiprocessing.start_processes`, a file rendezvous, the shard under torch's Adam.
"""

import sys

import lesson
import torch.distributed as dist
import torch.multiprocessing as mp

STYLE = lesson.Style(api="pg_methods")


def rank_main(rank: int, argv: list[str]) -> None:
    a = lesson.parse(argv)
    dist.init_process_group("gloo", init_method=f"file://{a.out}/.rendezvous", rank=rank,
                            world_size=a.world_size)
    lesson.train(rank, a.world_size, a, STYLE)


if __name__ == "__main__":
    argv = sys.argv[1:]
    mp.start_processes(rank_main, args=(argv,), nprocs=lesson.parse(argv).world_size,
                       start_method="fork")

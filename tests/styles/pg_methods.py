"""Every collective a method of the process group object, as low-level examples write them:
`pg = dist.distributed_c10d._get_default_group()` (or the group `new_group` returned), then
`pg._reduce_scatter_base(out, g, opts).wait()`, `pg._allgather_base(flat, shard).wait()`,
`pg.allreduce([t]).wait()`, `pg.broadcast(t, 0).wait()`, `pg.barrier().wait()`: no
torch.distributed function makes a collective (apis.py's ByProcessGroup). Ranks forked by
`torch.multiprocessing.start_processes`, a file rendezvous, the shard under torch's Adam.
"""

import sys

import lesson
import torch.multiprocessing as mp
from flat_parameter import rank_main

STYLE = lesson.Style(api="pg_methods")

if __name__ == "__main__":
    argv = sys.argv[1:]
    mp.start_processes(rank_main, args=(argv, STYLE), nprocs=lesson.parse(argv).world_size,
                       start_method="fork")

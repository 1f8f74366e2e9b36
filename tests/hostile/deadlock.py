"""Four genuine gloo ranks that log steps 0..4, then deadlock at step 5: rank 0 waits in
recv(src=1) for a value rank 1 never sends, ranks 1-3 go on into an all_reduce."""

import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from _common import out_dir, write_records


def rank_main(rank: int, store_path: str) -> None:
    dist.init_process_group("gloo", store=dist.FileStore(store_path, 4), rank=rank,
                            world_size=4, timeout=timedelta(seconds=300))
    grad = torch.ones(64)
    for _ in range(4):
        dist.all_reduce(grad)
    write_records(out, rank, 4)
    if rank == 0:
        dist.recv(torch.zeros(1), src=1)  # the loss rank 1 was meant to send
    dist.all_reduce(grad)


out = out_dir()
store = str(out / "store")
pids = []
for rank in range(4):
    pid = os.fork()
    if pid == 0:
        rank_main(rank, store)
        os._exit(0)
    pids.append(pid)
sys.exit(max(os.waitpid(p, 0)[1] for p in pids))

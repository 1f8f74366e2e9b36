"""Ranks as subprocesses of the script (`python subprocess_ranks.py ...` starts N copies of
itself with RANK and WORLD_SIZE set, as a hand-made launcher or a job script does), env://
rendezvous, and each checkpoint shard written by a background thread while the next step
computes (asynchronous checkpointing); published only once every shard is on disk.
"""

import os
import subprocess
import sys

import lesson
import torch.distributed as dist
from optimizer_class import free_port

if __name__ == "__main__":
    argv = sys.argv[1:]
    a = lesson.parse(argv)
    if "RANK" in os.environ:  # a rank
        rank, n = lesson.env_rank()
        dist.init_process_group("gloo", rank=rank, world_size=n)
        lesson.train(rank, n, a, lesson.Style(thread_save=True))
    else:  # the launcher
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": free_port(),
               "WORLD_SIZE": str(a.world_size)}
        ranks = [subprocess.Popen([sys.executable, __file__, *argv],
                                  env={**env, "RANK": str(r)}) for r in range(a.world_size)]
        codes = [p.wait() for p in ranks]
        if any(codes):
            sys.exit(f"rank exit codes {codes}")

"""Launched by torchrun: `python torchrun_ranks.py ...` runs `torchrun --standalone
--nproc-per-node N` on itself; each rank reads RANK and WORLD_SIZE from the environment and
meets through env://, its shard under torch's Adam.
"""

import os
import subprocess
import sys

import lesson
import torch.distributed as dist


def launch(style: lesson.Style) -> int:
    """This script's ranks under torchrun (`--standalone`), each training in `style`."""
    argv = sys.argv[1:]
    a = lesson.parse(argv)
    if "TORCHELASTIC_RUN_ID" in os.environ:  # a rank torchrun started
        rank, n = lesson.env_rank()
        dist.init_process_group("gloo")
        lesson.train(rank, n, a, style)
        return 0
    return subprocess.call([sys.executable, "-m", "torch.distributed.run", "--standalone",
                            f"--nproc-per-node={a.world_size}", sys.argv[0], *argv])


if __name__ == "__main__":
    sys.exit(launch(lesson.Style()))

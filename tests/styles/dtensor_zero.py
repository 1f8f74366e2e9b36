"""ZeRO-1 with DTensor: on a one-dimensional DeviceMesh of the ranks, the gradient is a
`Partial()` DTensor redistributed to `Shard(0)` (the reduce-scatter), the updated shard a
`Shard(0)` DTensor redistributed to `Replicate()` (the all-gather); the guard's reductions
and the broadcast are functional collectives (apis.py's ByDTensor). Launched by torchrun
(`python dtensor_zero.py ...` runs `torchrun --standalone` on itself), meeting by env://.
"""

import os
import subprocess
import sys

import lesson
import torch.distributed as dist

STYLE = lesson.Style(api="dtensor")

if __name__ == "__main__":
    argv = sys.argv[1:]
    a = lesson.parse(argv)
    if "TORCHELASTIC_RUN_ID" in os.environ:  # a rank torchrun started
        rank, n = lesson.env_rank()
        dist.init_process_group("gloo")
        lesson.train(rank, n, a, STYLE)
    else:
        sys.exit(subprocess.call([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                  f"--nproc-per-node={a.world_size}", __file__, *argv]))

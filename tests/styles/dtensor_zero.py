"""ZeRO-1 with DTensor: on a one-dimensional DeviceMesh of the ranks, the gradient is a
`Partial()` DTensor redistributed to `Shard(0)` (the reduce-scatter), the updated shard a
`Shard(0)` DTensor redistributed to `Replicate()` (the all-gather); the guard's reductions
and the broadcast are functional collectives (apis.py's ByDTensor). Launched by torchrun
(`python dtensor_zero.py ...` runs `torchrun --standalone` on itself), meeting by env://.
"""

import sys

import lesson
from torchrun_ranks import launch

if __name__ == "__main__":
    sys.exit(launch(lesson.Style(api="dtensor")))

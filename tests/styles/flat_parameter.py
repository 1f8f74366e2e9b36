"""ZeRO-1 as torch's ZeroRedundancyOptimizer and FSDP hold a shard: the rank's flat slice is an
`nn.Parameter` stepped by `torch.optim.Adam`, beside the model's own parameters (so the process
holds P + P/N elements of `nn.Parameter`, and only P of them are the model's). Ranks forked
by `torch.multiprocessing.start_processes` (dtensor_heads.py, the same program with DTensor's
heads, keeps `mp.spawn`), a file rendezvous.

`python flat_parameter.py reduce80 --out DIR ...` makes a mistake in the same style: 80% of
each slice is reduce-scattered, the rest taken from the rank's own gradient; `sum_micro`,
exercise 2's: the micro-batches' gradients summed into the flat buffer without dividing by M.
"""

import sys
from dataclasses import replace

import lesson
import torch.distributed as dist
import torch.multiprocessing as mp


def rank_main(rank: int, argv: list[str], style: lesson.Style) -> None:
    a = lesson.parse(argv)
    dist.init_process_group("gloo", init_method=f"file://{a.out}/.rendezvous", rank=rank,
                            world_size=a.world_size)
    lesson.train(rank, a.world_size, a, style)


if __name__ == "__main__":
    argv = sys.argv[1:]
    style = lesson.Style()
    if argv and argv[0] == "reduce80":
        style, argv = replace(style, reduce_fraction=0.8), argv[1:]
    elif argv and argv[0] == "sum_micro":
        style, argv = replace(style, sum_micro=True), argv[1:]
    a = lesson.parse(argv)
    mp.start_processes(rank_main, args=(argv, style), nprocs=a.world_size, start_method="fork")

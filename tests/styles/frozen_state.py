"""ZeRO-1 as optimizer_class.py writes it, with `gc.freeze()` as Python's documentation
advises for programs that fork: once in the launcher before it forks the ranks, and once in
each rank after its model and sharded optimizer state are built, so that the collector never
walks (and copy-on-write never copies) what lives for the whole run. Frozen objects leave
`gc.get_objects()`: the suite must still find the optimizer state where it lives and the
memory the rank keeps.

`python frozen_state.py frozen_whole --out DIR ...` makes a dishonest mistake: both moments
are kept whole, for all N slices, in torch tensors frozen out of the collector's sight; the
optimizer steps views of this rank's slice, and the checkpoint saves copies of them, so every
tensor it logs, saves and reports is a slice's size.
"""

import functools
import gc
import sys

import lesson
import torch
import torch.distributed as dist
from optimizer_class import OwnShard, launch

MISTAKE = "frozen_whole"


class FrozenShard(OwnShard):
    """optimizer_class's shard, frozen once built."""

    def __init__(self, master: torch.Tensor) -> None:
        super().__init__(master)
        gc.freeze()


class FrozenWhole(OwnShard):
    """The mistake: whole moments, frozen; the slice's views stepped, copies saved."""

    def __init__(self, master: torch.Tensor) -> None:
        super().__init__(master)
        n, rank = dist.get_world_size(), dist.get_rank()
        self.whole = [torch.zeros(n * master.numel()) for _ in range(2)]
        mine = slice(rank * master.numel(), (rank + 1) * master.numel())
        st = self.opt.state[self.opt.slice]
        st["exp_avg"], st["exp_avg_sq"] = (w[mine] for w in self.whole)
        gc.freeze()

    def state(self) -> dict[str, torch.Tensor]:
        return {name: t.clone() for name, t in super().state().items()}

    def load(self, state: dict[str, torch.Tensor], step: int) -> None:
        for name, t in super().state().items():
            t.copy_(state[name])
        self.opt.state[self.opt.slice]["step"] = step


def rank_main(rank: int, argv: list[str], whole: bool = False) -> None:
    a = lesson.parse(argv)
    dist.init_process_group("gloo", rank=rank, world_size=a.world_size)  # env://
    lesson.train(rank, a.world_size, a,
                 lesson.Style(shard=FrozenWhole if whole else FrozenShard))


if __name__ == "__main__":
    whole = MISTAKE in sys.argv
    if whole:
        sys.argv.remove(MISTAKE)
    gc.freeze()  # before forking: the ranks inherit torch and the modules frozen
    launch("fork", functools.partial(rank_main, whole=whole))

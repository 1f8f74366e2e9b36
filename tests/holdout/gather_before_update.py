"""Hold-out mistake: the all-gather runs before the shard's Adam update instead of after
it, so every rank trains on the parameters of one step before (its own shard's update is
seen a step late, and a checkpoint holds masters the model never ran). Everything else is
the reference's."""

import sys

from capstone import zero
from capstone.cli import exit_now, main


def gathered_first(self: zero.ZeroOneAdam, lr_scale: float = 1.0) -> None:
    zero.all_gather(self._flat, self.shard.master, self.size, self.group)
    self.shard.update(self._grad_shard, lr_scale)


zero.ZeroOneAdam.step = gathered_first  # type: ignore[method-assign]
exit_now(main(sys.argv[1:]))

"""The gradient's reduce-scatter started from post-accumulate-grad hooks (the style space's
`reduce=grad_hooks`), as overlapping code writes it: each parameter's hook moves the
gradient autograd has just accumulated into the step's flat buffer, and when the last one of
the step's last micro-batch lands, an asynchronous reduce-scatter starts while the backward
finishes; the loop waits for it before the update.
"""

from __future__ import annotations

from typing import Any

import apis
import torch


class HookedReduce:
    """Post-accumulate-grad hooks on `params` (in the flat vector's order) filling a buffer
    of n slices of S and reduce-scattering it asynchronously over `group`."""

    def __init__(self, params: list[torch.Tensor], S: int, n: int, group: Any = None,
                 mean_first: bool = False) -> None:
        self.S, self.n, self.group, self.mean_first = S, n, group, mean_first
        self.full = torch.zeros(S * n)
        self.launched: list[tuple[Any, torch.Tensor]] = []
        self.left, self.last = 0, True
        at = 0
        for p in params:
            p.register_post_accumulate_grad_hook(self._landing(at))
            at += p.numel()
        self.count = len(params)

    def _landing(self, at: int) -> Any:
        def hook(p: torch.Tensor) -> None:
            assert p.grad is not None
            self.full[at:at + p.numel()] += p.grad.reshape(-1)
            p.grad = None  # the flat buffer holds it now
            self.left -= 1
            if self.left == 0 and self.last:
                self.launch()
        return hook

    def expect(self, last: bool) -> None:
        """Before a micro-batch's backward: whether its last gradient starts the reduction."""
        self.left, self.last = self.count, last

    def launch(self) -> None:
        """Start the reduce-scatter of what the buffer holds, and begin a new buffer."""
        full, self.full = self.full, torch.zeros(self.S * self.n)
        if self.mean_first:
            full /= self.n
        mine = torch.empty(self.S)
        work = apis.coll.reduce_scatter_tensor(mine, full, group=self.group, async_op=True)
        self.launched.append((work, mine))

    def wait(self) -> torch.Tensor:
        """This rank's slice of the rank-averaged gradient, the sum of what was launched."""
        total = torch.zeros(self.S)
        for work, mine in self.launched:
            work.wait()
            total += mine
        self.launched = []
        return total if self.mean_first else total / self.n

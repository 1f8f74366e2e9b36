"""The ways programs write ZeRO-1's two collectives, each a knob value of the style space
(space.py): the gradient's reduce-scatter and the parameters' all-gather, as a library call,
the list form, an all-to-all and a sum, or a ring of isend/irecv between neighbours (as
course code writes them before it meets the collectives). Every form computes the same
numbers up to the order of a sum.
"""

from __future__ import annotations

from typing import Any

import apis
import torch
import torch.distributed as dist

REDUCES = ("reduce_scatter_tensor", "reduce_scatter", "all_to_all", "ring")
GATHERS = ("all_gather_into_tensor", "all_gather", "ring")


def _peers(group: Any) -> tuple[int, int, int, int]:
    """This rank's place in `group`, the group's size, and its ring neighbours' global
    ranks (isend/irecv take global ranks)."""
    n, me = dist.get_world_size(group), dist.get_rank(group)
    ranks = dist.get_process_group_ranks(group) if group is not None else list(range(n))
    return me, n, ranks[(me + 1) % n], ranks[(me - 1) % n]


def reduce_scatter(form: str, full: torch.Tensor, group: Any = None) -> torch.Tensor:
    """The sum over the group's ranks of this rank's slice of `full` (n equal slices)."""
    me, n, right, left = _peers(group)
    S = full.numel() // n
    parts = list(full.view(n, S).unbind())
    mine = torch.empty(S)
    if form == "reduce_scatter_tensor":
        apis.coll.reduce_scatter_tensor(mine, full, group=group)
    elif form == "reduce_scatter":
        apis.coll.reduce_scatter(mine, [p.contiguous() for p in parts], group=group)
    elif form == "all_to_all":
        got = torch.empty_like(full)
        apis.coll.all_to_all_single(got, full, group=group)
        mine = got.view(n, S).sum(0)
    elif form == "ring":
        # n - 1 hops: at hop k, pass on the running sum of slice (me - k - 1) and add this
        # rank's own part to the one coming from the left. After the last hop the sum that
        # arrives is this rank's own slice's, complete.
        acc = parts[(me - 1) % n].clone()
        for k in range(n - 1):
            incoming = torch.empty(S)
            ops = [dist.P2POp(dist.isend, acc, right, group),
                   dist.P2POp(dist.irecv, incoming, left, group)]
            for req in apis.coll.batch_isend_irecv(ops):
                req.wait()
            acc = incoming + parts[(me - k - 2) % n]
        mine = acc
    else:
        raise ValueError(f"reduce form {form!r}: one of {REDUCES}")
    return mine


def all_gather(form: str, flat: torch.Tensor, mine: torch.Tensor, group: Any = None) -> None:
    """Every rank's slice into `flat` (n equal slices, this rank's is `mine`)."""
    me, n, right, left = _peers(group)
    S = mine.numel()
    if form == "all_gather_into_tensor":
        apis.coll.all_gather_into_tensor(flat, mine.contiguous(), group=group)
    elif form == "all_gather":
        apis.coll.all_gather(list(flat.view(n, S).unbind()), mine.contiguous(), group=group)
    elif form == "ring":
        flat[me * S:(me + 1) * S] = mine
        for k in range(n - 1):  # pass on the slice received at the last hop
            send, recv = (me - k) % n, (me - k - 1) % n
            incoming = torch.empty(S)
            ops = [dist.P2POp(dist.isend, flat[send * S:(send + 1) * S].clone(), right, group),
                   dist.P2POp(dist.irecv, incoming, left, group)]
            for req in apis.coll.batch_isend_irecv(ops):
                req.wait()
            flat[recv * S:(recv + 1) * S] = incoming
    else:
        raise ValueError(f"gather form {form!r}: one of {GATHERS}")

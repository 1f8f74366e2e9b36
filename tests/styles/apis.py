"""The API a program makes its collectives through (the style space's `api` knob): the
functions of torch.distributed; the methods of the ProcessGroup object, waited on (as
low-level examples and some course code write them); functional collectives
(`torch.distributed._functional_collectives`, the path DTensor and compiled code take); or
DTensor, whose ZeRO-1 shard is a `Shard(0)` DTensor gathered by a redistribute to
`Replicate()` and whose gradient is a `Partial()` one redistributed to `Shard(0)`.

Each is an object with the names of torch.distributed's functions that the style space
calls (`coll.all_reduce(t, group=g)`), so the program is the same program whatever makes its
collectives. Point-to-point calls have no functional or DTensor form in torch's public API:
those two make them with torch.distributed's functions, as such programs do.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

APIS = ("functions", "pg_methods", "functional", "dtensor")


def _pg(group: Any) -> Any:
    return group if group is not None else dist.distributed_c10d._get_default_group()


class ByProcessGroup:
    """Every collective a method of the process group (the default one, or the call's),
    its Work waited on; a rooted call's root and a peer are places in that group."""

    def barrier(self, group: Any = None) -> None:
        _pg(group).barrier().wait()

    def broadcast(self, t: torch.Tensor, src: int, group: Any = None) -> None:
        pg = _pg(group)
        pg.broadcast(t, dist.get_group_rank(pg, src)).wait()

    def all_reduce(self, t: torch.Tensor, group: Any = None) -> None:
        _pg(group).allreduce([t]).wait()

    def reduce_scatter_tensor(self, out: torch.Tensor, inp: torch.Tensor, group: Any = None,
                              async_op: bool = False) -> Any:
        work = _pg(group)._reduce_scatter_base(out, inp, dist.ReduceScatterOptions())
        return work if async_op else work.wait()

    def reduce_scatter(self, out: torch.Tensor, parts: list[torch.Tensor],
                       group: Any = None) -> None:
        _pg(group).reduce_scatter([out], [parts]).wait()

    def all_to_all_single(self, out: torch.Tensor, inp: torch.Tensor, group: Any = None) -> None:
        _pg(group).alltoall_base(out, inp, [], []).wait()

    def all_gather_into_tensor(self, out: torch.Tensor, inp: torch.Tensor,
                               group: Any = None) -> None:
        _pg(group)._allgather_base(out, inp).wait()

    def all_gather(self, outs: list[torch.Tensor], t: torch.Tensor, group: Any = None) -> None:
        _pg(group).allgather([outs], [t]).wait()

    def recv(self, t: torch.Tensor, src: int, group: Any = None) -> None:
        pg = _pg(group)
        pg.recv([t], dist.get_group_rank(pg, src), 0).wait()

    def isend(self, t: torch.Tensor, dst: int, group: Any = None) -> Any:
        pg = _pg(group)
        return pg.send([t], dist.get_group_rank(pg, dst), 0)

    def batch_isend_irecv(self, ops: list[Any]) -> list[Any]:
        """dist.P2POp's sends and receives, each a method of its group."""
        works = []
        for o in ops:
            pg = _pg(o.group)
            peer = dist.get_group_rank(pg, o.peer)
            sending = o.op in (dist.isend, self.isend)
            works.append(pg.send([o.tensor], peer, 0) if sending else
                         pg.recv([o.tensor], peer, 0))
        return works


class _Later:
    """A functional collective's result, copied into the caller's tensor at wait()."""

    def __init__(self, out: torch.Tensor, result: torch.Tensor) -> None:
        self.out, self.result = out, result

    def wait(self) -> None:
        self.out.copy_(self.result)


class Functional:
    """Every collective a functional collective over the call's group (its result a new
    tensor, waited on as it is read, copied where torch.distributed's function writes);
    point-to-point and barriers torch.distributed's."""

    def __init__(self) -> None:
        import torch.distributed._functional_collectives as funcol

        self.funcol = funcol

    def __getattr__(self, name: str) -> Any:  # barrier, recv, isend, batch_isend_irecv
        return getattr(dist, name)

    def broadcast(self, t: torch.Tensor, src: int, group: Any = None) -> None:
        pg = _pg(group)
        t.copy_(self.funcol.broadcast(t, dist.get_group_rank(pg, src), pg))

    def all_reduce(self, t: torch.Tensor, group: Any = None) -> None:
        t.copy_(self.funcol.all_reduce(t, "sum", _pg(group)))

    def reduce_scatter_tensor(self, out: torch.Tensor, inp: torch.Tensor, group: Any = None,
                              async_op: bool = False) -> Any:
        later = _Later(out, self.funcol.reduce_scatter_tensor(inp, "sum", 0, _pg(group)))
        return later if async_op else later.wait()

    def reduce_scatter(self, out: torch.Tensor, parts: list[torch.Tensor],
                       group: Any = None) -> None:
        self.reduce_scatter_tensor(out, torch.cat(parts), group)

    def all_to_all_single(self, out: torch.Tensor, inp: torch.Tensor, group: Any = None) -> None:
        out.copy_(self.funcol.all_to_all_single(inp, None, None, _pg(group)))

    def all_gather_into_tensor(self, out: torch.Tensor, inp: torch.Tensor,
                               group: Any = None) -> None:
        out.copy_(self.funcol.all_gather_tensor(inp, 0, _pg(group)))

    def all_gather(self, outs: list[torch.Tensor], t: torch.Tensor, group: Any = None) -> None:
        full = self.funcol.all_gather_tensor(t, 0, _pg(group))
        for i, o in enumerate(outs):
            o.copy_(full[i * t.numel():(i + 1) * t.numel()].view_as(o))


class ByDTensor(Functional):
    """ZeRO-1's two collectives as DTensor redistributions on a one-dimensional DeviceMesh
    of the call's group: the gradient a `Partial()` DTensor redistributed to `Shard(0)`, the
    updated shard a `Shard(0)` DTensor redistributed to `Replicate()`. The rest functional."""

    def __init__(self) -> None:
        super().__init__()
        self.meshes: dict[int, Any] = {}

    def _mesh(self, group: Any) -> Any:
        from torch.distributed.device_mesh import DeviceMesh

        pg = _pg(group)
        if id(pg) not in self.meshes:
            self.meshes[id(pg)] = DeviceMesh.from_group(pg, "cpu")
        return self.meshes[id(pg)]

    def reduce_scatter_tensor(self, out: torch.Tensor, inp: torch.Tensor, group: Any = None,
                              async_op: bool = False) -> Any:
        from torch.distributed.tensor import DTensor, Partial, Shard

        mesh = self._mesh(group)
        summed = DTensor.from_local(inp, mesh, [Partial()], run_check=False)
        later = _Later(out, summed.redistribute(mesh, [Shard(0)]).to_local())
        return later if async_op else later.wait()

    def all_gather_into_tensor(self, out: torch.Tensor, inp: torch.Tensor,
                               group: Any = None) -> None:
        from torch.distributed.tensor import DTensor, Replicate, Shard

        mesh = self._mesh(group)
        shard = DTensor.from_local(inp, mesh, [Shard(0)], run_check=False)
        out.copy_(shard.redistribute(mesh, [Replicate()]).to_local())


coll: Any = dist  # what the program's collectives are made by: set once by use()


def use(api: str) -> None:
    """Make the program's collectives through `api` (one of APIS), from now on."""
    global coll
    coll = {"functions": lambda: dist, "pg_methods": ByProcessGroup, "functional": Functional,
            "dtensor": ByDTensor}[api]()

"""Collectives seen where every API's path meets: torch's dispatcher (loaded by the observer,
tests/observer/sitecustomize.py, once torch.distributed is imported).

`torch.distributed`'s functions are wrapped by name in sitecustomize; a program reaches the
same gloo collectives without them: through the methods of a ProcessGroup it holds
(`pg.allreduce([t])`, `pg._reduce_scatter_base(out, g)`), through functional collectives
(`torch.distributed._functional_collectives`, the path DTensor's redistribute and compiled
code take), and through torch's C++ (DDP's reducer, `_broadcast_coalesced`). Each of these
calls an operator of the `c10d` or `_c10d_functional` namespace through the dispatcher, so a
kernel registered for the AutogradCPU key of each operator sees every one of them, with its
tensors, before it runs; it records the call as the Python function of the same meaning
would be recorded (`all_reduce`, `reduce_scatter_tensor`, ...: the checks read one kind of
record whatever API made it) and hands the call on below autograd, to the kernel that would
have run.

A call that a wrapped `torch.distributed` function makes is recorded there (the observer's
depth is set), not here again. A `Work` waited on from Python (`pg.allreduce(...).wait()`)
is recorded as a blocking call of its own, as an asynchronous call's wait is elsewhere.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_KEEP: list[Any] = []  # the libraries whose kernels stay registered while the process lives


def _group(pg: Any) -> Any:
    """The Python ProcessGroup of a dispatcher argument: a boxed ProcessGroup (the c10d
    operators) or a group's name (the functional ones)."""
    import torch.distributed as dist

    if isinstance(pg, str):
        return dist.distributed_c10d._resolve_process_group(pg)  # type: ignore[arg-type]
    return dist.ProcessGroup.unbox(pg)


def _one(tensors: Any) -> Any:
    """A list of one tensor as the tensor itself (a Python function's `tensor` argument)."""
    return tensors[0] if isinstance(tensors, (list, tuple)) and len(tensors) == 1 else tensors


# Each operator: the torch.distributed function of the same meaning, and its arguments named
# as that function names them (what _observer_calls.describe and digest read). `root`: a
# rooted call's root, a place in the call's group.
_C10D: dict[str, tuple[str, Callable[[dict[str, Any]], dict[str, Any]]]] = {
    "allreduce_": ("all_reduce", lambda a: {"tensor": _one(a["tensors"])}),
    "allreduce_coalesced_": ("all_reduce", lambda a: {"tensor": a["tensors"]}),
    "_reduce_scatter_base_": ("reduce_scatter_tensor", lambda a: {
        "output": a["output_tensor"], "input": a["input_tensor"]}),
    "reduce_scatter_tensor_coalesced_": ("reduce_scatter_tensor", lambda a: {
        "output": a["outputs"], "input": a["inputs"]}),
    "reduce_scatter_": ("reduce_scatter", lambda a: {
        "output": a["output_tensors"], "input_list": a["input_tensors"]}),
    "_allgather_base_": ("all_gather_into_tensor", lambda a: {
        "output_tensor": a["output_tensor"], "input_tensor": a["input_tensor"]}),
    "allgather_into_tensor_coalesced_": ("all_gather_into_tensor", lambda a: {
        "output_tensor": a["outputs"], "input_tensor": a["inputs"]}),
    "allgather_": ("all_gather", lambda a: {
        "tensor_list": a["output_tensors"], "tensor": a["input_tensors"]}),
    "allgather_coalesced_": ("all_gather", lambda a: {
        "tensor_list": a["output_lists"], "tensor": a["input_list"]}),
    "broadcast_": ("broadcast", lambda a: {"tensor": _one(a["tensors"]),
                                           "group_src": a["root_rank"]}),
    "reduce_": ("reduce", lambda a: {"tensor": _one(a["tensors"]),
                                     "group_dst": a["root_rank"]}),
    "gather_": ("gather", lambda a: {"gather_list": a["output_tensors"],
                                     "tensor": a["input_tensors"], "group_dst": a["root_rank"]}),
    "scatter_": ("scatter", lambda a: {"tensor": a["output_tensors"],
                                       "scatter_list": a["input_tensors"],
                                       "group_src": a["root_rank"]}),
    "alltoall_": ("all_to_all", lambda a: {"output_tensor_list": a["output_tensors"],
                                           "input_tensor_list": a["input_tensors"]}),
    "alltoall_base_": ("all_to_all_single", lambda a: {
        "output": a["output"], "input": a["input"],
        "output_split_sizes": a["output_split_sizes"],
        "input_split_sizes": a["input_split_sizes"]}),
    "barrier": ("barrier", lambda a: {}),
    "monitored_barrier_": ("monitored_barrier", lambda a: {}),
    "send": ("send", lambda a: {"tensor": _one(a["tensors"]), "group_dst": a["dst"]}),
    "recv_": ("recv", lambda a: {"tensor": _one(a["tensors"]), "group_src": a["src"]}),
    "recv_any_source_": ("recv", lambda a: {"tensor": _one(a["tensors"])}),
}


def _times(n: int) -> Callable[[Any, dict[str, Any]], int]:
    """A functional collective's output elements: its input's, times or over the group's
    size (it allocates its output itself)."""
    def numel(t: Any, a: dict[str, Any]) -> int:
        k = int(a.get("group_size") or 1)
        m = sum(x.numel() for x in (t if isinstance(t, (list, tuple)) else [t]))
        return m * k if n > 0 else m // k if n < 0 else m
    return numel


# The functional collectives (they return their result, waited on by wait_tensor): op, the
# argument holding the input, and the output's elements.
_FUNCTIONAL: dict[str, tuple[str, str, Callable[[Any, dict[str, Any]], int]]] = {
    "all_reduce": ("all_reduce", "input", _times(0)),
    "all_reduce_": ("all_reduce", "input", _times(0)),
    "all_reduce_coalesced": ("all_reduce", "inputs", _times(0)),
    "all_reduce_coalesced_": ("all_reduce", "inputs", _times(0)),
    "reduce_scatter_tensor": ("reduce_scatter_tensor", "input", _times(-1)),
    "reduce_scatter_tensor_out": ("reduce_scatter_tensor", "input", _times(-1)),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter_tensor", "inputs", _times(-1)),
    "all_gather_into_tensor": ("all_gather_into_tensor", "input", _times(1)),
    "all_gather_into_tensor_out": ("all_gather_into_tensor", "input", _times(1)),
    "all_gather_into_tensor_coalesced": ("all_gather_into_tensor", "inputs", _times(1)),
    "all_to_all_single": ("all_to_all_single", "input", _times(0)),
    "broadcast": ("broadcast", "input", _times(0)),
    "broadcast_": ("broadcast", "input", _times(0)),
}


def _bound(ns: str, name: str, schema: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
           ) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The call as a torch.distributed function's: its op, its arguments by that function's
    names, and what the record says beyond them (a functional collective's output size)."""
    a = {arg.name: v for arg, v in zip(schema.arguments, args, strict=False)}
    a.update(kwargs)
    if ns == "c10d":
        op, bind = _C10D[name]
        bound = {**bind(a), "group": _group(a["process_group"]),
                 "async_op": bool(a.get("async_op", False))}
        for local, key in (("group_src", "src"), ("group_dst", "dst")):  # a peer's global rank,
            if local in bound:                                           # as the functions take
                import torch.distributed as dist

                with contextlib.suppress(Exception):
                    bound[key] = dist.get_global_rank(bound["group"], bound.pop(local))
        return op, bound, {}
    op, field, numel = _FUNCTIONAL[name]
    value = a[field]
    key = {"all_reduce": "tensor", "broadcast": "tensor"}.get(op, "input")
    bound = {key: _one(value) if key == "tensor" else value, "group": _group(a["group_name"])}
    if op == "broadcast":
        bound["group_src"] = a["src"]
    if op == "all_to_all_single":
        bound.update(output_split_sizes=a["output_split_sizes"],
                     input_split_sizes=a["input_split_sizes"])
    return op, bound, {"numel_out": numel(value, a)}


def install(observer: Any) -> None:
    """A kernel for every c10d and functional collective operator that records the call
    (observer.observe_call) and runs the operator below autograd, as it would have run."""
    import torch

    libraries: dict[str, Any] = {}
    for qualified in torch._C._dispatch_get_all_op_names():
        ns, _, name = qualified.partition("::")
        if not ((ns == "c10d" and name in _C10D) or
                (ns == "_c10d_functional" and (name in _FUNCTIONAL or name == "wait_tensor"))):
            continue
        packet = getattr(getattr(torch.ops, ns), name)
        if ns not in libraries:
            libraries[ns] = torch.library.Library(ns, "IMPL")
        for overload in packet.overloads():
            target = getattr(packet, overload)
            libraries[ns].impl(name if overload == "default" else f"{name}.{overload}",
                               _kernel(observer, ns, name, target), "AutogradCPU")
    _KEEP.append(libraries)
    _watch_waits(observer)


def _kernel(observer: Any, ns: str, name: str, target: Any) -> Callable[..., Any]:
    import torch

    below = torch._C._AutoDispatchBelowAutograd
    schema = target._schema
    wait = torch.ops._c10d_functional.wait_tensor.default
    # a functional collective is waited on in its own call; wait_tensor is that wait
    functional = ns == "_c10d_functional" and name != "wait_tensor"

    def kernel(*args: Any, **kwargs: Any) -> Any:
        def run() -> Any:
            with below():
                out = target(*args, **kwargs)
                if functional:  # waited on here: a rank blocked in it is seen in this call
                    for t in out if isinstance(out, (list, tuple)) else [out]:
                        wait(t)
            return out
        if not observer.outer():  # inside a recorded call (a torch.distributed function's)
            return run()
        if name == "wait_tensor":
            return observer.observe_wait({"of": "functional", "numel_in": 0, "numel_out": 0},
                                         run)
        try:
            op, bound, record = _bound(ns, name, schema, args, kwargs)
        except Exception as e:  # never let the observer break the call
            return observer.observe_call(name, None, run, {"describe_error": repr(e)[:200]})
        result = observer.observe_call(op, bound, run, record)
        if op == "recv":
            observer.received([bound.get("tensor")])
        if not functional:
            import _observer_calls

            _remember(result, _observer_calls.waited_on(op, record))
        return result
    return kernel


# Works a ProcessGroup method returned, by id, with the call each is the Work of: its wait
# is recorded as a wait on that call (a rank blocked in `pg.recv(...).wait()` is blocked in
# that recv). Held until waited on; the oldest let go past _AWAITED_MAX (never waited on).
_AWAITED: dict[int, tuple[Any, dict[str, Any]]] = {}
_AWAITED_MAX = 256


def _remember(result: Any, what: dict[str, Any]) -> None:
    import torch

    boxed = result[-1] if isinstance(result, (list, tuple)) else result
    try:
        work = torch._C._distributed_c10d.Work.unbox(boxed)  # the object the program gets
    except Exception:
        return
    _AWAITED[id(work)] = (work, what)
    while len(_AWAITED) > _AWAITED_MAX:
        _AWAITED.pop(next(iter(_AWAITED)))


def _watch_waits(observer: Any) -> None:
    """`Work.wait()` from Python, whatever call returned the Work (a ProcessGroup method's):
    recorded as a blocking call (op "wait"), where the wrapped functions' own waits are not
    (they are recorded where they are made)."""
    import torch

    work = torch._C._distributed_c10d.Work
    real = work.wait

    def wait(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not observer.outer():
            return real(self, *args, **kwargs)
        _, what = _AWAITED.pop(id(self), (None, {"of": "work", "numel_in": 0, "numel_out": 0}))
        return observer.observe_wait(what, lambda: real(self, *args, **kwargs))
    work.wait = wait  # type: ignore[method-assign]

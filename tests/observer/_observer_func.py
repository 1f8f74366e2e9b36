"""The `torch.func` transforms on the step clock (loaded by the observer,
tests/observer/sitecustomize.py): one call of a transformed function is one backward pass,
however the transforms nest.

A transform computes its gradient by one `torch.autograd.grad` of its own, on tensors wrapped
for its level (`torch._functorch.eager_transforms._autograd_grad`), which the observer's
wrapper of `torch.autograd.grad` already sees, with the graph, the loss and the index
tensors every other backward pass shows. What the transforms add is nesting: `grad(grad(f))`
runs the inner transform's `autograd.grad` inside the outer one's forward, `jacrev` runs a
vmapped vjp per chunk of its basis, `vjp` runs its forward at one call and its backward at
another. So each call of a transformed function is a region (a thread's depth of them):
inside the outermost region, the first `autograd.grad` made outside any nested region is the
step's backward pass and every other passes through uncounted (`passes_through`); `vjp`'s
forward counts none, each call of the function it returns counts one. The regions wrap
`grad_and_value_impl` (what `torch.func.grad` and `grad_and_value`, and functorch's, call),
`vjp` and `jacrev` (and so `hessian`) in `torch._functorch.eager_transforms` as it is
executed, before `torch.func` binds their names. A region TorchDynamo traces is none (its
guards would hold our state): under `torch.compile` each `autograd.grad` the compiled code
runs is a pass.

Forward-mode transforms (`jvp`, `jacfwd`, `linearize`) make no backward pass: they are not on
the clock. For the readers of `_observer_backward.py`, `plain` unwraps a transform's tensor to
the one that holds its bytes and `untransformed` runs a reader outside the transforms'
dispatch. Nothing here reads or writes a tensor.
"""

from __future__ import annotations

import functools
import threading
from typing import Any


class _Regions(threading.local):
    """Per thread: how many transform regions it is in, and whether its outermost one has
    counted its backward pass (class defaults: a thread starts outside every region)."""

    depth = 0
    counted = False


_REGIONS = _Regions()


def plain(t: Any) -> Any:
    """The tensor a transform's wrapper holds, unwrapped through every level (a grad level's
    GradTrackingTensor, a vmap's BatchedTensor with its batch dimension): the one whose bytes
    can be read. Anything else is itself."""
    import torch

    if not isinstance(t, torch.Tensor):
        return t
    functorch = torch._C._functorch
    while functorch.is_functorch_wrapped_tensor(t):
        t = functorch.get_unwrapped(t)
    return t


def untransformed(fn: Any) -> Any:
    """`fn` run with the transforms' dispatch off (`torch._C._DisableFuncTorch`): a reader
    called inside a transform's pass makes plain tensors of what it reads (a `detach()`, a
    `reshape` of a plain tensor would otherwise be wrapped for the transform's level, with no
    bytes to read), and none of its temporaries enters the transform."""

    @functools.wraps(fn)
    def read(*args: Any, **kwargs: Any) -> Any:
        import contextlib

        import torch

        off = getattr(torch._C, "_DisableFuncTorch", contextlib.nullcontext)
        with off():
            return fn(*args, **kwargs)
    return read


def passes_through() -> bool:
    """Whether a backward call made now (`torch.autograd.backward` or `grad`) is not a pass
    of the step clock: it is made inside a nested transform's region, or its outermost
    region already counted one. Outside every region each call is a pass, as ever. (No test
    of `torch.compiler.is_compiling()` here: TorchDynamo, tracing the observer's wrapper of
    `.backward()`, would keep the branch it took for every run of the compiled code.)"""
    regions = _REGIONS
    if not regions.depth:
        return False
    if regions.depth > 1 or regions.counted:
        return True
    regions.counted = True
    return False


def _region(fn: Any, counts: bool) -> Any:
    """`fn`, each call of it a transform's region: one backward pass where it is the
    outermost region and `counts`, none otherwise."""

    @functools.wraps(fn)
    def region(*args: Any, **kwargs: Any) -> Any:
        import torch

        if torch.compiler.is_compiling():  # TorchDynamo tracing it: no state of ours in its
            return fn(*args, **kwargs)     # guards (the compiled function's runs count)
        regions = _REGIONS
        depth = regions.depth
        regions.depth = depth + 1
        if not depth:
            regions.counted = not counts
        try:
            return fn(*args, **kwargs)
        finally:
            regions.depth = depth
    return region


def _transform(make: Any) -> Any:
    """A transform (`jacrev(f, ...)`) whose returned function's calls are regions."""

    @functools.wraps(make)
    def transform(*args: Any, **kwargs: Any) -> Any:
        return _region(make(*args, **kwargs), counts=True)
    return transform


def _vjp(vjp: Any) -> Any:
    """`vjp(f, *primals)`: its forward a region that counts no pass, the `vjp_fn` it returns
    one whose calls count one each."""
    forward = _region(vjp, counts=False)

    @functools.wraps(vjp)
    def observed(*args: Any, **kwargs: Any) -> Any:
        out = forward(*args, **kwargs)
        return (out[0], _region(out[1], counts=True), *out[2:])
    return observed


def patch(module: Any) -> None:
    """`torch._functorch.eager_transforms`, right after it is executed."""
    module.grad_and_value_impl = _region(module.grad_and_value_impl, counts=True)
    module.vjp = _vjp(module.vjp)
    module.jacrev = _transform(module.jacrev)

"""What a backward pass computes on, read from its autograd graph (loaded by the observer,
tests/observer/sitecustomize.py): the tokens its forward consumed, the elements it
differentiates (the model's P however the program holds its parameters), checksums of the
rows and columns of the first backward's leaves, its loss and whether its gradients are
finite. It reads tensors and never writes one; inside a `torch.func` transform, outside the
transforms' dispatch, each tensor through the one that holds its bytes (`_observer_func`).
"""

from __future__ import annotations

from typing import Any

from _observer_calls import crc, finite, raw, tensors_in
from _observer_func import plain, untransformed

# Autograd nodes that save the integer indices a forward consumed (the tokens), and the
# fields they save them in.
INDEX_NODES = ("EmbeddingBackward", "IndexBackward", "NllLossBackward", "NllLoss2DBackward",
               "GatherBackward", "EmbeddingBagBackward")
INDEX_FIELDS = ("_saved_indices", "_saved_target", "_saved_index", "_saved_offsets")


def local(t: Any) -> Any:
    """A DTensor's shard on this rank (what the rank holds), else the tensor."""
    shard = getattr(t, "_local_tensor", None)
    return shard if shard is not None else t


@untransformed
def slices(leaves: list[Any]) -> list[dict[str, Any]]:
    """Of the 2-D floating leaves a process's first backward differentiates (a DTensor's
    local shard): shape and a checksum of each row and each column. Another run's leaves
    hold the same rows or columns when this one holds a slice of them (tensor
    parallelism's heads), found by these checksums."""
    import zlib

    import numpy as np

    out = []
    for leaf in leaves:
        t = plain(local(leaf))
        if t.dim() != 2 or not t.is_floating_point() or t.numel() > 1 << 20:
            continue
        # Each row's bytes as `crc` of the row would read them; the columns from one
        # contiguous copy of the transpose (a tensor per row costs ~10x as much).
        data = raw(t.detach().contiguous()).reshape(*t.shape, -1)
        out.append({"shape": list(t.shape), "rows": [zlib.crc32(r) for r in data],
                    "cols": [zlib.crc32(c) for c in
                             np.ascontiguousarray(data.transpose(1, 0, 2))]})
    return out


_KINDS: dict[type, tuple[bool, bool]] = {}  # node type: (a leaf's AccumulateGrad, an index node)


def _kind(fn: Any) -> tuple[bool, bool]:
    """Whether the autograd node `fn` accumulates a leaf's gradient, and whether it saves the
    indices a forward consumed: read once per node type (a backward walks ~10^2-10^3
    nodes)."""
    kind = _KINDS.get(type(fn))
    if kind is None:
        name = type(fn).__name__
        kind = _KINDS[type(fn)] = (name == "AccumulateGrad", name.startswith(INDEX_NODES))
    return kind


def nodes(roots: Any) -> Any:
    """Each autograd node of the graph behind `roots`, once."""
    stack = [t.grad_fn for t in tensors_in(roots) if t.grad_fn is not None]
    seen: set[int] = set()
    while stack:
        fn = stack.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        yield fn
        stack += [nxt for nxt, _ in fn.next_functions]


@untransformed
def work(roots: Any, inputs: Any = None, first: bool = False,
         reached: dict[int, Any] | None = None) -> dict[str, Any]:
    """The tokens this backward's forward consumed: the largest integer index tensor in its
    autograd graph (embedding lookups' indices, the loss's targets), and its rows; and the
    elements of what it differentiates: `inputs` where given, else the leaves the pass
    reaches (autograd's AccumulateGrad nodes), each once. That is the model's P however the
    program holds its parameters: a flat shard kept as an nn.Parameter that no backward
    reaches is not counted, a dict of plain tensors is. `reached`, where given, is filled with
    those tensors by id (NestedLeaves.outer)."""
    tokens, rows, token_crc = 0, 0, 0
    leaves: dict[int, int] = {id(t): t.numel() for t in tensors_in(inputs)}
    held: dict[int, Any] = {id(t): t for t in tensors_in(inputs)} if first else {}
    if reached is not None:
        reached.update({id(t): t for t in tensors_in(inputs)})
    for fn in nodes(roots):
        accumulates, indexes = _kind(fn)
        if inputs is None and accumulates:
            leaf = getattr(fn, "variable", None)
            if leaf is not None:
                leaves[id(leaf)] = local(leaf).numel()
                if first:
                    held[id(leaf)] = leaf
                if reached is not None:
                    reached[id(leaf)] = leaf
        if indexes:
            for field in INDEX_FIELDS:
                for saved in tensors_in(getattr(fn, field, None)):
                    idx = plain(saved)  # under vmap: every row of the batch, as one tensor
                    if idx.is_floating_point() or idx.numel() < tokens:
                        continue
                    if idx.numel() > tokens or idx.dim() > 1:
                        tokens, rows = idx.numel(), idx.size(0) if idx.dim() > 1 else rows
                        token_crc = crc(idx)
    return {**({"tokens": tokens, "rows": rows, "token_crc": token_crc} if tokens else {}),
            **({"leaf_elements": sum(leaves.values())} if leaves else {}),
            **({"leaves": slices(list(held.values()))} if held else {})}


@untransformed
def reached_leaves(roots: Any, inputs: Any = None) -> dict[int, Any]:
    """id -> leaf of what a backward differentiates: `inputs` where given, else the leaves
    its graph reaches (AccumulateGrad nodes)."""
    if inputs is not None:
        return {id(t): t for t in tensors_in(inputs)}
    leaves = (getattr(fn, "variable", None) for fn in nodes(roots) if _kind(fn)[0])
    return {id(leaf): leaf for leaf in leaves if leaf is not None}


class NestedLeaves:
    """What a training step's backward differentiates, with the passes run inside it: a
    reentrant activation checkpoint's backward runs a nested backward per block, and only
    those reach the blocks' parameters (the outer pass reaches the embeddings, the last
    LayerNorm and the head). A nested pass also reaches the inputs the checkpoint detached
    for it, leaves made anew at every step: so a nested pass's leaf counts when it is an
    nn.Parameter, or when it is still alive at the next step (a plain tensor the program
    keeps, as a functional model's dict of weights).

    The first backward's counted leaves are also the model's initial weights (`slices`, read
    by the tensor-parallel check), as the outer pass's are: a Parameter's read at once, a
    plain tensor's read then and told once a later pass shows the program kept it."""

    def __init__(self) -> None:
        self.counted: dict[int, int] = {}  # this step's leaves: id -> elements
        self.earlier: dict[int, Any] = {}  # id -> weak reference, from earlier steps
        self.now: dict[int, Any] = {}  # this step's uncounted nested leaves, weakly
        # the first backward's uncounted plain leaves: id -> (weak reference, their slices)
        self.initial: dict[int, tuple[Any, list[dict[str, Any]]]] = {}

    def outer(self, leaves: dict[int, Any]) -> None:
        """A step's backward begins: its own leaves, counted."""
        import weakref

        self.earlier.update(self.now)
        self.now = {}
        self.counted = {}
        for i, t in leaves.items():
            self.counted[i] = local(t).numel()
            try:
                self.earlier[i] = weakref.ref(t)
            except TypeError:
                continue

    def nested(self, leaves: dict[int, Any], first: bool
               ) -> tuple[int | None, list[dict[str, Any]]]:
        """A pass inside it (`first`: inside the process's first backward): the step's
        elements if they grew, else None; and the slices of the initial weights it shows to
        be the model's."""
        import weakref

        import torch

        before = sum(self.counted.values())
        shown: list[dict[str, Any]] = []
        for i, t in leaves.items():
            if i in self.counted:
                continue
            ref = self.earlier.get(i)
            if isinstance(t, torch.nn.Parameter) or (ref is not None and ref() is t):
                self.counted[i] = local(t).numel()
                if first and isinstance(t, torch.nn.Parameter):
                    shown += slices([t])
                kept, read = self.initial.pop(i, (None, []))
                if kept is not None and kept() is t:
                    shown += read
            else:
                try:
                    self.now[i] = weakref.ref(t)
                    if first:
                        self.initial[i] = (self.now[i], slices([t]))
                except TypeError:
                    continue
        after = sum(self.counted.values())
        return (after if after > before else None), shown


@untransformed
def loss(root: Any) -> dict[str, float]:
    """The value a backward starts from, where it is one number (the loss)."""
    import torch

    if isinstance(root, (list, tuple)) and len(root) == 1:
        root = root[0]
    root = plain(root)  # under vmap, a batch of values: no one loss
    if isinstance(root, torch.Tensor) and root.numel() == 1 and root.is_floating_point():
        return {"loss": float(root.detach())}
    return {}


@untransformed
def finite_grads(result: Any, reached: dict[int, Any] | None = None) -> bool:
    """After a backward: are the gradients finite? `autograd.grad` returns them; for
    `.backward()` they are the `.grad` of the leaves the pass reached (`work`'s `reached`:
    the only tensors it writes a gradient into), else of every parameter Python can reach
    (a NaN in any is enough). The walk of every object costs ~20-50 ms a pass with torch
    loaded: it is the fallback, for a pass whose graph could not be read."""
    grads = [plain(t) for t in tensors_in(result) if t.is_floating_point()]
    if not grads and reached:
        grads = [local(g) for leaf in reached.values()  # a DTensor's shard: no collective
                 if (g := getattr(leaf, "grad", None)) is not None]
    elif not grads:  # no graph read: the walk
        import gc

        import torch

        grads = [o.grad for o in gc.get_objects() if type(o) is torch.nn.Parameter
                 and o.grad is not None]
    return all(finite(g) for g in grads)

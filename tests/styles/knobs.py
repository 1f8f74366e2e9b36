"""The style space's knobs: for each part of a ZeRO-1 program, the ways real code writes it
(space.py runs any combination). Plain data, no torch: `python space.py --knobs` prints it,
and the suite's strategy over the space (tests/test_style_space.py) is checked against it.

The first value of each knob is the plainest way (the default); every combination the
EXCLUDED pairs allow is a correct run contract v1 program.
"""

from __future__ import annotations

KNOBS: dict[str, tuple[str, ...]] = {
    # how the ranks start, and how they meet
    "launcher": ("fork", "spawn", "process_fork", "process_spawn", "process_forkserver",
                 "subprocess", "torchrun"),
    "rendezvous": ("file", "tcp", "env"),
    # where the shard and its moments live: torch's Adam over a flat nn.Parameter, a
    # torch.optim.Optimizer subclass (in place), Adam by hand in an object's attributes
    # rebound every step (out of place), moments in numpy arrays of the slice's size, in a
    # module's globals, in the locals of a generator the step resumes, or in the locals of
    # the running worker function (the shard object holding only weak references)
    "state": ("adam_param", "optimizer_class", "out_of_place", "numpy", "module_globals",
              "generator_locals", "worker_locals"),
    # the gradient's reduce-scatter (ways.py), started asynchronously from post-accumulate-
    # grad hooks as the backward lands each gradient, or DDP's comm hook; the all-gather
    "reduce": ("reduce_scatter_tensor", "reduce_scatter", "all_to_all", "ring", "grad_hooks",
               "ddp_hook"),
    "gather": ("all_gather_into_tensor", "all_gather", "ring"),
    # the backward: .backward() or torch.autograd.grad; activation checkpointing of blocks
    "grad": ("backward", "autograd_grad"),
    "remat": ("none", "non_reentrant", "reentrant"),
    "micro": ("1", "2", "4"),  # micro-batches inside a step (without --micro-batches)
    "mean": ("after", "before"),  # the mean over ranks taken after the reduction or before
    "model": ("fused_qkv", "separate_qkv", "mha", "functional"),
    # each rank's rows of the global batch: a contiguous block, or strided as
    # DistributedSampler deals them (rank r takes rows r, r+N, ...): the same global batch
    "rows": ("contiguous", "strided"),
    # the guard: on the reduced loss and gradient norm after the reduction, or on the loss
    # all-reduced before the backward (a spike skips the backward) and the norm after it
    "guard": ("after_reduce", "loss_first"),
    "clip": ("none", "global"),  # clip the global gradient's norm to 1
    # each rank's shard written into the step's temporary directory in line, by a thread,
    # or written beside it and renamed in; rank 0 renames the directory after a barrier
    "save": ("inline", "thread", "rename"),
    "group": ("default", "new_group"),  # the collectives' process group
    # what makes the collectives (apis.py): torch.distributed's functions, the process
    # group's methods, functional collectives, or DTensor redistributions
    "api": ("functions", "pg_methods", "functional", "dtensor"),
}
DEFAULT = {knob: values[0] for knob, values in KNOBS.items()}

# The lesson's mistakes that do not depend on a way of writing: `mistake=NAME` makes one in
# whatever style the other knobs pick. Each names the invariants that must catch it and what
# its feedback must say.
MISTAKES: dict[str, tuple[tuple[str, ...], str]] = {
    "no_broadcast": (("equal_rank_norms", "single_process_parity"),
                     "initial broadcast is missing"),
    "same_rows": (("single_process_parity",), "wrong rows"),
    "summed_gradient": (("single_process_parity",), "summed, not averaged"),
    "no_allgather": (("equal_rank_norms",), "not all-gathered"),
    "local_loss": (("monotonic_loss",), "its own batch's loss"),
    "no_guard": (("rollback",), "never fired"),
    "stale_checkpoint": (("byte_exact_resume",), "the checkpoint holds stale parameters"),
    "whole_moments": (("zero1_memory",), "is held in a storage of"),
    "whole_numpy_locals": (("zero1_memory",), "is held in a storage of"),
    "reduce_per_micro": (("communication",), "times per step"),
    "hang": (("no_deadlock",), "blocked in recv(src=1)"),
    "crash": (("no_deadlock",), "raised RuntimeError"),
}

# Pairs of knob values no program combines, and why (each a correct program on its own).
EXCLUDED: tuple[tuple[tuple[str, str], tuple[str, str], str], ...] = (
    (("launcher", "torchrun"), ("rendezvous", "file"), "torchrun's ranks meet by env://"),
    (("launcher", "torchrun"), ("rendezvous", "tcp"), "torchrun's ranks meet by env://"),
    (("reduce", "ddp_hook"), ("grad", "autograd_grad"), "DDP's hook runs in .backward()"),
    (("reduce", "ddp_hook"), ("model", "functional"), "DDP wraps an nn.Module's parameters"),
    (("reduce", "ddp_hook"), ("mean", "before"), "DDP's hook takes the bucket as DDP sums it"),
    (("reduce", "ddp_hook"), ("group", "new_group"), "DDP's hook reduces over the default group"),
    (("grad", "autograd_grad"), ("reduce", "grad_hooks"),
     "torch.autograd.grad accumulates no .grad: post-accumulate-grad hooks never run"),
    (("reduce", "ddp_hook"), ("guard", "loss_first"),
     "DDP's no_sync needs each micro-batch's backward right after its forward"),
    (("remat", "reentrant"), ("model", "functional"),
     "a reentrant checkpoint recomputes the block outside functional_call: the dict's "
     "tensors get no gradient (the blocks never train)"),
    (("grad", "autograd_grad"), ("remat", "reentrant"),
     "a reentrant checkpoint does not support torch.autograd.grad"),
    (("reduce", "ddp_hook"), ("mistake", "reduce_per_micro"),
     "DDP's hook reduces once, at the last micro-batch's backward"),
    (("reduce", "ddp_hook"), ("mistake", "no_broadcast"),
     "DDP's constructor broadcasts rank 0's parameters: there is no broadcast to forget"),
)


def conflicts(style: dict[str, str]) -> list[str]:
    """Why `style` (knob -> value) is not one program, or [] where it is."""
    out = [f"unknown knob {k!r}: knobs are {', '.join(KNOBS)}, mistake" for k in style
           if k not in KNOBS and k != "mistake"]
    out += [f"{k}={v}: {k} is one of {', '.join(KNOBS[k])}" for k, v in style.items()
            if k in KNOBS and v not in KNOBS[k]]
    if style.get("mistake", "none") not in ("none", *MISTAKES):
        out.append(f"mistake={style['mistake']}: one of {', '.join(MISTAKES)}")
    out += [f"{a}={x} with {b}={y}: {why}" for (a, x), (b, y), why in EXCLUDED
            if style.get(a) == x and style.get(b) == y]
    return out


def parse(text: str) -> dict[str, str]:
    """`key=value,...` as the full style (defaults for the knobs it does not name; no
    mistake)."""
    named = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
    return {**DEFAULT, "mistake": "none", **{k.strip(): v.strip() for k, v in named.items()}}

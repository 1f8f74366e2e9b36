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
    # module's globals, or in the locals of a generator the step resumes
    "state": ("adam_param", "optimizer_class", "out_of_place", "numpy", "module_globals",
              "generator_locals"),
    # the gradient's reduce-scatter (ways.py) or DDP's comm hook; the parameters' all-gather
    "reduce": ("reduce_scatter_tensor", "reduce_scatter", "all_to_all", "ring", "ddp_hook"),
    "gather": ("all_gather_into_tensor", "all_gather", "ring"),
    # the backward: .backward() or torch.autograd.grad; activation checkpointing of blocks
    "grad": ("backward", "autograd_grad"),
    "remat": ("none", "non_reentrant", "reentrant"),
    "micro": ("1", "2", "4"),  # micro-batches inside a step (without --micro-batches)
    "mean": ("after", "before"),  # the mean over ranks taken after the reduction or before
    "model": ("fused_qkv", "separate_qkv", "mha", "functional"),
    "clip": ("none", "global"),  # clip the global gradient's norm to 1
    "save": ("inline", "thread"),  # each rank's shard written in line or by a thread
    "group": ("default", "new_group"),  # the collectives' process group
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

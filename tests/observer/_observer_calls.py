"""What one `torch.distributed` call carries, read from its bound arguments (loaded by the
observer, tests/observer/sitecustomize.py): its description (op, group, element counts,
dtypes, the few numbers a guard reduces), a digest of a gradient on its way to a reduction,
and checksums of the bytes a rank sends by hand. It reads tensors and never writes one;
torch is imported only when a call is described (this module loads in every process
the observer watches).
"""

from __future__ import annotations

from typing import Any


def tensors_in(value: object) -> list[Any]:
    """The tensors in an argument: itself, or those of a (nested) list or tuple."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors_in(v)]
    return []


# Arguments that receive a collective's result, where their names do not start with
# "output": all_gather(tensor_list, tensor) gathers into its list, gather into its
# gather_list, scatter(tensor, scatter_list) into its tensor. (A receive's buffer stays its
# size: what it waits for.)
OUTPUTS = {"all_gather": ("tensor_list",), "gather": ("gather_list",), "scatter": ("tensor",)}


def finite(t: Any) -> bool:
    """Every element of the floating tensor `t` is finite. Its sum is finite only where every
    element is (a NaN makes it NaN, an infinity infinite or NaN) and needs no temporary of
    `t`'s size, as `isfinite(t).all()` does (~10x the time on a gradient); a sum that
    overflowed is decided element by element."""
    import math

    import torch

    if type(t) not in (torch.Tensor, torch.nn.Parameter):  # a DTensor: its own reductions
        return bool(torch.isfinite(t).all())
    with torch.no_grad():
        return math.isfinite(t.detach().sum().item()) or bool(torch.isfinite(t.detach()).all())


def describe(op: str, bound: dict[str, Any]) -> dict[str, Any]:
    """op, group, dtypes and element counts of one call, from its bound arguments."""
    import torch.distributed as dist

    ins, outs, dtypes, nonfinite = 0, 0, [], False
    for name, value in bound.items():
        if name == "p2p_op_list":  # batch_isend_irecv: sends in, receives out
            for o in value or []:
                sent = getattr(o.op, "__name__", "") == "isend"
                ins, outs = ins + sent * o.tensor.numel(), outs + (not sent) * o.tensor.numel()
                dtypes.append(str(o.tensor.dtype).removeprefix("torch."))
            continue
        tensors = tensors_in(value)
        n = sum(t.numel() for t in tensors)
        if name.startswith("output") or name in OUTPUTS.get(op, ()):
            outs += n
        else:
            ins += n
            # Data the rank puts in (a receive's or broadcast's buffer is not data yet).
            nonfinite = nonfinite or (op not in RECEIVING and any(
                t.is_floating_point() and not finite(t) for t in tensors))
        dtypes += [str(t.dtype).removeprefix("torch.") for t in tensors[:1]]
    group = bound.get("group")
    try:
        ranks = dist.get_process_group_ranks(group) if group is not None else \
            list(range(dist.get_world_size()))
    except Exception:
        ranks = []
    small = [t for t in tensors_in(bound.get("tensor")) if t.is_floating_point()]
    record = {"op": op, "numel_in": ins, "numel_out": outs, "dtypes": dtypes,
              **({"nonfinite": True} if nonfinite else {}),
              # A few numbers reduced (a loss, a norm, a guard's flag): what the guard reads.
              **({"values": [float(x) for x in small[0].detach().reshape(-1).tolist()]}
                 if op in REDUCING and len(small) == 1 and small[0].numel() <= 4 else {}),
              "group": ranks, "async": bool(bound.get("async_op")) or op in ("isend", "irecv")}
    for key in ("src", "dst", "group_src", "group_dst"):
        if bound.get(key) is not None:
            record["peer"] = f"{key}={bound[key]}"
    return record


def waited_on(op: str, record: dict[str, Any]) -> dict[str, Any]:
    """What a wait on the Work of call `record` (op `op`) records: the call it waits on."""
    return {"of": op, "group": record.get("group"), "numel_in": 0, "numel_out": 0,
            **({"peer": record["peer"]} if "peer" in record else {})}


REDUCING = ("all_reduce", "reduce")
# Calls whose input may be a gradient on its way to a reduction (a reduce-scatter written as
# an all-to-all too): a digest of what the rank puts in during the first training step, to
# compare its gradient between two runs (the exercise's micro-batches against one batch)
# without keeping the tensor; later steps pay nothing for it.
# (each with the argument that holds the rank's input, as torch.distributed names it)
GRADIENT_IN = {"all_reduce": "tensor", "reduce": "tensor", "reduce_scatter": "input_list",
               "reduce_scatter_tensor": "input", "all_to_all": "input_tensor_list",
               "all_to_all_single": "input"}
DIGEST_MIN = 1024  # elements: a gradient, not a loss, a norm or a guard's flag
SAMPLES = 16


def _floating(bound: dict[str, Any], name: str) -> tuple[list[Any], int]:
    """The floating tensors of argument `name`, and their elements together."""
    parts = [t for t in tensors_in(bound.get(name)) if t.is_floating_point()]
    return parts, sum(t.numel() for t in parts)


def digest(op: str, bound: dict[str, Any]) -> dict[str, Any]:
    """For a reduction's floating input of a gradient's size: its sum, its sum of squares
    (float64) and SAMPLES elements at evenly spaced positions; else nothing."""
    import torch

    if op not in GRADIENT_IN:
        return {}
    parts, n = _floating(bound, GRADIENT_IN[op])
    if n < DIGEST_MIN:
        return {}
    with torch.no_grad():
        flat = torch.cat([t.detach().reshape(-1) for t in parts]).to(torch.float64)
        picks = flat[torch.linspace(0, n - 1, SAMPLES).long()]
        return {"digest": {"n": n, "sum": float(flat.sum()), "sq": float(flat.square().sum()),
                           "sample": [float(v) for v in picks.tolist()]}}


# Every step, a few elements of the gradient on its way to its reduction (at the same
# positions of each rank's part of it) and of the shard on its way to its gather: the update
# each position took and the gradients it took it from, which the suite fits Adam to
# (tests/harness/check/adam_checks.py). A few dozen numbers a call, read by index.
TRAIL = 16
# The inputs cut into `world` parts (a reduce-scatter's or an all-to-all's chunk k goes to
# rank k; an all-reduce's, a ZeRO-1 shard's place): a gradient's way in, but to one root
TRAIL_PARTED = {op: name for op, name in GRADIENT_IN.items() if op != "reduce"}
TRAIL_GATHERED = ("all_gather_into_tensor", "all_gather")


def spots(n: int) -> list[int]:
    """TRAIL positions spread over a part of n elements (fewer where n is smaller)."""
    return sorted({i * (n - 1) // max(TRAIL - 1, 1) for i in range(TRAIL)}) if n else []


def _picked(parts: list[Any], positions: list[int]) -> list[float]:
    """The elements at `positions` of the parts laid end to end (float64 values)."""
    out, start, k = [], 0, 0
    for t in parts:
        flat = t.detach().reshape(-1)
        end = start + flat.numel()
        while k < len(positions) and positions[k] < end:
            out.append(float(flat[positions[k] - start]))
            k += 1
        start = end
    return out


def trail(op: str, bound: dict[str, Any], world: int) -> dict[str, Any]:
    """A reduction's or an all-to-all's floating input of a gradient's size: its elements at
    `spots` of each of the `world` parts a reduce-scatter would give (`x`); a gather's input (a
    shard, the gathered result a gradient's size): its elements at `spots` (`p`). Else
    nothing."""
    if op in TRAIL_PARTED:
        parts, n = _floating(bound, TRAIL_PARTED[op])
        if n < DIGEST_MIN or world < 1:
            return {}
        shard = -(-n // world)
        at = [k * shard + j for k in range(world) for j in spots(shard)]
        inside = _picked(parts, [i for i in at if i < n])  # past n: padding, 0
        return {"trail": {"n": n, "x": inside + [0.0] * (len(at) - len(inside))}}
    if op in TRAIL_GATHERED:
        name = "tensor" if op == "all_gather" else (
            "input_tensor" if "input_tensor" in bound else "input")
        parts, n = _floating(bound, name)
        if n * max(world, 1) < DIGEST_MIN:
            return {}
        return {"trail": {"n": n, "p": _picked(parts, spots(n))}}
    return {}


RECEIVING = ("recv", "irecv", "broadcast", "broadcast_object_list")
BY_HAND = ("all_to_all", "all_to_all_single", "send", "isend", "batch_isend_irecv")


def raw(t: Any) -> Any:
    """A read-only uint8 numpy view of a contiguous CPU tensor's bytes, made from its address
    (the array keeps the tensor alive). `Tensor.numpy()` would mark the program's storage as
    not resizable (torch's guard for the pointer numpy keeps), for ever: a program that frees
    a buffer by resizing its storage to 0 (as FSDP does with its gathered parameters) would
    then fail observed where it runs unobserved."""
    import ctypes

    import numpy as np

    if t.device.type != "cpu":  # its address is not this process's memory: refuse as .numpy()
        raise TypeError(f"a {t.device.type} tensor's bytes are not read in place")
    nbytes = t.numel() * t.element_size()
    if not nbytes:
        return np.empty(0, dtype=np.uint8)
    memory = (ctypes.c_uint8 * nbytes).from_address(t.data_ptr())
    memory.tensor = t  # held by the array's base
    arr = np.ctypeslib.as_array(memory)
    arr.flags.writeable = False
    return arr


def crc(t: Any) -> int:
    """The CRC-32 of a tensor's bytes in its logical order (read, never written)."""
    import zlib

    flat = t.detach().reshape(-1).contiguous()
    return zlib.crc32(memoryview(raw(flat)))


def fingerprint(t: Any) -> int:
    """A checksum of a tensor's bytes and its size: the same data sent twice, once."""
    return crc(t) ^ (t.numel() << 32)


def chunks(t: Any, splits: Any) -> list[Any]:
    """An all-to-all's input cut into each rank's piece (none where the splits do not add
    up to it)."""
    if t is None:
        return []
    import torch.distributed as dist

    n = dist.get_world_size()
    sizes = list(splits) if splits else [t.size(0) // n] * n
    return list(t.split(sizes)) if sum(sizes) == t.size(0) else []

"""Where a rank's optimizer state lives, found by what it holds (loaded by the observer).

When a rank saves its checkpoint shard (`torch.save` of a dict with the contract's `master`,
`exp_avg` and `exp_avg_sq`), those tensors hold exactly its optimizer state at that moment.
`locate(saved)` searches every buffer Python can reach (tensor storages, numpy arrays,
bytearrays, array.arrays, mmaps: `_observer_buffers`) for the saved values and
returns, per state tensor, the storages that hold them and how large each one is, whatever
object owns them (a class, a dict, torch's Adam, one flat buffer) and whether the program
updates in place or out of place. A moment allocated for the whole parameter vector shows
as a storage of P elements however much of it the program touches; a temporary of a shard's
size (m-hat, the reduced gradient) holds other values and is never counted.

It reads storages only (as int32 bit patterns, so -0.0 and NaN compare as they are stored)
and keeps nothing alive.
"""

from __future__ import annotations

from typing import Any

STATE_NAMES = ("master", "exp_avg", "exp_avg_sq")
CHUNK = 32  # values per piece searched for: pieces of the saved tensor, each located apart
MIN_DISTINCT = 4  # a piece with fewer distinct values (padding zeros) proves nothing
BLOCK = 4096  # candidate places compared at once (4096 x CHUNK int32: 512 KiB)


def saved_state(obj: object) -> dict[str, Any]:
    """The contract's state tensors in what `torch.save` was given (empty: not a shard)."""
    import torch

    if not isinstance(obj, dict):
        return {}
    found = {k: obj[k] for k in STATE_NAMES
             if isinstance(obj.get(k), torch.Tensor) and obj[k].dtype == torch.float32
             and obj[k].device.type == "cpu" and obj[k].numel() >= CHUNK}
    return found if "exp_avg" in found or "exp_avg_sq" in found else {}


def _bits(t: Any) -> Any:
    """A float32 tensor's bit patterns as int32 (its own memory where it is contiguous)."""
    from _observer_calls import raw

    return raw(t.detach().reshape(-1).contiguous()).view("i4")


def _storages(torch: Any) -> tuple[dict[int, Any], set[int]]:
    """Every CPU buffer Python can reach (`_observer_buffers.reachable`) large enough to hold
    a piece (address -> its int32 bit patterns, read only), and the parameters' storages."""
    import _observer_buffers as buffers
    from _observer_calls import raw

    regions, params = buffers.reachable(torch)
    views: dict[int, Any] = {}
    for ptr, (owner, n) in regions.items():
        if n < 4 * CHUNK:
            continue
        if isinstance(owner, torch.UntypedStorage):
            if owner.device.type == "cpu" and n % 4 == 0:
                views[ptr] = raw(torch.empty(0, dtype=torch.uint8).set_(owner)).view("i4")
        elif (arr := buffers.as_int32(owner)) is not None:
            views[ptr] = arr
    return views, params


def _distinct(a: Any) -> Any:
    """`np.unique(a)` of a 1-D array, without the import of `numpy.ma` that np.unique makes
    on its first call (~10 ms in each rank that locates its state)."""
    import numpy as np

    s = np.sort(a)
    return s[np.concatenate(([True], s[1:] != s[:-1]))] if len(s) else s


def locate(saved: dict[str, Any]) -> dict[str, Any]:
    """Per state tensor: its size, how many of its pieces could be told apart, and every
    storage holding any of them: elements (as float32), pieces held, whether it belongs to a
    parameter, and whether it is one of the saved tensors' own storages."""
    import numpy as np
    import torch

    storages, params = _storages(torch)
    own = {t.untyped_storage().data_ptr() for t in saved.values()}
    names = list(saved)
    usable: dict[str, int] = {}
    rows, owner, index = [], [], []  # each usable piece: its values, tensor, piece number
    for j, name in enumerate(names):
        bits = _bits(saved[name])
        whole = bits[:len(bits) // CHUNK * CHUNK].reshape(-1, CHUNK)
        ordered = np.sort(whole, axis=1)
        distinct = 1 + (ordered[:, 1:] != ordered[:, :-1]).sum(axis=1)
        keep = np.flatnonzero(distinct >= MIN_DISTINCT)
        usable[name] = len(keep)
        rows.append(whole[keep])
        owner.append(np.full(len(keep), j))
        index.append(keep)
    pieces = np.concatenate(rows) if rows else np.empty((0, CHUNK), np.int32)
    of_tensor, number = np.concatenate(owner), np.concatenate(index)
    order = np.argsort(pieces[:, 0], kind="stable")  # the pieces by their first value
    anchors = pieces[order, 0]
    low = np.zeros(1 << 16, dtype=bool)
    low[anchors & 0xFFFF] = True
    holders: dict[str, list[dict[str, Any]]] = {name: [] for name in saved}
    for ptr, arr in storages.items():
        if len(arr) < CHUNK:
            continue
        # Where a piece's first value sits (with room for the piece after it), and each piece
        # that starts so: compared whole, a block of candidates at a time.
        starts = arr[:len(arr) - CHUNK + 1]
        pos = np.flatnonzero(low[starts & 0xFFFF])  # a first filter, by the low 16 bits
        lo = np.minimum(np.searchsorted(anchors, starts[pos]), len(anchors) - 1)
        same = anchors[lo] == starts[pos]
        pos, lo = pos[same], lo[same]
        many = np.searchsorted(anchors, starts[pos], "right") - lo
        at = np.repeat(pos, many)
        cand = order[np.repeat(lo, many) + np.arange(len(at))
                     - np.repeat(np.cumsum(many) - many, many)]
        windows = np.lib.stride_tricks.sliding_window_view(arr, CHUNK)
        found = []
        for b in range(0, len(at), BLOCK):
            c = cand[b:b + BLOCK]
            found.append(c[(windows[at[b:b + BLOCK]] == pieces[c]).all(axis=1)])
        hit = _distinct(np.concatenate(found)) if found else np.empty(0, np.int64)
        for j, name in enumerate(names):
            ks = _distinct(number[hit[of_tensor[hit] == j]])
            if len(ks):
                holders[name].append({"elements": len(arr), "pieces": len(ks),
                                      "param": ptr in params, "saved": ptr in own})
    del storages
    return {name: {"numel": int(saved[name].numel()), "pieces": usable[name],
                   "holders": sorted(holders[name], key=lambda h: -h["elements"])}
            for name in saved}

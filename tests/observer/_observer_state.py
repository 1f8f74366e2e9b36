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
    return t.detach().reshape(-1).contiguous().view(__import__("torch").int32).numpy()


def _storages(torch: Any) -> tuple[dict[int, Any], set[int]]:
    """Every CPU buffer Python can reach (`_observer_buffers.reachable`) large enough to hold
    a piece (address -> its int32 bit patterns, read only), and the parameters' storages."""
    import _observer_buffers as buffers

    regions, params = buffers.reachable(torch)
    views: dict[int, Any] = {}
    for ptr, (owner, n) in regions.items():
        if n < 4 * CHUNK:
            continue
        if isinstance(owner, torch.UntypedStorage):
            if owner.device.type == "cpu" and n % 4 == 0:
                views[ptr] = torch.empty(0, dtype=torch.int32).set_(owner).numpy()  # read only
        elif (arr := buffers.as_int32(owner)) is not None:
            views[ptr] = arr
    return views, params


def locate(saved: dict[str, Any]) -> dict[str, Any]:
    """Per state tensor: its size, how many of its pieces could be told apart, and every
    storage holding any of them: elements (as float32), pieces held, whether it belongs to a
    parameter, and whether it is one of the saved tensors' own storages."""
    import numpy as np
    import torch

    storages, params = _storages(torch)
    own = {t.untyped_storage().data_ptr() for t in saved.values()}
    pieces: dict[str, list[Any]] = {}
    usable: dict[str, int] = {}
    by_anchor: dict[int, list[tuple[str, int]]] = {}  # first value -> (tensor, piece)
    for name, tensor in saved.items():
        bits = _bits(tensor)
        whole = bits[:len(bits) // CHUNK * CHUNK].reshape(-1, CHUNK)
        pieces[name] = list(whole)
        ordered = np.sort(whole, axis=1)
        distinct = 1 + (ordered[:, 1:] != ordered[:, :-1]).sum(axis=1)
        usable[name] = int((distinct >= MIN_DISTINCT).sum())
        for i in np.flatnonzero(distinct >= MIN_DISTINCT).tolist():
            by_anchor.setdefault(int(whole[i, 0]), []).append((name, i))
    anchors = np.fromiter(by_anchor, dtype=np.int32, count=len(by_anchor))
    holders: dict[str, list[dict[str, Any]]] = {name: [] for name in saved}
    for ptr, arr in storages.items():
        held: dict[str, set[int]] = {}
        for pos in np.flatnonzero(np.isin(arr, anchors)).tolist():
            for name, k in by_anchor[int(arr[pos])]:
                if k not in held.get(name, ()) and pos + CHUNK <= len(arr) and \
                        np.array_equal(arr[pos:pos + CHUNK], pieces[name][k]):
                    held.setdefault(name, set()).add(k)
        for name, ks in held.items():
            holders[name].append({"elements": len(arr), "pieces": len(ks),
                                  "param": ptr in params, "saved": ptr in own})
    del storages
    return {name: {"numel": int(saved[name].numel()), "pieces": usable[name],
                   "holders": sorted(holders[name], key=lambda h: -h["elements"])}
            for name in saved}

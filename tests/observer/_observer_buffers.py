"""Every buffer of memory a process's Python can reach, not only torch's storages (loaded by
the observer).

A program may keep its optimizer state where torch does not see it: numpy arrays (with
`torch.from_numpy` views of a slice), a `bytearray`, an `array.array`, an `mmap`. Each such
buffer is counted by the object that owns its memory (a numpy array whose `owndata` flag is
set; a view of it, or a numpy array over a tensor, is its owner's memory), with its owner's
size, and a region inside another (a tensor made from a slice of a numpy array) is counted
once, as part of the larger.

numpy arrays and bytearrays are not tracked by Python's collector, so they are found as the
referents of what it tracks and of every thread's running frames. Nothing here keeps a buffer
alive beyond the call; nothing is written.
"""

from __future__ import annotations

from typing import Any


def python_buffers() -> list[Any]:
    """The numpy arrays that own their memory, bytearrays, array.arrays and open mmaps that
    the process can reach."""
    import array
    import gc
    import mmap
    import sys

    np = sys.modules.get("numpy")  # a program that never imported numpy holds no array
    ndarray = np.ndarray if np is not None else ()
    found: dict[int, Any] = {}

    def consider(o: Any) -> None:
        t = type(o)
        if t in (bytearray, array.array, mmap.mmap) or (
                ndarray and issubclass(t, ndarray) and o.flags.owndata and o.nbytes):
            found[id(o)] = o

    tracked = gc.get_objects()
    # Running functions' locals, as the collector sees them (a frame's referents): never
    # through f_locals, which before Python 3.13 leaves a snapshot of the locals on the
    # frame and keeps the program's old values alive.
    me = sys._getframe()
    frames = []
    for top in sys._current_frames().values():
        frame: Any = top
        while frame is not None:
            if frame is not me:
                frames.append(frame)
            frame = frame.f_back
    for o in tracked:
        consider(o)
    for o in gc.get_referents(*tracked, *frames):
        consider(o)
    frames.clear()  # no frame object outlives this call through us
    del tracked, frames, me, frame, top
    return list(found.values())


def address(o: Any) -> tuple[int, int] | None:
    """(address, bytes) of a buffer's memory; None for an empty or closed one."""
    import sys

    np = sys.modules.get("numpy")
    try:
        if np is not None and isinstance(o, np.ndarray):
            return (int(o.__array_interface__["data"][0]), int(o.nbytes)) if o.nbytes else None
        if np is None or not len(o):
            return None
        view = np.frombuffer(o, dtype=np.uint8)
        where = (int(view.__array_interface__["data"][0]), int(view.nbytes))
        del view  # a bytearray cannot resize while exported
        return where
    except (ValueError, TypeError, BufferError):
        return None


def as_int32(o: Any) -> Any:
    """A read-only int32 numpy view of a buffer's whole memory (its bit patterns), or None."""
    import numpy as np

    try:
        if isinstance(o, np.ndarray):
            flat = o.reshape(-1, order="A").view(np.uint8) if (
                o.flags.c_contiguous or o.flags.f_contiguous) else None
            if flat is None:
                return None
            out = flat[:len(flat) // 4 * 4].view(np.int32)
        else:
            with memoryview(o) as mv:
                nbytes = mv.nbytes
            out = np.frombuffer(o, dtype=np.int32, count=nbytes // 4)
        out = out.view()
        out.flags.writeable = False
        return out
    except (ValueError, TypeError, BufferError):
        return None


def outermost(regions: dict[int, int]) -> set[int]:
    """Of regions (address -> bytes), the addresses of those not inside another: memory
    counted once, by the largest region that holds it."""
    kept: set[int] = set()
    end = -1
    for start, size in sorted(regions.items(), key=lambda kv: (kv[0], -kv[1])):
        if start + size <= end:
            continue  # inside the region kept before it
        kept.add(start)
        end = max(end, start + size)
    return kept


def reachable(torch: Any, on_error: Any = None
              ) -> tuple[dict[int, tuple[Any, int]], set[int]]:
    """Every buffer of memory Python can reach, each once (address -> its owner, bytes): the
    storage of every tensor (views are not counted twice; a leaf's .grad included: a gradient
    may have no Python object of its own), and the Python buffers above, a region inside
    another counted as the larger; and the addresses of the nn.Parameters' storages. The
    owner is an UntypedStorage or the Python object; the caller drops them when done. Where
    the Python buffers cannot be read, `on_error(exception)` hears why and the tensors'
    storages are returned alone."""
    import gc

    found: dict[int, tuple[Any, int]] = {}
    params: set[int] = set()

    def add(t: Any) -> None:
        if t is None or t.is_meta or t.is_sparse:
            return
        s = t.untyped_storage()
        if s.nbytes() and s.data_ptr() not in found:
            found[s.data_ptr()] = (s, s.nbytes())

    for obj in gc.get_objects():
        if not issubclass(type(obj), torch.Tensor):  # type(), not isinstance: no __class__
            continue
        try:
            add(obj)
            if obj.is_leaf and obj.requires_grad:
                add(obj.grad)
            if isinstance(obj, torch.nn.Parameter):
                params.add(obj.untyped_storage().data_ptr())
        except (RuntimeError, NotImplementedError):
            continue
    try:
        for o in python_buffers():
            where = address(o)
            if where is not None and where[0] not in found:
                found[where[0]] = (o, where[1])
    except Exception as e:  # never let the observer break the run
        if on_error is not None:
            on_error(e)
    keep = outermost({a: n for a, (_, n) in found.items()})
    return {a: v for a, v in found.items() if a in keep}, params

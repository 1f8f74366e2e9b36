"""Every buffer of memory a process's Python can reach, not only torch's storages (loaded by
the observer).

A program may keep its optimizer state where torch does not see it: numpy arrays (with
`torch.from_numpy` views of a slice), a `bytearray`, an `array.array`, an `mmap`. Each such
buffer is counted by the object that owns its memory (a numpy array whose `owndata` flag is
set; a view of it, or a numpy array over a tensor, is its owner's memory), with its owner's
size, and a region inside another (a tensor made from a slice of a numpy array) is counted
once, as part of the larger.

numpy arrays and bytearrays are not tracked by Python's collector, so they are found as the
referents of the program's lists, dicts and objects and of every thread's running frames,
and as the values of running functions' local variables; and only where torch holds some
tensor over memory it does not own (`torch.from_numpy`, `torch.frombuffer`): a program
whose tensors are all torch's own pays nothing. A buffer that no tensor views is not seen. A
tensor the program moved out of the collector's reach (gc.freeze) is still walked; a numpy
array whose holders it froze is not seen.
Nothing here keeps a buffer alive beyond the call; nothing is written.
"""

from __future__ import annotations

from typing import Any

# Tensors the program moved out of the collector's reach with gc.freeze() (Python's advice
# before forking ranks), by weak reference: gc.get_objects() no longer lists them, yet they
# are the program's, and its optimizer state may be among them (`watch_freeze`).
_FROZEN: list[Any] = []


def watch_freeze(torch: Any) -> None:
    """From now on, gc.freeze() first notes (weakly) every tensor it is about to freeze, so
    that `reachable` still walks them; it then freezes as it always does. (The observer
    freezes torch's own objects before this: they hold no state of the program's.)"""
    import gc
    import weakref

    real = gc.freeze

    def freeze() -> None:
        for o in gc.get_objects():
            if issubclass(type(o), torch.Tensor):
                try:
                    _FROZEN.append(weakref.ref(o))
                except TypeError:
                    continue
        real()
    gc.freeze = freeze


def python_buffers(tracked: list[Any]) -> list[Any]:
    """The numpy arrays that own their memory, bytearrays, array.arrays and open mmaps that
    the program's objects hold (`tracked`: what gc.get_objects() gave), or that running
    frames hold."""
    import array
    import gc
    import mmap
    import sys

    np = sys.modules.get("numpy")  # a program that never imported numpy holds no array
    ndarray = np.ndarray if np is not None else ()
    found: dict[int, Any] = {}
    exact = (bytearray, array.array, mmap.mmap)

    def consider(o: Any) -> None:
        t = type(o)
        if t in exact or (
                ndarray and issubclass(t, ndarray) and o.flags.owndata and o.nbytes):
            found[id(o)] = o

    # Running functions' frames: their referents, and their locals (_running_locals).
    me = sys._getframe()
    frames = []
    for top in sys._current_frames().values():
        frame: Any = top
        while frame is not None:
            if frame is not me:
                frames.append(frame)
            frame = frame.f_back
    holders = _holders(tracked, consider)
    inner = []  # a dict or tuple of untracked values only (arrays) is itself untracked
    for o in [*gc.get_referents(*holders, *frames), *_running_locals(frames)]:
        consider(o)
        if type(o) in (dict, tuple) and not gc.is_tracked(o):
            inner.append(o)
    for o in gc.get_referents(*inner):
        consider(o)
    inner.clear()
    holders.clear()
    frames.clear()  # no frame object outlives this call through us
    del frames, me, frame, top
    return list(found.values())


CO_OPTIMIZED = 0x1  # a function's frame: its f_locals is a snapshot, not its namespace


def _running_locals(frames: list[Any]) -> list[Any]:
    """The values of running functions' local variables. A frame a thread is running shows
    the collector only f_back and f_trace (before Python 3.13), so a numpy array that only a
    worker function's local variable holds (as an `mp.spawn` worker holds everything) is
    read from f_locals. Before 3.13 that leaves a snapshot of the locals on the frame, which
    would keep the program's old values alive: it is emptied at once (CPython refreshes it
    from the frame before anyone else reads it, a trace function included). A module's or a
    class body's f_locals is its namespace, never a snapshot: read, never emptied."""
    import sys

    out: list[Any] = []
    snapshot = sys.version_info < (3, 13)
    for frame in frames:
        try:
            values = frame.f_locals
        except Exception:  # a frame ending under us
            continue
        out += list(values.values())
        if snapshot and frame.f_code.co_flags & CO_OPTIMIZED and type(values) is dict \
                and values is not frame.f_globals:
            values.clear()
    return out


_NAMESPACES: dict[int, set[int]] = {}  # len(sys.modules) -> the libraries' namespaces


def _namespaces() -> set[int]:
    """ids of the module namespaces that are not the program's (libraries', builtins'):
    computed again only when a module was imported since (a walk per snapshot otherwise
    tested ~1,000 modules' paths each time)."""
    import sys

    key = len(sys.modules)
    if key not in _NAMESPACES:
        libraries = (sys.prefix, sys.base_prefix, sys.exec_prefix)
        main = sys.modules.get("__main__")  # also named __mp_main__ under multiprocessing
        _NAMESPACES.clear()
        _NAMESPACES[key] = {id(vars(m)) for m in list(sys.modules.values())
                            if m is not main and hasattr(m, "__dict__") and (
                                not isinstance(path := getattr(m, "__file__", None), str)
                                or path.startswith(libraries))}
    return _NAMESPACES[key]


def _holders(tracked: list[Any], consider: Any) -> list[Any]:
    """Of the objects the collector tracks, those that hold a program's data: lists, dicts
    other than modules' namespaces, and instances of classes written in Python. Asking every
    tracked object for its referents touches (by reference count) the module-level objects
    a forked rank shares with its launcher, and copies their pages into every rank (+150 MB
    over zero1.py's four ranks): functions, code, classes and the libraries' modules are left
    out; the program's own modules (its script, its files) are not. Each instance of a class
    written in Python goes to `consider` too (a numpy array subclass is tracked; a bytearray,
    an array.array, an mmap and a plain numpy array are not), in the same pass."""
    namespaces = _namespaces()
    heap = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class written in Python
    out = []
    for o in tracked:
        t = type(o)
        if t is list or (t is dict and id(o) not in namespaces):
            out.append(o)
        elif t.__flags__ & heap and not issubclass(t, type):
            out.append(o)
            consider(o)
    return out


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
    may have no Python object of its own), and, where some tensor's storage is memory torch
    does not own, the Python buffers above, a region inside another counted as the larger;
    and the addresses of the nn.Parameters' storages. The owner is an UntypedStorage or the
    Python object; the caller drops them when done. Where the Python buffers cannot be read,
    `on_error(exception)` hears why and the tensors' storages are returned alone."""
    import gc

    found: dict[int, tuple[Any, int]] = {}
    params: set[int] = set()

    def add(t: Any) -> None:
        if t is None or t.is_meta or t.is_sparse:
            return
        s = t.untyped_storage()
        if s.nbytes() and s.data_ptr() not in found:
            found[s.data_ptr()] = (s, s.nbytes())

    tracked = gc.get_objects()
    tracked += [t for t in (ref() for ref in _FROZEN) if t is not None]
    for obj in tracked:
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
    # Memory outside torch is looked for where torch holds tensors over it (torch.from_numpy,
    # torch.frombuffer: storages it cannot resize): a program whose tensors are all torch's
    # own pays nothing for the search.
    external = any(not owner.resizable() for owner, _ in found.values())
    try:
        for o in python_buffers(tracked) if external else []:
            where = address(o)  # at a tensor view's own address, the owner is the larger
            if where is not None and where[1] > found.get(where[0], (None, 0))[1]:
                found[where[0]] = (o, where[1])
    except Exception as e:  # never let the observer break the run
        if on_error is not None:
            on_error(e)
    del tracked
    keep = outermost({a: n for a, (_, n) in found.items()})
    return {a: v for a, v in found.items() if a in keep}, params


def held(on_error: Any, live: set[tuple[int, int]]) -> dict[int, tuple[Any, int]]:
    """Every buffer Python can reach (address -> something with `expired()`, bytes):
    `reachable`, each held by weak reference (a bytearray, which has none, by its address
    and size being found again by the next walk, in `live`: one set, refilled by each
    walk)."""
    import time

    import torch
    from torch.multiprocessing.reductions import StorageWeakRef

    # A collective's buffers (an all-to-all's receive buffer, an all-gather's input) stay
    # reachable for a moment after the call returns, until torch's communication thread
    # lets go of its work object: give it that moment, or a buffer counts as held.
    time.sleep(0.01)
    regions, _ = reachable(torch, on_error)
    live.clear()  # what a bytearray of an earlier walk is checked against
    found: dict[int, tuple[Any, int]] = {}
    for address, (owner, n) in regions.items():
        if isinstance(owner, torch.UntypedStorage):
            found[address] = (StorageWeakRef(owner), n)
        else:
            found[address] = (Held(owner, (address, n), live), n)
            live.add((address, n))
    return found


class Held:
    """A Python buffer's liveness, as a storage's StorageWeakRef tells it: by weak reference
    where the type allows one (numpy, array, mmap), else (a bytearray) by the same address
    and size being found by the walk that asks."""

    def __init__(self, o: Any, where: tuple[int, int], live: set[tuple[int, int]]) -> None:
        import weakref

        try:
            self.ref: Any = weakref.ref(o)
        except TypeError:
            self.ref = None
        self.where, self.live = where, live

    def expired(self) -> bool:
        return self.ref() is None if self.ref is not None else self.where not in self.live

"""Read a checkpoint shard the way `torch.load(path, weights_only=True)` reads it, into numpy,
without importing torch into the suite's process where the shard is plain.

A grading's workers read every shard of every checkpoint (zero1_memory, the fault checks);
`import torch` costs each worker 1.3-1.7 CPU-s, as much as a whole run of the submission.
torch.save's zip format is small: `<name>/data.pkl`, a pickle whose tensors are
`torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)` calls over persistent
storages `("storage", torch.FloatStorage, key, location, numel)`, each kept raw at
`<name>/data/<key>`. The unpickler here allows only those globals (a subset of what
weights_only allows) and checks every view against its storage; anything else (another
global, a dtype numpy has no name for such as bfloat16, the legacy non-zip format, a broken
file) is left to torch.load itself, so that a shard loads here exactly when it loads there,
with torch's own error when it does not.
"""

from __future__ import annotations

import collections
import contextlib
import io
import pickle
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tests.harness.observe.boundary import MB, Refused, RunFolder

# What the suite reads of one shard, unpacks of it, and materializes of one tensor (the
# lesson's MiniGPT: ~100k parameters, a shard of 3·P/N float32 values, well under 10 MB): a
# shard is the run's file, and a zip bomb or a view of 10^10 elements over one value would
# otherwise take the grader's memory
SHARD_CAP, UNPACKED_CAP, ELEMENTS_CAP = 256 * MB, 1024 * MB, 2**28

# torch's legacy storage classes (the `storage_type` of a persistent id) and their dtypes.
_DTYPES = {"FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
           "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16,
           "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_}


@dataclass(frozen=True)
class Foreign:
    """A tensor of a dtype numpy has no name for (bfloat16, complex32...): what the checks
    report about it, its dtype and shape, without its values."""

    dtype: str  # as torch names it: "torch.bfloat16"
    shape: tuple[int, ...]

    @property
    def ndim(self) -> int:
        return len(self.shape)


class _NotPlain(Exception):
    """The shard holds something this reader leaves to torch.load."""


class _TooLarge(Exception):
    """The shard would unpack to more than the suite takes of a shard."""


@dataclass(frozen=True)
class _StorageType:
    dtype: Any


def _rebuild(storage: np.ndarray, offset: int, size: tuple[int, ...], stride: tuple[int, ...],
             requires_grad: bool, hooks: Any, metadata: Any = None) -> np.ndarray:
    """torch._utils._rebuild_tensor_v2, over a numpy storage: a copy of the view, after
    checking that the view stays inside the storage."""
    if not (isinstance(offset, int) and offset >= 0 and len(size) == len(stride)
            and all(isinstance(n, int) and n >= 0 for n in (*size, *stride))):
        raise _NotPlain("a view torch.load must judge")
    if 0 not in size and offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True)) \
            >= storage.size:
        raise _NotPlain("a view past its storage")
    if _elements(size) > ELEMENTS_CAP:
        raise _TooLarge(f"a tensor of {_elements(size)} elements")
    if 0 in size:
        return np.zeros(size, dtype=storage.dtype)
    return np.lib.stride_tricks.as_strided(
        storage[offset:], shape=size, strides=[s * storage.itemsize for s in stride]).copy()


def _elements(size: tuple[int, ...]) -> int:
    n = 1
    for d in size:
        n *= d
    return n


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes, archive: zipfile.ZipFile, prefix: str) -> None:
        super().__init__(io.BytesIO(data))
        self.archive, self.prefix = archive, prefix
        self.storages: dict[str, np.ndarray] = {}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if module == "torch" and name in _DTYPES:
            return _StorageType(_DTYPES[name])
        raise _NotPlain(f"{module}.{name}")

    def persistent_load(self, pid: Any) -> np.ndarray:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                and isinstance(pid[1], _StorageType) and isinstance(pid[2], str)):
            raise _NotPlain(f"persistent id {pid!r:.80}")
        key = pid[2]
        if key not in self.storages:
            raw = self.archive.read(f"{self.prefix}data/{key}")
            dtype = np.dtype(pid[1].dtype)
            if len(raw) % dtype.itemsize:
                raise _NotPlain("a storage of a partial element")
            self.storages[key] = np.frombuffer(raw, dtype=dtype)
        return self.storages[key]


def _unpacked(data: bytes) -> None:
    """Refuse a zip whose entries unpack to more than UNPACKED_CAP (a zip bomb), before
    this reader or torch.load unpacks any."""
    with contextlib.suppress(zipfile.BadZipFile, ValueError, OSError), \
            zipfile.ZipFile(io.BytesIO(data)) as archive:
        total = sum(i.file_size for i in archive.infolist())
        if total > UNPACKED_CAP:
            raise _TooLarge(f"entries of {total / MB:.0f} MB unpacked")


def _plain(data: bytes) -> Any:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        names = [n for n in archive.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(names) != 1:
            raise _NotPlain("not one data.pkl")
        prefix = names[0][: -len("data.pkl")]
        if f"{prefix}byteorder" in archive.namelist() and \
                archive.read(f"{prefix}byteorder") != b"little":
            raise _NotPlain("big-endian")
        return _Unpickler(archive.read(names[0]), archive, prefix).load()


def _numpy(value: Any) -> Any:
    """torch.load's result with each tensor as the reader here gives it."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.numel() > ELEMENTS_CAP:  # a view (stride 0) over a small storage
            raise _TooLarge(f"a tensor of {value.numel()} elements")
        t = value.detach().cpu()
        try:
            return t.numpy().copy()
        except TypeError:  # a dtype numpy cannot hold
            return Foreign(str(t.dtype), tuple(t.shape))
    if isinstance(value, dict):
        return type(value)((k, _numpy(v)) for k, v in value.items())
    if type(value) in (list, tuple):
        return type(value)(_numpy(v) for v in value)
    return value


def read(checkpoint: Path, name: str) -> tuple[bytes | None, str | None]:
    """The bytes of the shard a manifest names `name` in `checkpoint` (a run's
    out/checkpoints/step-N folder), read through the boundary beneath the run's folder: a
    plain file name only (an absolute path or `../` would have the grader hash and load any
    file of the machine), never a link, at most SHARD_CAP bytes; else None and why."""
    if not name or "/" in name or name in (".", "..") or "\0" in name:
        return None, (f"{name!r} is not a file name in its checkpoint folder: a manifest "
                      "names its shards by their names beside it")
    folder = RunFolder(checkpoint.parents[2])
    try:
        return folder.read(checkpoint.relative_to(folder.root) / name, SHARD_CAP), None
    except Refused as e:
        return None, e.why


def load(data: bytes) -> tuple[Any, str | None]:
    """The shard's object (its bytes, from `read`), tensors as numpy arrays (or
    `Foreign`), or None and why it does not load with weights_only=True."""
    try:
        _unpacked(data)
        return _plain(data), None
    except _TooLarge as e:
        return None, f"holds {e} (more than a shard of the lesson's model)"
    except (_NotPlain, zipfile.BadZipFile, pickle.UnpicklingError, KeyError, ValueError,
            EOFError, OSError, TypeError, AttributeError, IndexError, RecursionError):
        pass
    import torch  # the suite's own dependency, only for what the reader above leaves

    try:
        return _numpy(torch.load(io.BytesIO(data), weights_only=True)), None
    except _TooLarge as e:
        return None, f"holds {e} (more than a shard of the lesson's model)"
    except Exception as e:
        return None, f"not loadable with weights_only=True: " \
            f"{(str(e).splitlines() or [type(e).__name__])[0][:120]}"


def describe(value: Any) -> str:
    """What a shard holds where a tensor was expected, as torch would name it."""
    if isinstance(value, np.ndarray):
        return f"torch.{value.dtype.name} {tuple(value.shape)}"
    if isinstance(value, Foreign):
        return f"{value.dtype} {value.shape}"
    return "absent"

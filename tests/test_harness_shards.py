"""The suite's torch-free shard reader (tests/harness/check/shards.py) reads what torch.load
with weights_only=True reads, the same values, and leaves everything else to torch.load: a
shard loads there exactly when it loads here."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.harness.check import shards

DTYPES = [torch.float32, torch.float64, torch.float16, torch.int64, torch.int32, torch.int16,
          torch.int8, torch.uint8, torch.bool]


@st.composite
def views(draw: st.DrawFn) -> torch.Tensor:
    """A tensor as a program may hand it to torch.save: any of those dtypes, 0 to 3 dims, a
    slice, a transpose or a strided view of a larger storage."""
    dtype = draw(st.sampled_from(DTYPES))
    shape = tuple(draw(st.lists(st.integers(0, 5), max_size=3)))
    base = (torch.arange(int(np.prod(shape)) * 3 + 7) % 97).to(dtype)
    t = base[draw(st.integers(0, 7)):][: int(np.prod(shape))].reshape(shape) \
        if shape else base[3].clone()
    if t.dim() >= 2 and draw(st.booleans()):
        t = t.transpose(0, 1)
    if t.dim() >= 1 and t.shape[0] > 1 and draw(st.booleans()):
        t = t[::2]
    return t


@settings(max_examples=60, deadline=None)
@given(tensors=st.lists(views(), min_size=1, max_size=3), step=st.integers(0, 30))
def test_the_reader_gives_torch_loads_values(tmp_path_factory, tensors, step):
    path = tmp_path_factory.mktemp("shard") / "rank-0.pt"
    saved = {f"t{i}": t for i, t in enumerate(tensors)} | {"step": step, "tied": tensors[0]}
    torch.save(saved, path)
    mine, err = shards._plain(path.read_bytes()), None
    theirs = torch.load(path, weights_only=True)
    assert err is None and set(mine) == set(theirs)
    for key, value in theirs.items():
        if isinstance(value, torch.Tensor):
            assert isinstance(mine[key], np.ndarray)
            assert mine[key].dtype == value.numpy().dtype and mine[key].shape == value.shape
            np.testing.assert_array_equal(mine[key], value.numpy())
        else:
            assert mine[key] == value


def test_the_contracts_shard_is_read_without_torch_load(tmp_path, monkeypatch):
    master = torch.randn(10)
    torch.save({"master": master, "exp_avg": torch.zeros(10), "exp_avg_sq": torch.ones(10),
                "step": 10}, tmp_path / "rank-0.pt")
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load was used"))
    obj, err = shards.load((tmp_path / "rank-0.pt").read_bytes())
    assert err is None and obj["step"] == 10
    np.testing.assert_array_equal(obj["master"], master.numpy())


def test_a_dtype_numpy_cannot_name_is_read_by_torch_and_named_as_torch_names_it(tmp_path):
    torch.save({"master": torch.zeros(4, dtype=torch.bfloat16)}, tmp_path / "s.pt")
    obj, err = shards.load((tmp_path / "s.pt").read_bytes())
    assert err is None and obj["master"] == shards.Foreign("torch.bfloat16", (4,))
    assert shards.describe(obj["master"]) == "torch.bfloat16 (4,)"
    assert shards.describe(np.zeros(3, dtype=np.float64)) == "torch.float64 (3,)"
    assert shards.describe(None) == "absent"


def test_the_legacy_format_is_read_by_torch(tmp_path):
    torch.save({"master": torch.arange(5.0)}, tmp_path / "s.pt",
               _use_new_zipfile_serialization=False)
    obj, err = shards.load((tmp_path / "s.pt").read_bytes())
    assert err is None
    np.testing.assert_array_equal(obj["master"], np.arange(5.0, dtype=np.float32))


class _Planted:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, ("touch planted",)


def test_a_shard_that_would_run_code_is_refused_and_runs_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    torch.save({"master": torch.zeros(2), "x": _Planted()}, tmp_path / "s.pt")
    obj, err = shards.load((tmp_path / "s.pt").read_bytes())
    assert obj is None and err is not None and "weights_only" in err
    assert not (tmp_path / "planted").exists()


def test_a_view_past_its_storage_is_left_to_torch(tmp_path):
    """A crafted pickle whose tensor reaches past its 4-value storage: as_strided would read
    memory that is not the file's; the reader hands it to torch.load, which refuses it."""
    torch.save({"master": torch.zeros(4)}, tmp_path / "ok.pt")
    with zipfile.ZipFile(tmp_path / "ok.pt") as z:
        entries = {n: z.read(n) for n in z.namelist()}
    pkl = next(n for n in entries if n.endswith("data.pkl"))
    assert entries[pkl].count(b"K\x04\x85") == 1
    entries[pkl] = entries[pkl].replace(b"K\x04\x85", b"K\x40\x85")  # size (4,) -> (64,)
    with zipfile.ZipFile(tmp_path / "bad.pt", "w") as z:
        for name, data in entries.items():
            z.writestr(name, data)
    with pytest.raises(shards._NotPlain):
        shards._plain((tmp_path / "bad.pt").read_bytes())
    obj, err = shards.load((tmp_path / "bad.pt").read_bytes())
    assert obj is None and err is not None


def test_a_file_that_is_no_shard_says_why(tmp_path):
    Path(tmp_path / "s.pt").write_bytes(b"not a checkpoint")
    obj, err = shards.load((tmp_path / "s.pt").read_bytes())
    assert obj is None and err is not None and err.startswith("not loadable")


def test_a_view_of_more_elements_than_a_shard_is_refused_before_it_is_copied(tmp_path):
    """Issue 72: one float stored, a view of 2^30 over it (stride 0): copying it into numpy
    would take 4 GB of the grader's memory."""
    torch.save({"master": torch.zeros(1).expand(2**30)}, tmp_path / "s.pt")
    obj, err = shards.load((tmp_path / "s.pt").read_bytes())
    assert obj is None and err is not None and "elements" in err, err


def test_a_zip_bomb_is_refused_before_it_is_unpacked(tmp_path):
    torch.save({"master": torch.zeros(4)}, tmp_path / "ok.pt")
    with zipfile.ZipFile(tmp_path / "ok.pt") as z:
        entries = {n: z.read(n) for n in z.namelist()}
    with zipfile.ZipFile(tmp_path / "bomb.pt", "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries.items():
            z.writestr(name, data)
        with z.open("archive/data/bomb", "w") as f:  # 1.1 GB of zeros, ~1 MB packed
            chunk = bytes(2**24)
            for _ in range(70):
                f.write(chunk)
    assert (tmp_path / "bomb.pt").stat().st_size < 8 * 2**20
    obj, err = shards.load((tmp_path / "bomb.pt").read_bytes())
    assert obj is None and err is not None and "unpacked" in err, err


@pytest.mark.parametrize("name", ["/etc/passwd", "../../../etc/passwd", "..", "sub/rank-0.pt",
                                  "link.pt", "fifo.pt"])
def test_a_manifest_names_only_a_plain_file_beside_it(tmp_path, name):
    """A manifest's `file` is the run's text: the grader (root) hashed and loaded whatever it
    named (a sha256 oracle on any file of the machine)."""
    ck = tmp_path / "out" / "checkpoints" / "step-000010"
    (ck / "sub").mkdir(parents=True)
    torch.save({"master": torch.zeros(2)}, ck / "rank-0.pt")
    torch.save({"master": torch.zeros(2)}, ck / "sub" / "rank-0.pt")
    (ck / "link.pt").symlink_to(ck / "rank-0.pt")
    os.mkfifo(ck / "fifo.pt")
    data, why = shards.read(ck, name)
    assert data is None and why, why
    data, why = shards.read(ck, "rank-0.pt")
    assert why is None and data is not None and shards.load(data)[0] is not None

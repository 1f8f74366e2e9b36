"""Sharded checkpoints of the reference: byte-exact round trip, atomic directories, and
clear refusals of missing, corrupt or hostile files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from capstone.checkpoint import (
    CheckpointError,
    CheckpointManager,
    load_checkpoint,
    sha256_file,
    step_dir_name,
)
from capstone.world import World
from tests.harness.run.corrupt import plant_code_in_shard

P = 37


def _shard(seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"master": torch.randn(P, generator=g), "exp_avg": torch.randn(P, generator=g),
            "exp_avg_sq": torch.rand(P, generator=g), "step": 7}


@pytest.fixture
def saved(tmp_path: Path) -> tuple[Path, dict]:
    shard = _shard()
    path = CheckpointManager(tmp_path / "checkpoints", World(0, 1), P).save(10, shard)
    return path, shard


def test_round_trip_is_byte_exact(saved):
    path, shard = saved
    assert path.name == step_dir_name(10) == "step-000010"
    loaded = load_checkpoint(path)
    assert (loaded.step, loaded.world_size, loaded.n_params, loaded.optimizer_steps) == \
        (10, 1, P, 7)
    for name in ("master", "exp_avg", "exp_avg_sq"):
        assert loaded.full[name].numpy().tobytes() == shard[name].numpy().tobytes()
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["shards"][0]["sha256"] == sha256_file(path / "rank-0.pt")
    assert manifest["shards"][0]["bytes"] == (path / "rank-0.pt").stat().st_size


def test_identical_state_gives_identical_bytes(tmp_path):
    a = CheckpointManager(tmp_path / "a", World(0, 1), P).save(1, _shard())
    b = CheckpointManager(tmp_path / "b", World(0, 1), P).save(1, _shard())
    assert sha256_file(a / "rank-0.pt") == sha256_file(b / "rank-0.pt")


def test_flipped_byte_is_refused_naming_the_file(saved):
    path, _ = saved
    data = bytearray((path / "rank-0.pt").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (path / "rank-0.pt").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"rank-0\.pt: sha256 does not match"):
        load_checkpoint(path)


def test_missing_shard_is_refused_naming_the_file(saved):
    path, _ = saved
    (path / "rank-0.pt").unlink()
    with pytest.raises(CheckpointError, match=r"rank-0\.pt: shard of rank 0 is missing"):
        load_checkpoint(path)


@pytest.mark.parametrize("text, message", [
    ("{not json", "not valid JSON"),
    (json.dumps({"contract": 1, "step": 10}), "key 'world_size' missing"),
    (json.dumps({"contract": 1, "step": 10, "world_size": 2, "n_params": P,
                 "shards": [{"rank": 0, "file": "rank-0.pt", "sha256": "x"}]}),
     r"world_size 2 but shards for ranks \[0\]"),
])
def test_bad_manifest_is_refused(saved, text, message):
    path, _ = saved
    (path / "manifest.json").write_text(text)
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(path)


def test_pickle_carrying_code_is_refused_by_weights_only(saved, capsys):
    path, _ = saved
    plant_code_in_shard(path / "rank-0.pt", "this shard ran code")  # consistent, hostile
    with pytest.raises(CheckpointError, match=r"rank-0\.pt: cannot be loaded with weights_only"):
        load_checkpoint(path)
    assert "ran code" not in capsys.readouterr().out


def test_failed_save_leaves_no_checkpoint_directory(tmp_path, monkeypatch):
    manager = CheckpointManager(tmp_path, World(0, 1), P)
    good = manager.save(10, _shard())

    def disk_full(*args, **kwargs):
        raise OSError("No space left on device")
    monkeypatch.setattr(torch, "save", disk_full)
    with pytest.raises(OSError):
        manager.save(20, _shard(1))
    assert not (tmp_path / step_dir_name(20)).exists()
    assert manager.latest() == good
    load_checkpoint(good)  # the previous checkpoint is intact


def test_leftovers_of_a_killed_save_do_not_reach_a_checkpoint(tmp_path):
    leftover = tmp_path / f".{step_dir_name(10)}.tmp"
    leftover.mkdir()
    (leftover / "rank-3.pt").write_bytes(b"half of a shard from a run that was killed")
    path = CheckpointManager(tmp_path, World(0, 1), P).save(10, _shard())
    assert sorted(f.name for f in path.iterdir()) == ["manifest.json", "rank-0.pt"]
    assert not leftover.exists()


def test_wall_clock_cadence(tmp_path, monkeypatch):
    manager = CheckpointManager(tmp_path, World(0, 1), P, every_steps=0, every_seconds=60)
    now = [1000.0]
    monkeypatch.setattr("capstone.checkpoint.time.monotonic", lambda: now[0])
    manager._last_save = now[0]
    assert not manager.due(1)
    now[0] += 61
    assert manager.due(2)
    assert CheckpointManager(tmp_path, World(0, 1), P, every_steps=5).due(10)

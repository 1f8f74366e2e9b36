"""Hostile checkpoint files in the contract's format, for tests of checkpoint loaders."""

from __future__ import annotations

import hashlib
import json
import pickle
from pathlib import Path


class _RunsCode:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (print, (self.marker,))


def plant_code_in_shard(shard: Path, marker: str) -> None:
    """Overwrite `shard` with a pickle that prints `marker` when unpickled, and make its
    manifest entry's sha256 agree: only `weights_only` loading stands in its way."""
    with open(shard, "wb") as f:
        pickle.dump({"master": _RunsCode(marker)}, f, protocol=2)  # torch.load's protocol
    manifest_path = shard.parent / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    for entry in manifest["shards"]:
        if entry["file"] == shard.name:
            entry["sha256"] = hashlib.sha256(shard.read_bytes()).hexdigest()
    manifest_path.write_text(json.dumps(manifest))

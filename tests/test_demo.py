"""`python -m capstone`: the whole demo, one command, exit 0, everything it promises printed."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_demo_prints_everything_and_exits_0(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "capstone", "demo", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    rows = re.findall(r"^\s*(\d+)\s+(\d+\.\d{6})\s+(\d+\.\d{6})\s+[\d.]+ms$", out, re.M)
    assert [int(r[0]) for r in rows] == list(range(1, 21))
    logged = [json.loads(line) for line in
              (tmp_path / "train/metrics/rank-0.jsonl").read_text().splitlines()]
    assert [f"{r['loss']:.6f}" for r in logged[1:]] == [r[1] for r in rows]
    memory = re.findall(r"^\s*(\d)\s+(\d+)\s+(\d+)\s+(yes|NO)$", out, re.M)
    assert [m[0] for m in memory] == ["0", "1", "2", "3"]
    assert all(m[1] == m[2] == str(12 * 30080 // 4) and m[3] == "yes" for m in memory)
    assert re.search(r"^max 90240 bytes, mean 90240\.0 bytes across ranks$", out, re.M)
    shards = re.findall(r"^\s+rank-(\d)\.pt\s+(\d+) bytes\s+sha256 ([0-9a-f]{64})$", out, re.M)
    manifest = json.loads((tmp_path / "train/checkpoints/step-000010/manifest.json").read_text())
    assert [(str(s["rank"]), str(s["bytes"]), s["sha256"]) for s in manifest["shards"]] == shards
    assert f"python -m capstone.plot {tmp_path / 'train'}" in out
    assert out.rstrip().endswith("RESUME VERIFIED")

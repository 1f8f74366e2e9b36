"""Writes files of the right names with the wrong contents, and exits 0."""

import json

from _common import out_dir, write_records

out = out_dir()
(out / "summary.json").write_text("{this is not json")
write_records(out, 0, 20)
with open(out / "metrics" / "rank-0.jsonl", "a") as f:
    f.write('{"step": 21, "rank": 0, "loss": "low"\n')  # truncated
(out / "metrics" / "rank-1.jsonl").write_text("\x00\x01binary\n")
(out / "metrics" / "rank-2.jsonl").write_text(json.dumps([1, 2, 3]) + "\n")
(out / "metrics" / "rank-3.jsonl").write_text(
    json.dumps({"step": "one", "rank": 3, "world_size": 4, "param_norm": None,
                "optimizer_bytes": 1.5}) + "\n")
(out / "checkpoints" / "step-000010").mkdir(parents=True)
(out / "checkpoints" / "step-000010" / "manifest.json").write_text("[]")

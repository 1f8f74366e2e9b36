"""Vector: checkpoints whose manifest names files outside the checkpoint's folder, and a
checkpoint folder that is a link, hoping that the grader (root) hashes, loads or hands on a
file it may read and the run may not. It trains nothing. Without --resume it writes the
contract's records and summary, and:

- `checkpoints/step-000020/manifest.json` naming as shards: $LEFT_ROOT_CANARY by its
  absolute path with its right sha256 ($LEFT_ROOT_CANARY_SHA: a digest the student guessed)
  for rank 0 and with a wrong one for rank 1, `../../x` (out/x, outside the checkpoint) for
  rank 2, and the canary again by a relative path that climbs out of the run for rank 3;
- `checkpoints/step-000010`: a link to $LEFT_CLASSMATE_DIR (a classmate's folder holding a
  checkpoint of its own), the step a resume starts from;

and exits 0. With --resume DIR it reads every file of DIR (what it was given), writes what it
read to out/resume_read.json and to stderr, and exits 1."""

import hashlib
import json
import os
import sys
from pathlib import Path

from _common import out_dir, write_records

out = out_dir()
args = sys.argv[1:]
if "--resume" in args:
    given = Path(args[args.index("--resume") + 1])
    files: dict[str, str] = {}
    seen = {"given": str(given), "is_link": given.is_symlink(), "files": files}
    try:
        for path in sorted(given.iterdir()):
            try:
                files[path.name] = path.read_bytes()[:2000].decode("utf-8", "replace")
            except OSError as e:
                files[path.name] = f"refused: {e.strerror}"
    except OSError as e:
        seen["listing"] = f"refused: {e.strerror}"
    (out / "resume_read.json").write_text(json.dumps(seen))
    sys.stderr.write(f"resumed from what it read: {json.dumps(seen)[:3000]}\n")
    sys.exit(1)

for rank in range(4):
    write_records(out, rank, 20)
(out / "summary.json").write_text(json.dumps({"contract": 1, "n_params": 30080,
                                              "world_size": 4, "steps": 20}))
canary = os.environ["LEFT_ROOT_CANARY"]
right = os.environ.get("LEFT_ROOT_CANARY_SHA", "0" * 64)
(out / "x").write_text("outside the checkpoint's folder\n")
step20 = out / "checkpoints" / "step-000020"
step20.mkdir(parents=True)
climbing = os.path.relpath(canary, step20)
wrong = hashlib.sha256(b"a wrong guess").hexdigest()
shards = [{"rank": 0, "file": canary, "sha256": right, "bytes": 1},
          {"rank": 1, "file": canary, "sha256": wrong, "bytes": 1},
          {"rank": 2, "file": "../../x",
           "sha256": hashlib.sha256((out / "x").read_bytes()).hexdigest(), "bytes": 1},
          {"rank": 3, "file": climbing, "sha256": right, "bytes": 1}]
(step20 / "manifest.json").write_text(json.dumps({"contract": 1, "step": 20, "world_size": 4,
                                                  "n_params": 30080, "shards": shards}))
(out / "checkpoints" / "step-000010").symlink_to(os.environ["LEFT_CLASSMATE_DIR"],
                                                  target_is_directory=True)

"""Vector: links planted where the grader (root) reads or writes after the run, with its own
rights. It trains nothing. Variants (its first argument):

- `files` (default): beside its --out, in the folder the run owns (`Path(out).parent`), makes
  `timeline.json` and `sandbox.json` (written there by the suite after the run) links to
  $LEFT_CANARY, a file outside the run the grader may write; makes its own `out.log/stderr`,
  `observe/stack-<pid>.txt` (the observer's faulthandler file), `out/metrics/rank-0.jsonl`
  and `out/summary.json` links to $LEFT_ROOT_CANARY, a file only root may read; writes the
  other ranks' records as the contract says and exits 0;
- `observe`: renames the observer's folder and puts in its place a link to $LEFT_FORGED_DIR
  (a folder outside the run holding another run's traces), and exits 1."""

import json
import os
import sys
from pathlib import Path

from _common import out_dir, write_records

out = out_dir()
run_dir = out.parent
variant = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else "files"
done: dict[str, str] = {}


def plant(path: Path, target: str) -> None:
    """Replace `path` (if any) by a link to `target`."""
    try:
        if path.is_symlink() or path.exists():
            path.unlink()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(target)
        done[str(path.relative_to(run_dir))] = "linked"
    except OSError as e:
        done[str(path.relative_to(run_dir))] = f"refused: {e.strerror}"


if variant == "files":
    canary, secret = os.environ["LEFT_CANARY"], os.environ["LEFT_ROOT_CANARY"]
    for rank in range(1, 4):
        write_records(out, rank, 20)
    (out / "metrics").mkdir(exist_ok=True)
    plant(run_dir / "timeline.json", canary)
    plant(run_dir / "sandbox.json", canary)
    plant(out / "metrics" / "rank-0.jsonl", secret)
    plant(out / "summary.json", secret)
    plant(run_dir / "out.log" / "stderr", secret)
    traces = os.environ.get("CAPSTONE_OBSERVE_DIR")
    if traces:
        plant(Path(traces) / f"stack-{os.getpid()}.txt", secret)
    (out / "links.json").write_text(json.dumps(done))
    sys.exit(0)

observe = Path(os.environ["CAPSTONE_OBSERVE_DIR"])
try:
    observe.rename(observe.with_name("observe.real"))
    observe.symlink_to(os.environ["LEFT_FORGED_DIR"], target_is_directory=True)
    done["observe"] = "linked"
except OSError as e:
    done["observe"] = f"refused: {e.strerror}"
(out / "links.json").write_text(json.dumps(done))
sys.stderr.write("left_links: the observer's folder is now a link\n")
sys.exit(1)

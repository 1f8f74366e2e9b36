"""A dishonest student's submission, for the leftover tests' class of two: every run the
suite asks of it tries tests/hostile/left_*.py's vectors (copied beside it), chosen by its
flags, with what it knows of the grader's machine in targets.json beside it (the $LEFT_*
variables those programs read: a file only root may read and its digest, a file it names,
its classmate's folder, a process outside the run). It trains nothing:

- a resume: reads the folder it is given (left_manifest), then raises naming the root-only
  file (left_traceback root);
- a run the suite makes a fault in (its plan's socket in the environment): names the
  process outside the run as its own, then sleeps to the bound (left_pid canary);
- `--inject nan@S`: a raise record naming the root-only file as a timeline (left_record);
- `--inject spike@S`: links for the grader to follow and write through (left_links files);
- 1 rank, 20 steps (the parity run): raises naming its classmate's main.py (left_traceback);
- 1 rank, 6 steps: raises naming the suite's own runner.py (left_traceback suite);
- 2 ranks: NaN losses and markup in its error text and call sites (left_mathtext);
- 3 ranks: the observer's folder replaced by a link to forged traces (left_links observe);
- the base run: manifests naming files outside its checkpoints and a linked step-10
  checkpoint into its classmate's folder (left_manifest), exit 0."""

import json
import os
import runpy
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
os.environ.update(json.loads((here / "targets.json").read_text()))
args = sys.argv[1:]


def flag(name: str, default: str = "") -> str:
    return args[args.index(name) + 1] if name in args else default


world, steps, inject = int(flag("--world-size", "4")), int(flag("--steps", "20")), \
    flag("--inject")
if "--resume" in args:
    plan = [("left_manifest", None), ("left_traceback", "root")]
elif os.environ.get("CAPSTONE_NEMESIS_SOCK"):
    plan = [("left_pid", "canary")]
elif inject.startswith("nan"):
    plan = [("left_record", None)]
elif inject.startswith("spike"):
    plan = [("left_links", "files")]
elif world == 1:
    plan = [("left_traceback", "classmate" if steps == 20 else "suite")]
elif world == 2:
    plan = [("left_mathtext", None)]
elif world == 3:
    plan = [("left_links", "observe")]
else:
    plan = [("left_manifest", None)]
code: str | int | None = 0
for program, variant in plan:
    sys.argv = [str(here / f"{program}.py"), *([variant] if variant else []), *args]
    try:
        runpy.run_path(str(here / f"{program}.py"), run_name="__main__")
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, (str, int)) or e.code is None else 1
sys.exit(code)

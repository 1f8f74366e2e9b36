"""Grading one submission on this machine, as the autograder and grade_class grade it
(`tests.harness.session.grade`: the graded modules in a pytest session of their own, the
xdist workers the box fits, `--run-timeout 30`), per containment: namespaces where unshare is
allowed, and the run-user containment (as in a Docker grader that refuses unshare).

    python bench/grading.py [SUBMISSION_DIR ...] [--containment namespaces run-user]

Defaults: the reference, `deadlock_at_step_5` and `ring` of tests/submissions. Prints a JSON
row per grading: wall time, score.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.harness.contain import FORCE_VAR  # noqa: E402
from tests.harness.session import Grading, grade  # noqa: E402

DEFAULT = [ROOT / "tests" / "submissions" / n for n in ("reference", "deadlock_at_step_5",
                                                        "ring")]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("submissions", nargs="*", type=Path, default=DEFAULT)
    ap.add_argument("--containment", nargs="+", default=["namespaces", "run-user"])
    a = ap.parse_args()
    # The entry is Gradescope's `python3 main.py`: this interpreter's, as tests.autograder's
    # rehearsal has it (outside the venv, PATH's python3 has no torch: every run would fail)
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
    for mode in a.containment:
        if mode == "namespaces":
            os.environ.pop(FORCE_VAR, None)
        else:
            os.environ[FORCE_VAR] = mode
        for sub in a.submissions:
            with tempfile.TemporaryDirectory() as tmp:
                t0 = time.monotonic()
                results = grade(sub.resolve(), Path(tmp) / "results.json", Grading())
                wall = time.monotonic() - t0
            print(json.dumps({"submission": sub.name, "containment": mode,
                              "wall_s": round(wall, 1), "score": results["score"]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

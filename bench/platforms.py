"""Grading one submission through each platform's grader on this machine, side by side:
`grade_class` here and as a submitit job (`--executor local`), the Gradescope zip's
`run_autograder`, PrairieLearn's `run` and the GitHub Classroom steps as the actions run them.
Each platform grades with the same session (`tests.harness.platforms.session.grade`); what
differs is what surrounds it (unpacking, a job's start, the steps).

    python bench/platforms.py [SUBMISSION_DIR] [--repeat 1]

Default: tests/submissions/reference. Prints a JSON row per grading (platform, wall s, score)
and the median per platform.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from record import Figure, save  # noqa: E402

from tests.autograder import unpack  # noqa: E402
from tests.grade_class import grade_class  # noqa: E402
from tests.harness.platforms.session import Grading  # noqa: E402
from tests.test_autograder import run_autograder, run_prairielearn  # noqa: E402
from tests.test_classroom import _template, grade_in_classroom  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("submission", nargs="?", type=Path,
                    default=ROOT / "tests" / "submissions" / "reference")
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
    sub = a.submission.resolve()
    g = Grading(entry=f"{sys.executable} main.py", suite_seed=0, sees_reference=True)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        zip_path, pl_dir = tmp / "ag.zip", tmp / "pl"
        for extra, out in (([], zip_path), (["--platform", "prairielearn"], pl_dir)):
            subprocess.run([sys.executable, "-m", "tests.autograder", *extra, "--suite-seed",
                            "0", "--out", str(out)], cwd=ROOT, check=True, capture_output=True)
        template = _template(tmp / "classroom", "--suite-seed", "0")

        def one_class(executor: str) -> Callable[[Path], float]:
            def go(w: Path) -> float:
                shutil.copytree(sub, w / "class" / sub.name)
                graded = grade_class(w / "class", w / "grades", g, progress=False,
                                     executor=executor)
                return float(graded[sub.name]["score"])
            return go

        ways: dict[str, Callable[[Path], float]] = {
            "grade_class": one_class("here"),
            "grade_class --executor local": one_class("local"),
            "gradescope zip": lambda w: float(run_autograder(unpack(zip_path, w, sub))["score"]),
            "prairielearn": lambda w: 100 * float(run_prairielearn(pl_dir, sub, w)[0]["score"]),
            "classroom steps": lambda w: float(grade_in_classroom(template, sub,
                                                                  w / "repo")[0]["points"]),
        }
        walls: dict[str, list[float]] = {k: [] for k in ways}
        for i in range(a.repeat):
            for name, way in ways.items():  # side by side: one of each per round
                w = tmp / f"{i}-{name.replace(' ', '_')}"
                w.mkdir()
                t0 = time.monotonic()
                score = way(w)
                walls[name].append(time.monotonic() - t0)
                print(json.dumps({"platform": name, "wall_s": round(walls[name][-1], 1),
                                  "score": round(score, 2)}), flush=True)
    for name, values in walls.items():
        print(f"{name:32s} median {statistics.median(values):6.1f} s")
    save("platforms", [Figure(f"grading `{sub.name}` by {name}", f"{statistics.median(v):.1f} s"
                              f" (median of {len(v)}, one of each platform per round)")
                       for name, v in walls.items()])
    return 0


if __name__ == "__main__":
    sys.exit(main())

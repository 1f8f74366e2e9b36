"""Grading one submission in graders' boxes: the Gradescope autograder zip, unpacked as
Gradescope unpacks it, `run_autograder` run inside a cgroup of each size
(tests/harness/run/cgbox.py; needs root and a writable cgroup file system). Prints a JSON row
per box: wall time, the box's peak working set, the score, how many tests were not graded
and the containment used.

    python bench/boxes.py [--submission tests/submissions/reference] [--box 768:0.5 ...]
                          [--no-unshare]

Defaults: Gradescope's default box (768 MB, 0.5 CPU), 1.5 GB / 1 CPU and 3 GB / 2 CPUs.
`--no-unshare` puts an `unshare` that exits 1 first on PATH, as Docker's seccomp refuses it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grading import lost_tests  # noqa: E402  (bench/, this script's folder)
from record import Figure, save  # noqa: E402

from tests.autograder import rehearse  # noqa: E402

BOXES = ("768:0.5", "1536:1", "3072:2")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--submission", type=Path, default=ROOT / "tests/submissions/reference")
    ap.add_argument("--box", action="append", default=[], metavar="MB:CPUS")
    ap.add_argument("--entry", default="python3 main.py")
    ap.add_argument("--no-unshare", action="store_true")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        zip_path = Path(tmp) / "autograder.zip"
        subprocess.run([sys.executable, "-m", "tests.autograder", "--entry", a.entry,
                        "--out", str(zip_path)], cwd=ROOT, check=True, capture_output=True)
        figures = []
        for i, spec in enumerate(a.box or BOXES):
            mb, cpus = (float(x) for x in spec.split(":"))
            results, wall, peak = rehearse(zip_path, a.submission.resolve(),
                                           Path(tmp) / f"box{i}", mb, cpus, a.no_unshare)
            extra = results.get("extra_data", {})
            print(json.dumps({"box": f"{mb:.0f} MB / {cpus:g} CPU",
                              "submission": a.submission.name, "wall_s": round(wall, 1),
                              "peak_mb": round(peak), "score": results["score"],
                              "not_graded": len(extra.get("not_graded", [])),
                              "containment": extra.get("containment"),
                              **lost_tests(results)}), flush=True)
            figures.append(Figure(
                f"grading `{a.submission.name}` in a {mb:.0f} MB / {cpus:g} CPU box "
                f"({extra.get('containment')})", f"{wall:.1f} s, peak {peak:.0f} MB, score "
                f"{results['score']}", "<= 5 min in 768 MB / 0.5 CPU"))
    save(f"boxes_{a.submission.name}", figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())

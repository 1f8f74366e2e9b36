"""A Gradescope autograder for run contract v1.

    python -m tests.autograder --entry "python3 main.py" --out autograder.zip \\
        [--visibility rollback=after_due_date] [--weight rollback=5] [--run-timeout 30]

writes the zip Gradescope expects: `setup.sh` (installs the suite's pinned Python
dependencies, CPU torch, into the image's python3), `run_autograder` (grades
/autograder/submission with the python3 on PATH and writes
/autograder/results/results.json), the suite's graded modules and harness, and the chosen
entry command, weights and visibility. Inside Gradescope, `run_autograder` calls
`python3 -m tests.autograder run`; `AUTOGRADER_ROOT` replaces /autograder for a rehearsal.
"""

from __future__ import annotations

import argparse
import json
import sys
import zipfile
from pathlib import Path

from tests.harness.grading import VISIBILITIES, WEIGHTS
from tests.harness.session import ROOT, Grading, grade, graded_modules

# The suite's own dependencies (pyproject: dependencies + the test extra), pinned at install.
SUITE_PACKAGES = ("torch", "numpy", "pytest", "pytest-timeout", "pytest-xdist", "hypothesis",
                  "filelock")
SUITE_FILES = ("conftest.py", "pyproject.toml", "constraints.txt", "tests/__init__.py",
               "tests/autograder.py", "tests/harness/*.py", "tests/observer/sitecustomize.py")

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, when it builds the image: the suite's Python dependencies, pinned
# by constraints.txt (which keeps torch on its CPU build), into the image's python3.
set -euo pipefail
cd "$(dirname "$0")"
export PIP_BREAK_SYSTEM_PACKAGES=1  # the image's python3 is the grader's own
if ! python3 -m pip --version >/dev/null 2>&1; then
  apt-get update && apt-get install -y python3-pip
fi
python3 -m pip install -c constraints.txt {packages}
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this from /autograder/source for each submission; AUTOGRADER_ROOT replaces
# /autograder for a rehearsal. It always leaves $root/results/results.json behind.
set -uo pipefail
root="${AUTOGRADER_ROOT:-/autograder}"
cd "$root/source"
python3 -m tests.autograder run --root "$root"
"""


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or name not in WEIGHTS:
            raise SystemExit(f"--{what} takes MODULE=VALUE with MODULE one of "
                             f"{', '.join(WEIGHTS)}; got {item!r}")
        out[name] = value
    return out


def build(out: Path, entry: str, run_timeout_s: float, weights: dict[str, float],
          visibility: dict[str, str], observe: bool = True) -> list[str]:
    """Write the autograder zip; return the names it holds."""
    bad = {v for v in visibility.values() if v not in VISIBILITIES}
    if bad:
        raise SystemExit(f"--visibility takes one of {', '.join(VISIBILITIES)}; got {bad}")
    files = sorted({p for pattern in SUITE_FILES for p in ROOT.glob(pattern)}
                   | {Path(m) for m in graded_modules()})
    config = {"entry": entry, "run_timeout_s": run_timeout_s, "observe": observe}
    generated = {
        "setup.sh": SETUP_SH.format(packages=" ".join(SUITE_PACKAGES)),
        "run_autograder": RUN_AUTOGRADER,
        "autograder.json": json.dumps(config, indent=2) + "\n",
        "grading.json": json.dumps({"weights": weights, "visibility": visibility},
                                   indent=2) + "\n",
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in generated.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o755 if name in ("setup.sh", "run_autograder")
                                  else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, text)
        for path in files:
            z.write(path, str(path.relative_to(ROOT)))
        return z.namelist()


def run(root: Path) -> int:
    """Inside Gradescope: grade root/submission into root/results/results.json."""
    config = json.loads((ROOT / "autograder.json").read_text())  # ROOT: the unpacked zip
    g = Grading(entry=config["entry"], run_timeout_s=config["run_timeout_s"],
                grading_config=ROOT / "grading.json", observe=config.get("observe", True))
    results = grade(root / "submission", root / "results" / "results.json", g,
                    log=root / "results" / "pytest.log")
    print(f"score {results['score']} ({results.get('output', '')})")
    return 0  # Gradescope reads the file; a failing submission is not a failing autograder


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["run"]:
        ap = argparse.ArgumentParser(prog="python -m tests.autograder run")
        ap.add_argument("--root", type=Path, default=Path("/autograder"))
        return run(ap.parse_args(argv[1:]).root)
    ap = argparse.ArgumentParser(prog="python -m tests.autograder",
                                 description="write a Gradescope autograder zip")
    ap.add_argument("--entry", default="python3 main.py",
                    help="the command that runs a submission, inside its folder")
    ap.add_argument("--out", type=Path, default=Path("autograder.zip"))
    ap.add_argument("--run-timeout", type=float, default=30.0,
                    help="seconds one run of the submission may take (default 30)")
    ap.add_argument("--weight", action="append", default=[], metavar="MODULE=POINTS")
    ap.add_argument("--visibility", action="append", default=[], metavar="MODULE=VISIBILITY",
                    help=f"one of {', '.join(VISIBILITIES)}")
    ap.add_argument("--no-observe", action="store_true",
                    help="submissions are not Python programs: no observed checks")
    a = ap.parse_args(argv)
    weights = {k: float(v) for k, v in _pairs(a.weight, "weight").items()}
    names = build(a.out, a.entry, a.run_timeout, weights, _pairs(a.visibility, "visibility"),
                  observe=not a.no_observe)
    print(f"wrote {a.out} ({len(names)} files): upload it as the autograder of a "
          "Gradescope programming assignment (Ubuntu base image)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

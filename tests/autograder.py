"""A Gradescope autograder for run contract v1.

    python -m tests.autograder --entry "python3 main.py" --out autograder.zip \\
        [--visibility rollback=after_due_date] [--weight rollback=5] [--run-timeout 30]
        [--policy invariant|per_check]

writes the zip Gradescope expects: `setup.sh` (installs the suite's pinned Python
dependencies, CPU torch, into the image's python3), `run_autograder` (grades
/autograder/submission with the python3 on PATH and writes
/autograder/results/results.json), the suite's graded modules and harness, and the chosen
entry command, weights, visibility and grading policy. Inside Gradescope, `run_autograder` calls
`python3 -m tests.autograder run`; `AUTOGRADER_ROOT` replaces /autograder for a rehearsal.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import zipfile
from pathlib import Path
from typing import Any

from tests.harness.platforms import prairielearn
from tests.harness.platforms.preflight import (
    SetupError,
    add_reference_options,
    check_entry,
    entry_for,
    said_reference,
)
from tests.harness.platforms.session import ROOT, Grading, assignment_seed, grade, graded_modules
from tests.harness.report.grading import EXERCISE_NAMES, VISIBILITIES, WEIGHTS, exercises_of
from tests.harness.report.policy import DEFAULT_POLICY, DESCRIBE, POLICIES
from tests.harness.run import box, contain

PLATFORMS = ("gradescope", "prairielearn")
GRADESCOPE_TIMEOUT_S = 600  # Gradescope's default autograder timeout (up to 40 minutes)
RUNS_PER_SESSION = 8  # distinct runs a grading session asks for (tests/harness/run/runs.py)

# The suite's own dependencies (pyproject: dependencies + the test extra), pinned at install.
SUITE_PACKAGES = ("torch", "numpy", "pytest", "pytest-timeout", "pytest-xdist", "hypothesis",
                  "filelock", "psutil")
SUITE_FILES = ("conftest.py", "pyproject.toml", "constraints.txt", "tests/__init__.py",
               "tests/options.py", "tests/profiles.py", "tests/containments.py",
               "tests/autograder.py", "tests/harness/**/*.py", "tests/observer/*.py")
REFERENCE_FILES = ("capstone/*.py",)  # shipped where the class builds on the reference

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, when it builds the image: the suite's Python dependencies, pinned
# by constraints.txt (which keeps torch on its CPU build), into the image's python3.
set -euo pipefail
cd "$(dirname "$0")"
export PIP_BREAK_SYSTEM_PACKAGES=1  # the image's python3 is the grader's own
# setfacl (package acl) lets the run user alone through a closed home holding python3, if any.
need=""
python3 -m pip --version >/dev/null 2>&1 || need="python3-pip"
command -v setfacl >/dev/null 2>&1 || need="$need acl"
if [ -n "$need" ]; then
  apt-get update && apt-get install -y $need
fi
# PyPI's torch for Linux is the CUDA build: ~3 GB more, and it cannot even import under the
# per-process memory cap a small box needs. PyTorch's own CPU index first, for the version
# constraints.txt pins; where that index cannot be reached, the pinned version from PyPI.
torch_pin=$(grep -E '^torch==' constraints.txt | head -1)
python3 -m pip install --retries 1 --timeout 20 \
  --index-url https://download.pytorch.org/whl/cpu "$torch_pin" \
  || echo "setup.sh: PyTorch's CPU index could not be reached: $torch_pin from PyPI" >&2
python3 -m pip install -c constraints.txt {packages}
# Docker refuses unshare: runs go as a dedicated unprivileged user instead, one at a time, who
# cannot write the suite or the results, nor signal the suite.
id -u {user} >/dev/null 2>&1 || useradd --system --no-create-home --home-dir /nonexistent \
  --shell /usr/sbin/nologin {user}
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


def fit_warnings(run_timeout_s: float, mem_mb: int | None) -> list[str]:
    """What in the configured bounds cannot fit Gradescope's smallest box (768 MB, 0.5 CPU,
    10 minutes), where one run goes at a time."""
    warn = []
    smallest = box.Box(box.GRADESCOPE_DEFAULT_MB, 0.5, 1, box.GRADESCOPE_DEFAULT_MB, "v1")
    fits = box.process_cap_mb(smallest, mem_mb or box.PROCESS_MB)
    if mem_mb and mem_mb > fits:
        warn.append(f"--run-mem-mb {mem_mb} cannot fit Gradescope's smallest box "
                    f"({box.GRADESCOPE_DEFAULT_MB} MB): there a process is capped at {fits} MB "
                    "(a submission that allocates without bound must hit its own cap before "
                    "the box runs out); choose a machine of at least "
                    f"{(mem_mb + box.SUITE_MB) / box.HEADROOM / 1024:.1f} GB")
    worst = RUNS_PER_SESSION * run_timeout_s
    if worst > GRADESCOPE_TIMEOUT_S:
        warn.append(f"--run-timeout {run_timeout_s:g}: {RUNS_PER_SESSION} runs one at a time "
                    f"may take {worst:.0f} s, over Gradescope's default {GRADESCOPE_TIMEOUT_S} s "
                    "limit: raise the assignment's autograder timeout or lower --run-timeout")
    return warn


def contents(entry: str, run_timeout_s: float, weights: dict[str, float],
             visibility: dict[str, str], observe: bool = True, mem_mb: int | None = None,
             suite_seed: int | None = None, not_checked_credit: float = 0.0,
             exercises: tuple[str, ...] = (), policy: str = DEFAULT_POLICY,
             reference: bool | None = None) -> tuple[dict[str, str], list[Path]]:
    """What every platform's grader holds: generated files (name -> text) and the suite's;
    with `reference` (the class builds on it) the project's reference package too, which
    the runs then import. Whether they may is written in its configuration (None: nobody
    said; a run that fails reaching for the package is then not graded)."""
    bad = {v for v in visibility.values() if v not in VISIBILITIES}
    if bad:
        raise SystemExit(f"--visibility takes one of {', '.join(VISIBILITIES)}; got {bad}")
    shipped = (*SUITE_FILES, *(REFERENCE_FILES if reference else ()))
    files = sorted({p for pattern in shipped for p in ROOT.glob(pattern)}
                   | {Path(m) for m in graded_modules(exercises=exercises)})
    config = {"entry": entry, "run_timeout_s": run_timeout_s, "observe": observe,
              "run_mem_mb": mem_mb, "suite_seed": suite_seed, "sees_reference": reference}
    generated = {
        "setup.sh": SETUP_SH.format(packages=" ".join(SUITE_PACKAGES), user=contain.RUN_USER),
        "autograder.json": json.dumps(config, indent=2) + "\n",
        "grading.json": json.dumps({"weights": weights, "visibility": visibility,
                                    "not_checked_credit": not_checked_credit,
                                    "policy": policy, "exercises": list(exercises)},
                                   indent=2) + "\n",
    }
    return generated, files


def write_folder(out: Path, generated: dict[str, str], files: list[Path]) -> list[str]:
    """A grader as a folder (PrairieLearn's image, Classroom's `.grader/`): the generated
    texts (`setup.sh` and `run` executable) and the suite's files, at their paths under
    ROOT. Returns the names it holds."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for name, text in generated.items():
        (out / name).write_text(text)
        (out / name).chmod(0o755 if name in ("run", "setup.sh") else 0o644)
    for path in files:
        dest = out / path.relative_to(ROOT)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())


def build(out: Path, entry: str, run_timeout_s: float, weights: dict[str, float],
          visibility: dict[str, str], observe: bool = True,
          mem_mb: int | None = None, suite_seed: int | None = None,
          not_checked_credit: float = 0.0, exercises: tuple[str, ...] = (),
          policy: str = DEFAULT_POLICY, reference: bool | None = None) -> list[str]:
    """Write the Gradescope autograder zip; return the names it holds."""
    generated, files = contents(entry, run_timeout_s, weights, visibility, observe, mem_mb,
                                suite_seed, not_checked_credit, exercises, policy, reference)
    generated["run_autograder"] = RUN_AUTOGRADER
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


def unpack(zip_path: Path, root: Path, submission: Path) -> Path:
    """Lay out `root` as Gradescope lays out /autograder: the zip in source/, the student's
    files in submission/ (for a rehearsal under $AUTOGRADER_ROOT)."""
    import os

    with zipfile.ZipFile(zip_path) as z:
        z.extractall(root / "source")
        for info in z.infolist():  # zipfile drops the mode bits: restore them as unzip does
            os.chmod(root / "source" / info.filename, (info.external_attr >> 16) or 0o644)
    (root / "submission").mkdir(parents=True)
    for f in submission.iterdir():
        (root / "submission" / f.name).write_bytes(f.read_bytes())
    return root


def rehearse(zip_path: Path, submission: Path, root: Path, box_mb: float | None = None,
             cpus: float | None = None, no_unshare: bool = False
             ) -> tuple[dict[str, Any], float, float]:
    """Run the autograder on `submission` as Gradescope would, under `root` (for
    $AUTOGRADER_ROOT), inside a cgroup box of `box_mb` and `cpus` when given, with an
    `unshare` that refuses (as Docker's seccomp does) when `no_unshare`. Returns the
    results, the wall time and the box's peak working set (0 without a box)."""
    import os
    import subprocess
    import time

    from tests.harness.run.cgbox import CgBox

    unpack(zip_path, root, submission)
    os.chmod(root, 0o755)
    path = [str(Path(sys.executable).parent), os.environ["PATH"]]
    if no_unshare:
        fake = root / "no-unshare"
        fake.mkdir()
        (fake / "unshare").write_text("#!/bin/sh\necho 'unshare: Operation not permitted' >&2\n"
                                      "exit 1\n")
        (fake / "unshare").chmod(0o755)
        path.insert(0, str(fake))
    env = dict(os.environ, AUTOGRADER_ROOT=str(root), PATH=os.pathsep.join(path))
    argv = [str(root / "source" / "run_autograder")]
    quiet = {"cwd": root / "source", "env": env, "stdout": subprocess.DEVNULL,
             "stderr": subprocess.DEVNULL}
    if box_mb is None:
        t0 = time.monotonic()
        subprocess.run(argv, check=True, timeout=2400, **quiet)  # type: ignore[call-overload]
        wall, peak = time.monotonic() - t0, 0.0
    else:
        with CgBox(box_mb, cpus) as box:
            m = box.run(argv, timeout_s=2400, **quiet)
        wall, peak = m.wall_s, m.peak_mb
    return json.loads((root / "results" / "results.json").read_text()), wall, peak


def run_session(submission: Path, results_path: Path) -> dict[str, Any]:
    """Grade `submission` with this unpacked grader's configuration (ROOT: the zip's, the
    PrairieLearn image's or the Classroom template's `.grader/`) into `results_path`."""
    config = json.loads((ROOT / "autograder.json").read_text())
    entry = entry_for(config["entry"])
    check_entry(entry, observe=config.get("observe", True))  # SetupError: nobody is scored
    g = Grading(entry=entry, run_timeout_s=config["run_timeout_s"],
                grading_config=ROOT / "grading.json", observe=config.get("observe", True),
                mem_mb=config.get("run_mem_mb"),
                suite_seed=config.get("suite_seed"),
                sees_reference=config.get("sees_reference"),
                hidden=(results_path.parent,)).resolved()  # the platform's results folder
    print(f"box: {box.plan(box.read_box()).why}; containment: {contain.mode()}; a process of "
          f"a run may allocate {g.mem_mb} MB")
    results = grade(submission, results_path, g, log=results_path.with_name("pytest.log"))
    print(f"score {results['score']} ({results.get('output', '')})")
    return results


def run(root: Path, platform: str = "gradescope") -> int:
    """Inside Gradescope: grade root/submission into root/results/results.json. Inside
    PrairieLearn's grader: root/student, and PrairieLearn's results.json (the Gradescope
    file beside it, as results/gradescope.json)."""
    try:
        if platform == "prairielearn":
            results = run_session(root / "student", root / "results" / "gradescope.json")
            prairielearn.write(root / "results" / "results.json", results)
        else:
            run_session(root / "submission", root / "results" / "results.json")
    except SetupError as e:  # the grader's own fault: no results file, so no score, and the
        print(f"autograder: not grading: {e}", file=sys.stderr)  # platform says the
        return 1  # autograder failed (the instructor's to fix), not the submission
    return 0  # Gradescope reads the file; a failing submission is not a failing autograder


def parse_build_args(argv: list[str], prog: str, description: str, out_help: str,
                     platform: str | None = None) -> tuple[argparse.Namespace, dict[str, float]]:
    """The options every platform's grader is built with (entry, bounds, weights, ...);
    `platform` None: this module's own, with --platform. Returns them and the weights."""
    ap = argparse.ArgumentParser(prog=prog, description=description)
    if platform is None:
        ap.add_argument("--platform", choices=PLATFORMS, default="gradescope",
                        help="gradescope: --out is the zip to upload; prairielearn: --out is "
                             "a folder with the grader image's Dockerfile and the question's "
                             "info.json settings")
    ap.add_argument("--entry", default="python3 main.py",
                    help="the command that runs a submission, inside its folder")
    ap.add_argument("--out", type=Path, default=Path("autograder.zip" if platform is None
                                                     else platform), help=out_help)
    ap.add_argument("--run-timeout", type=float, default=30.0,
                    help="seconds one run of the submission may take (default 30)")
    ap.add_argument("--weight", action="append", default=[], metavar="MODULE=POINTS")
    ap.add_argument("--visibility", action="append", default=[], metavar="MODULE=VISIBILITY",
                    help=f"one of {', '.join(VISIBILITIES)}")
    ap.add_argument("--no-observe", action="store_true",
                    help="submissions are not Python programs: no observed checks")
    ap.add_argument("--suite-seed", type=int, default=None,
                    help="the assignment's seed, for every submission and every regrade "
                         "(default: one drawn now and written into the grader)")
    ap.add_argument("--seed-per-session", action="store_true",
                    help="draw a fresh seed in every grading instead (the same program may "
                         "then get another grade when regraded)")
    ap.add_argument("--run-mem-mb", type=int, default=None,
                    help="memory one process of a run may allocate (default: "
                         f"{box.PROCESS_MB} MB, less where the box is smaller)")
    ap.add_argument("--exercises", default="", metavar="NAMES",
                    help=f"the lesson's exercises graded too, comma-separated: {EXERCISE_NAMES}; "
                         "default none (the invariants only)")
    ap.add_argument("--not-checked-credit", type=float, default=0.0, metavar="SHARE",
                    help="share of its points a check earns when a run it needs did not "
                         "finish (0 to 1; default 0: a run that fails earns nothing for the "
                         "checks it kept from running)")
    ap.add_argument("--policy", choices=POLICIES, default=DEFAULT_POLICY,
                    help="how an invariant's checks add up to its points: "
                         + "; ".join(f"{k}: {v}" for k, v in DESCRIBE.items())
                         + f" (default {DEFAULT_POLICY})")
    add_reference_options(ap, ships=True)
    a = ap.parse_args(argv)
    a.reference = said_reference(a)
    if platform is not None:
        a.platform = platform
    if not 0.0 <= a.not_checked_credit <= 1.0:
        ap.error(f"--not-checked-credit {a.not_checked_credit}: give a share from 0 to 1")
    a.visibility = _pairs(a.visibility, "visibility")
    try:
        a.exercises = exercises_of(a.exercises)
    except ValueError as e:
        ap.error(f"--exercises: {e}")
    for warning in fit_warnings(a.run_timeout, a.run_mem_mb):
        print(f"warning: {warning}", file=sys.stderr)
    if a.suite_seed is None and not a.seed_per_session:
        a.suite_seed = assignment_seed()
        print(f"the assignment's suite seed: {a.suite_seed} (written into the grader: every "
              "submission and every regrade face the same data)", file=sys.stderr)
    return a, {k: float(v) for k, v in _pairs(a.weight, "weight").items()}



def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["run"]:
        ap = argparse.ArgumentParser(prog="python -m tests.autograder run")
        ap.add_argument("--root", type=Path, default=None,
                        help="/autograder (Gradescope) or /grade (PrairieLearn)")
        ap.add_argument("--platform", choices=PLATFORMS, default="gradescope")
        a = ap.parse_args(argv[1:])
        default = Path("/grade" if a.platform == "prairielearn" else "/autograder")
        return run(a.root or default, a.platform)
    a, weights = parse_build_args(argv, "python -m tests.autograder",
                                  "write a Gradescope autograder zip, or PrairieLearn's "
                                  "external grader (a folder)", "the zip (Gradescope) or the "
                                  "grader's folder (PrairieLearn)")
    if a.platform == "prairielearn":
        generated, files = contents(a.entry, a.run_timeout, weights, a.visibility,
                                    not a.no_observe, a.run_mem_mb, a.suite_seed,
                                    a.not_checked_credit, a.exercises, a.policy, a.reference)
        names = write_folder(a.out, {**generated, **prairielearn.grader_texts()}, files)
        print(f"wrote {a.out} ({len(names)} files): build and push its Dockerfile's image, "
              "then put info.json's externalGradingOptions in the question "
              f"({a.out / 'README.md'})")
        return 0
    names = build(a.out, a.entry, a.run_timeout, weights, a.visibility,
                  observe=not a.no_observe, mem_mb=a.run_mem_mb, suite_seed=a.suite_seed,
                  not_checked_credit=a.not_checked_credit, exercises=a.exercises,
                  policy=a.policy, reference=a.reference)
    print(f"wrote {a.out} ({len(names)} files): upload it as the autograder of a "
          "Gradescope programming assignment (Ubuntu base image)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Before any student is charged: the grader's own set-up, tried once.

A submission's entry command (`python3 main.py`) runs with whatever `python3` the grading
machine has first on PATH. Run from a virtual environment that is not activated
(`.venv/bin/python -m tests.grade_class ...`), that is the system's, without torch: every
student would score 0 with "No module named 'torch'", the grader's fault charged to each.
So a bare `python3` or `python` in an entry is the interpreter that runs the suite (unless
told otherwise), and the entry's interpreter is tried once, before anything is graded: it
must import torch and numpy and load the suite's observer.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from tests.harness.observe.traces import OBSERVER_DIR

BARE = ("python3", "python")
# What the entry's interpreter must do: import the run's libraries and load the observer
# from the suite's folder (its sitecustomize, first on the path, as in a run).
PROBE = ("import sys, torch, numpy, sitecustomize as s; "
         "sys.stdout.write(getattr(s, '__file__', '') or '')")


class SetupError(SystemExit):
    """The grading machine cannot grade: one line saying what to fix; nobody is scored."""


def entry_for(entry: str, python: str | None = None) -> str:
    """`entry` with a bare `python3` / `python` as its program replaced by `python` (default:
    the interpreter running the suite); any other program is kept as written."""
    argv = shlex.split(entry)
    if argv and argv[0] in BARE:
        argv[0] = python or sys.executable
    return shlex.join(argv)


def check_entry(entry: str, observe: bool = True, cwd: Path | None = None,
                timeout_s: float = 120.0) -> None:
    """Raise SetupError unless the entry's interpreter imports torch and numpy and (with
    `observe`) loads the suite's observer. An entry that is not a Python interpreter (a
    shell script, a binary) is not tried: the suite cannot tell what it needs."""
    argv = shlex.split(entry)
    if not argv:
        raise SetupError("the entry command is empty: give the command that runs a "
                         "submission, e.g. --entry 'python3 main.py'")
    program = shutil.which(argv[0]) or argv[0]
    if not Path(program).name.startswith("python"):
        return
    env = dict(os.environ, PYTHONPATH=str(OBSERVER_DIR))
    env.pop("CAPSTONE_OBSERVE_DIR", None)  # load the observer without recording anything
    try:
        done = subprocess.run([program, "-c", PROBE], env=env, cwd=cwd, capture_output=True,
                              text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SetupError(f"{argv[0]} ({program}) could not be run: {e}: fix the entry "
                         "command, or pass --python PATH") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no error message"])[-1]
        raise SetupError(f"{argv[0]} ({program}) cannot run a submission: {last}: activate "
                         "the environment the suite is installed in, or pass --python "
                         ".venv/bin/python")
    if observe and not done.stdout.startswith(str(OBSERVER_DIR)):
        raise SetupError(f"{argv[0]} ({program}) loads another sitecustomize "
                         f"({done.stdout or 'none'}), not the suite's observer: the observed "
                         "checks would fail for every student; grade with an interpreter "
                         "without one, or pass --no-observe")


def check_containment(unconfined_ok: bool) -> None:
    """Raise SetupError where the runs cannot be confined here (neither namespaces nor root
    for the run user: the environment-marker scan), naming what the instructor gives up,
    unless they said they accept it (`unconfined_ok`)."""
    from tests.harness.run import contain

    if contain.mode() != contain.MARKER_SCAN or unconfined_ok:
        return
    raise SetupError(f"the runs cannot be confined on this machine: {contain.why_not_user()}; "
                     f"{contain.GUARANTEES[contain.MARKER_SCAN]}, or pass --unconfined to "
                     "grade without (a dishonest submission may then change its grade, "
                     "read its classmates or leave processes behind)")


def importers_of(package: str, folders: list[Path], most_bytes: int = 1 << 20) -> list[Path]:
    """The folders among `folders` with a Python file that imports `package` (`import P`,
    `from P... import`), read statically: a class whose programs build on a package the
    grading hides is told before anyone is graded. Links and files over `most_bytes` are
    skipped (a submission's /dev/zero link must not stall the grader), as are files that do
    not parse (their run says why); a dynamic import is left to the runs (unsaid.py). A
    folder with its own `package` (a folder or module of that name at its top) imports that."""
    import ast

    def imports(path: Path) -> bool:
        try:
            if path.is_symlink() or not path.is_file() or path.stat().st_size > most_bytes:
                return False
            tree = ast.parse(path.read_bytes())
        except (OSError, SyntaxError, ValueError):
            return False
        for node in ast.walk(tree):  # level > 0: a relative import, the program's own
            named = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 \
                and node.module else []
            if any(n.split(".")[0] == package for n in named):
                return True
        return False

    return [f for f in folders if not (f / package).is_dir() and not
            (f / f"{package}.py").is_file() and any(imports(p) for p in sorted(f.rglob("*.py")))]


def add_reference_options(ap: argparse.ArgumentParser, ships: bool) -> None:
    """--reference-visible / --reference-hidden: whether the class's programs may use the
    project's reference package, the instructor's to say (`said_reference` reads it).
    `ships`: a platform's grader, which then holds the package (grade_class lets the runs
    see the checkout's)."""
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--reference-visible", action="store_true",
                       help=("ship" if ships else "let the runs read") + " the project's "
                            "reference package (capstone/, the lesson's solution) for the "
                            "runs to import: the class's programs build on it, as the sample "
                            "class tests/submissions does")
    group.add_argument("--reference-hidden", action="store_true",
                       help="the class's programs must not use it: a run that imports it "
                            "fails as the program's own. With neither, "
                            + ("" if ships else "a class importing it is not graded until "
                               "you say, and ") + "a run failing for want of it is not "
                            "graded (nobody said), never charged")


def said_reference(a: argparse.Namespace) -> bool | None:
    """What the instructor said of the reference: True visible, False hidden, None nothing."""
    return True if a.reference_visible else False if a.reference_hidden else None

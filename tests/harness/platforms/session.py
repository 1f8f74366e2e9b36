"""Grade one submission in a pytest session of its own: the graded modules of this checkout,
run from the submission's folder, bounded in time, always leaving a results.json behind.

The Gradescope autograder (tests/autograder.py) and the class workflow (tests/grade_class.py)
both grade through `grade()`, so a student sees the same verdicts and feedback either way.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.harness.report.grading import (
    CONFIG_VAR,
    exercises_of,
    grading_config,
    selected_exercises,
)
from tests.harness.run import box, bytecode, contain, unsaid

ROOT = Path(__file__).resolve().parents[3]
GRADED = ("test_invariant_*.py", "test_fault_rollback.py")


def graded_modules(root: Path = ROOT, exercises: tuple[str, ...] = ()) -> list[str]:
    """The graded test modules of the suite at `root`, as paths, with the modules of the
    lesson's `exercises` the grading selects."""
    return sorted(str(p) for pattern in GRADED for p in (root / "tests").glob(pattern)) + [
        str(root / "tests" / f"test_exercise_{name}.py") for name in exercises_of(exercises)]


@dataclass(frozen=True, kw_only=True)  # by name only: a field added never shifts another
class Grading:
    """How a submission is graded: its entry command and the suite's bounds."""

    entry: str = "python3 main.py"
    run_timeout_s: float = 30.0
    runs_at_once: int | None = None  # runs the session makes at once, in its one pytest
    #                                  process (None: what the box fits)
    suite_seed: int | None = None  # None: a fresh seed per session
    fault_seed: int | None = None  # where the suite's faults fall (None: a fresh seed)
    session_timeout_s: float = 600.0  # the whole session, whatever the submission does
    grading_config: Path | None = None  # weights and visibility ($CAPSTONE_GRADING)
    file_mb: int = 64  # largest file a run may write (its logs included): floods stop there
    observe: bool = True  # False: --no-observe, for submissions that are not Python programs
    mem_mb: int | None = None  # what one process of a run may allocate (None: from the box)
    exercises: tuple[str, ...] | None = None  # the lesson's exercises graded too (None: the
    #                                           grading file's "exercises", else none)
    # Folders no run may see (a class's submissions, the grading's outputs): under
    # namespaces a run sees them empty, but for its own submission; under the run user they
    # are denied to it (tests/harness/run/unseen.py). The project's reference (capstone/)
    # is hidden too (`unseen_by_runs`).
    hidden: tuple[Path, ...] = ()
    # The reference: True, the runs see it (a class whose programs build on it, or the
    # suite's own gradings of the lesson's programs); False, hidden as the instructor chose
    # (importing it is the program's mistake); None, hidden (or, in a platform's grader,
    # not shipped) without anybody's say: a run that fails reaching for it is not graded
    # (tests/harness/run/unsaid.py)
    sees_reference: bool | None = None

    def resolved(self) -> Grading:
        """Runs at once and memory cap chosen for the box this machine is now."""
        from dataclasses import replace

        b = box.read_box()
        return replace(self, runs_at_once=box.plan(b).runs if self.runs_at_once is None
                       else self.runs_at_once, mem_mb=self.mem_mb or box.process_cap_mb(b))


def pytest_command(results: Path, g: Grading, root: Path = ROOT) -> list[str]:
    g = g.resolved()
    # Hypothesis's plugin is for the unit tests: the graded modules never use it, and loading
    # it rewrites the asserts of its ~80 modules in every process (~0.7 CPU-s each).
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
           "-p", "no:hypothesispytest", "--rootdir", str(root), "-c", str(root / "pyproject.toml"),
           *graded_modules(root, g.exercises if g.exercises is not None
                           else selected_exercises(g.grading_config)),
           "--impl", g.entry, "--run-timeout", str(g.run_timeout_s),
           "--run-file-mb", str(g.file_mb), "--run-mem-mb", str(g.mem_mb),
           "--grade-json", str(results)]
    if g.runs_at_once and g.runs_at_once > 1:
        # One pytest process and helper threads, not xdist workers: each worker is another
        # pytest start (~0.9 CPU-s) and ~200 MB before the first run (helpers.py)
        cmd += ["--runs-at-once", str(g.runs_at_once)]
    if g.suite_seed is not None:
        cmd += ["--suite-seed", str(g.suite_seed)]
    if g.fault_seed is not None:
        cmd += ["--fault-seed", str(g.fault_seed)]
    if not g.observe:
        cmd.append("--no-observe")
    return cmd


def _fallback(results: Path, reason: str, elapsed: float) -> dict[str, Any]:
    """A results file for a session that wrote none: every graded module failed, 0 points."""
    weights, visibility = grading_config()
    data = {"score": 0.0, "execution_time": round(elapsed, 3),
            "output": f"The grading session did not complete: {reason}",
            "tests": [{"name": name, "score": 0.0, "max_score": w, "status": "failed",
                       "output": reason, "visibility": visibility[name]}
                      for name, w in weights.items()]}
    results.write_text(json.dumps(data, indent=2) + "\n")
    return data


def reference_of(root: Path = ROOT) -> Path:
    """The project's reference package (the lesson's solution) where the suite at `root`
    would hold it: absent from a platform's grader built without it."""
    return (root / "capstone").resolve()


def unseen_by_runs(submission: Path, g: Grading, root: Path = ROOT) -> list[Path]:
    """What no run of the grading may see: the folders `g` hides (a class, the outputs) and
    the project's reference, unless the entry runs it; never the submission itself (a
    hidden folder that holds it is shown down to it; one inside it, such as Classroom's
    .grading/, is hidden)."""
    own = submission.resolve()
    found = [p.resolve() for p in g.hidden]
    if not g.sees_reference and reference_of(root).is_dir():
        found.append(reference_of(root))
    return [p for p in dict.fromkeys(found) if p != own]


def grade(submission: Path, results: Path, g: Grading, log: Path | None = None,
          root: Path = ROOT) -> dict[str, Any]:
    """Grade the submission in `submission` (the entry runs there); return results.json."""
    results.parent.mkdir(parents=True, exist_ok=True)
    results.unlink(missing_ok=True)
    env = dict(os.environ)
    bytecode.kept(env)  # the session's own bytecode kept (never its runs')
    if g.grading_config is not None:
        env[CONFIG_VAR] = str(g.grading_config)
    unseen = unseen_by_runs(submission, g, root)
    env[contain.HIDE_VAR] = os.pathsep.join(str(p) for p in unseen)
    reference = reference_of(root)  # hidden, or not shipped (a platform's grader)
    env[unsaid.UNSAID_VAR] = str(reference) if g.sees_reference is None else ""
    if g.sees_reference and reference.is_dir():  # shipped for the runs to import
        env["PYTHONPATH"] = os.pathsep.join([str(root), *filter(None, [env.get("PYTHONPATH")])])
    log = log or results.with_suffix(".log")
    t0 = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(pytest_command(results, g, root), cwd=submission, env=env,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            proc.wait(timeout=g.session_timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return _fallback(results, f"the session took over {g.session_timeout_s:.0f}s",
                             time.monotonic() - t0)
    try:
        return dict(json.loads(results.read_text()))
    except (OSError, ValueError):
        return _fallback(results, f"pytest exited {proc.returncode} without a grade file "
                         f"(see {log.name})", time.monotonic() - t0)


def graded_once(cache: Path, submission: Path, g: Grading) -> dict[str, Any]:
    """The results model of one grading of `submission` with `g`, computed by whichever
    process asks first and read from `cache` by every other (xdist workers included, under
    a file lock): the suite's tests of what each platform writes from a results model share
    one session instead of grading the same program once each."""
    import hashlib

    from filelock import FileLock

    key = hashlib.sha256(json.dumps([str(submission.resolve()), repr(g)]).encode()
                         ).hexdigest()[:12]
    cache.mkdir(parents=True, exist_ok=True)
    done = cache / f"{submission.name}-{key}.json"
    with FileLock(str(done) + ".lock"):
        if not done.is_file():
            # A copy, as a platform grades one: nothing a run writes lands in `submission`
            copy = cache / f"{submission.name}-{key}"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(submission, copy)
            session = cache / f"{submission.name}-{key}.session.json"
            grade(copy, session, g)
            os.replace(session, done)  # whole or absent: a session killed midway is redone
    return dict(json.loads(done.read_text()))


def assignment_seed() -> int:
    """One seed for an assignment, drawn once and kept in its grading configuration: a grade
    is then a function of the submission and the assignment, and nobody can replay numbers
    from the course's own CI (seed 0)."""
    import secrets

    return 1 + secrets.randbelow(2**31 - 2)

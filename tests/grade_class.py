"""Grade a whole class: one grading session per submission.

    python -m tests.grade_class SUBMISSIONS/ --out grades/ [--entry "python3 main.py"] [-j K]
        [--executor here|local|slurm] [--cpus-per-task 2] [--partition P]
        [--policy invariant|per_check] [--reference-visible | --reference-hidden]

SUBMISSIONS is a folder with one subfolder per student (its name is the `student` column),
or Gradescope's "Export Submissions" (a folder per submission id and
submission_metadata.yml: each group member gets a row with the group's grade, with name,
SID and email). The entry command runs inside the submission's folder. Submissions are graded
one after another here (or K at once with -j when the machine has the cores and runs are
contained in namespaces), with a progress bar and ETA; `--executor local|slurm` runs one
submitit job per submission instead (tests/harness/platforms/class_jobs.py). Run it again and it
resumes: a submission with a results file is not graded twice (delete grades/students/NAME
to regrade one). It writes:

- grades/grades.csv: student, score, points per invariant, first violation, the checks each
  failed invariant was lost through, SID, email and the submission graded;
- grades/feedback/NAME.md: per invariant, the verdict, the first violation and its likely
  causes in the lesson's terms; for each failed invariant a picture of what the runs did and
  the timelines of its runs (Chrome trace JSON, for Perfetto) in grades/feedback/NAME/;
- grades/summary.md and summary.png: how many students fail each invariant, under which
  grading policy (`--policy`: an invariant all or nothing, the default, or per check);
- grades/students/NAME/: that student's results.json and the session's log.

No run sees a classmate's submission, the grades or the project's reference (capstone/,
the lesson's solution) unless told: whether the class builds on the reference is asked
before anyone is graded (--reference-visible or --reference-hidden), and a run that fails
reaching for it unsaid is not graded, never charged.

A submission that crashes, hangs, floods its output or leaves processes behind costs only
its own row: every run is bounded and contained, and so is each student's whole session.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from tqdm import tqdm

from tests.harness.platforms.class_jobs import EXECUTORS, JobResources, run_jobs
from tests.harness.platforms.preflight import (
    SetupError,
    add_reference_options,
    check_containment,
    check_entry,
    entry_for,
    importers_of,
    said_reference,
)
from tests.harness.platforms.session import Grading, assignment_seed, reference_of
from tests.harness.report.class_report import (
    rescored,
    write_csv,
    write_feedback,
    write_summary,
)
from tests.harness.report.grading import EXERCISE_NAMES, exercises_of, grading_policy
from tests.harness.report.policy import DESCRIBE, POLICIES
from tests.harness.report.roster import read_roster
from tests.harness.run import access, contain


def graded(results: Path) -> dict[str, Any] | None:
    """A finished student's results (resume), or None."""
    try:
        data = json.loads(results.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "score" in data else None


def grade_class(submissions: Path, out: Path, g: Grading, jobs: int = 1,
                progress: bool = True, executor: str = "here",
                resources: JobResources | None = None,
                policy: str | None = None) -> dict[str, dict[str, Any]]:
    """Grade every submission not graded yet; write the CSV, feedback and summary, every
    score under `policy` (None: the grading file's, else "invariant"), whichever policy a
    resumed submission was graded under: each student's results.json is rescored in place."""
    policy = policy or grading_policy()
    access.replay()  # what an earlier grading, killed mid-run, left changed on these files
    roster = read_roster(submissions)
    grades: dict[str, dict[str, Any]] = {}
    todo = []
    for sub in roster:
        done = graded(out / "students" / sub.name / "results.json")
        if done is None:
            todo.append((sub.name, sub.folder, out / "students" / sub.name))
        else:
            grades[sub.name] = done
    if jobs > 1 and executor != "slurm" and contain.mode() != contain.NAMESPACES:
        print("grade_class: runs cannot be kept apart here (no namespaces): grading one "
              "submission at a time", file=sys.stderr)
        jobs = 1
    bar = tqdm(total=len(roster), initial=len(roster) - len(todo), unit="submission",
               desc="grading", disable=not progress)
    for name, results in run_jobs(todo, g, executor, jobs, resources, out / "submitit"):
        grades[name] = results
        bar.set_postfix_str(f"{name}: {results.get('score', 0):.4g}")
        bar.update()
    bar.close()
    for name, results in grades.items():  # statuses are kept: only the sums change
        grades[name] = rescored(results, policy)
        if grades[name] != results:
            (out / "students" / name / "results.json").write_text(
                json.dumps(grades[name], indent=2) + "\n")
    (out / "feedback").mkdir(parents=True, exist_ok=True)
    for name, results in grades.items():
        write_feedback(out, name, results, out / "students" / name)
    write_csv(out / "grades.csv", grades, {sub.name: sub.students for sub in roster})
    write_summary(out, grades)
    return grades


def check_reference(submissions: Path) -> None:
    """Raise SetupError if some submission imports the project's reference package, which
    the runs do not see unless the instructor says: whether the class may build on it is
    the instructor's to say, before anyone is graded."""
    reference = reference_of()
    if not reference.is_dir():
        return
    users = importers_of(reference.name, [sub.folder for sub in read_roster(submissions)])
    if users:
        names = ", ".join(f.name for f in users[:5]) + (", ..." if len(users) > 5 else "")
        many = "submissions import" if len(users) > 1 else "submission imports"
        raise SetupError(f"{len(users)} {many} the reference package "
                         f"{reference.name} ({names}), which the runs do not see unless you "
                         "say: pass --reference-visible if the class's programs build on it, "
                         "or --reference-hidden if they must not use it (their runs then "
                         "fail as their own)")


def class_seed(out: Path) -> int:
    """The assignment's seed kept beside its grades (OUT/suite_seed): drawn at the first
    grading, read at every regrade, so that every student faces the same data and a regrade
    gives every score again."""
    path = out / "suite_seed"
    if path.is_file():
        return int(path.read_text().split()[0])
    seed = assignment_seed()
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{seed}\n")
    return seed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.grade_class",
                                 description="grade a folder of submissions, one per student")
    ap.add_argument("submissions", type=Path,
                    help="one subfolder per student, or a Gradescope export")
    ap.add_argument("--out", type=Path, default=Path("grades"))
    ap.add_argument("--entry", default="python3 main.py",
                    help="command that runs a submission, inside its folder (a bare python3 "
                         "or python in it is --python)")
    ap.add_argument("--python", default=None, metavar="PATH",
                    help="the interpreter a bare python3 / python in --entry runs (default: "
                         "the one running this command, which has the suite's packages)")
    ap.add_argument("-j", "--jobs", type=int, default=1,
                    help="students graded at once (default 1; each session then makes the "
                         "runs at once the box fits)")
    ap.add_argument("--run-timeout", type=float, default=30.0)
    ap.add_argument("--suite-seed", type=int, default=None,
                    help="the assignment's seed for the whole class (default: the one in "
                         "OUT/suite_seed, else one drawn once and written there, so that a "
                         "regrade reproduces every score)")
    ap.add_argument("--seed-per-student", action="store_true",
                    help="a fresh seed for every student's session instead")
    ap.add_argument("--session-timeout", type=float, default=600.0,
                    help="seconds one student's whole session may take (default 600)")
    ap.add_argument("--no-observe", action="store_true",
                    help="submissions are not Python programs: no observed checks")
    ap.add_argument("--exercises", default=None, metavar="NAMES",
                    help=f"the lesson's exercises graded too, comma-separated: {EXERCISE_NAMES}; "
                         "default: the grading file's ($CAPSTONE_GRADING) \"exercises\", else "
                         "none")
    ap.add_argument("--policy", choices=POLICIES, default=None,
                    help="how an invariant's checks add up to its points: "
                         + "; ".join(f"{k}: {v}" for k, v in DESCRIBE.items())
                         + " (default: the grading file's \"policy\", else invariant). "
                         "Changing it rescores a graded class without running it again")
    add_reference_options(ap, ships=False)
    ap.add_argument("--unconfined", action="store_true",
                    help="grade where the runs cannot be confined (neither namespaces nor "
                         "root): without it such a machine grades nobody, and says why")
    ap.add_argument("--executor", choices=EXECUTORS, default="here",
                    help="here (default): this process; local / slurm: one submitit job per "
                         "submission (a job array on Slurm; needs the [class] extra)")
    ap.add_argument("--cpus-per-task", type=int, default=2,
                    help="CPUs of each job (local / slurm; memory is sized from them)")
    ap.add_argument("--partition", default="", help="Slurm partition (default: the cluster's)")
    ap.add_argument("--array-parallelism", type=int, default=0,
                    help="Slurm: jobs of the array at once (default: as many as it gives)")
    a = ap.parse_args(argv)
    if a.jobs > (os.cpu_count() or 1):
        print(f"grade_class: -j {a.jobs} on {os.cpu_count()} cores: runs will be slower, "
              "not faster", file=sys.stderr)
    if a.suite_seed is None and not a.seed_per_student:
        a.suite_seed = class_seed(a.out)
    try:
        exercises = None if a.exercises is None else exercises_of(a.exercises)
    except ValueError as e:
        ap.error(f"--exercises: {e}")
    entry = entry_for(a.entry, a.python)
    sees_reference = said_reference(a)
    try:  # the grader's set-up, tried before anyone is graded: never a student's fault
        check_containment(a.unconfined)
        check_entry(entry, observe=not a.no_observe)
        if sees_reference is None:
            check_reference(a.submissions)
    except SetupError as e:
        print(f"grade_class: not grading: {e}", file=sys.stderr)
        return 2
    # no run reads a classmate's submission, the grades, the feedback or the reference
    g = Grading(entry=entry, run_timeout_s=a.run_timeout, runs_at_once=None,
                suite_seed=a.suite_seed, session_timeout_s=a.session_timeout,
                observe=not a.no_observe, exercises=exercises, hidden=(a.submissions, a.out),
                sees_reference=sees_reference)
    resources = JobResources(a.cpus_per_task, a.session_timeout / 60 + 5, a.partition,
                             a.array_parallelism)
    grades = grade_class(a.submissions, a.out, g, a.jobs, executor=a.executor,
                         resources=resources, policy=a.policy)
    print(f"{len(grades)} submissions graded: {a.out / 'grades.csv'}, {a.out / 'feedback'}/, "
          f"{a.out / 'summary.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

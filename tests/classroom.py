"""GitHub Classroom: the assignment's template, graded by the suite in each student's
repository.

    python -m tests.classroom --entry "python3 main.py" --out TEMPLATE/

writes what the instructor adds to the assignment's template repository:
- `.github/workflows/classroom.yml`: set up the suite (pinned by constraints.txt), grade the
  submission once (one grading session, every invariant's runs), then one graded step per
  invariant (`classroom-resources/autograding-command-grader`, its weight as `max-score`)
  that only reads that session's results, and the reporter
  (`autograding-grading-reporter`) that sums them for Classroom;
- `.grader/`: the suite's graded modules and harness (as in the Gradescope zip);
- `GRADING.md`: what this can and cannot guarantee there.

In the workflow, `python3 -m tests.classroom grade` runs the session (exit 0 whatever the
submission did) and `python3 -m tests.classroom check MODULE` exits 0 when every test of that
invariant passed, printing its verdicts; the command grader gives `max-score` for exit 0 and
0 otherwise, so an invariant's points are all or none there.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

GRADER_DIR = ".grader"
RESULTS = ".grading/results.json"
COMMAND_GRADER = "classroom-resources/autograding-command-grader@v1"
REPORTER = "classroom-resources/autograding-grading-reporter@v1"
# The command grader's documented inputs (action.yml); max-score is read with parseInt.
COMMAND_GRADER_INPUTS = {"test-name": True, "setup-command": False, "command": True,
                         "timeout": False, "max-score": False}
SESSION_TIMEOUT_MIN = 15


def workflow(weights: dict[str, float]) -> str:
    """The template's `.github/workflows/classroom.yml`, one graded step per invariant."""
    bad = {k: v for k, v in weights.items() if float(v) != int(v)}
    if bad:
        raise SystemExit(f"GitHub Classroom's command grader takes whole points (max-score): "
                         f"{bad}; give each invariant a whole weight (--weight MODULE=POINTS)")
    steps = ["    - name: Checkout code\n      uses: actions/checkout@v4\n",
             "    - name: Set up the suite (pinned by constraints.txt)\n      id: setup\n"
             f"      run: sudo bash {GRADER_DIR}/setup.sh\n",
             "    - name: Grade the submission (one session; the steps below read it)\n"
             "      id: session\n"
             f"      timeout-minutes: {SESSION_TIMEOUT_MIN}\n"
             f"      run: cd {GRADER_DIR} && sudo python3 -m tests.classroom grade "
             f"--submission \"$GITHUB_WORKSPACE\" --results \"$GITHUB_WORKSPACE/{RESULTS}\"\n"]
    for name, points in weights.items():
        steps.append(f"    - name: {name}\n      id: {name}\n      uses: {COMMAND_GRADER}\n"
                     f"      with:\n        test-name: {name}\n"
                     f"        command: cd {GRADER_DIR} && python3 -m tests.classroom check "
                     f"{name} --results ../{RESULTS}\n"
                     f"        timeout: 1\n        max-score: {int(points)}\n")
    env = "".join(f"        {name.upper()}_RESULTS: \"${{{{steps.{name}.outputs.result}}}}\"\n"
                  for name in weights)
    steps.append(f"    - name: Autograding Reporter\n      uses: {REPORTER}\n      env:\n{env}"
                 f"      with:\n        runners: {','.join(weights)}\n")
    return ("name: Autograding Tests\n'on':\n- push\n- repository_dispatch\n"
            "permissions:\n  checks: write\n  actions: read\n  contents: read\n"
            "jobs:\n  run-autograding-tests:\n    runs-on: ubuntu-latest\n"
            "    if: github.actor != 'github-classroom[bot]'\n    steps:\n" + "".join(steps))


GRADING_MD = """# How this assignment is graded (GitHub Classroom)

Each push runs `.github/workflows/classroom.yml`: it installs the suite's pinned packages
(CPU torch) on the hosted runner, grades the submission once (`{entry}` in the repository's
root) with the course's invariant suite in `.grader/`, then gives each invariant its points
when every check of it passed. The Actions log shows each check's verdict, its first
violation and its likely cause in the lesson's terms.

What it cannot guarantee there:
- The student owns the repository and its workflow: a student can edit `.grader/` or the
  workflow and push. Regrade the class from a clean copy of the suite before grades count
  (`python -m tests.grade_class` over the students' clones, or the Gradescope autograder).
- An invariant's points are all or none (the command grader scores an exit code): the
  grading policy `invariant`, every platform's default. The `per_check` policy (partial
  credit per check) needs Gradescope, PrairieLearn or `grade_class`.
- The hosted runner is what it is: its user, cores (2 or 4) and memory; runs are contained
  in namespaces where the runner allows `unshare` (as root, through sudo), else as the run
  user `setup.sh` creates. A run the runner could not grade (out of memory twice) costs the
  invariant's points there: rerun the workflow.
"""


def write_template(out: Path, entry: str, weights: dict[str, float],
                   generated: dict[str, str], files: list[Path], root: Path) -> list[str]:
    """Write the template's workflow, `.grader/` and GRADING.md under `out`."""
    from tests.autograder import write_folder

    (out / ".github" / "workflows").mkdir(parents=True, exist_ok=True)
    (out / ".github" / "workflows" / "classroom.yml").write_text(workflow(weights))
    write_folder(out / GRADER_DIR, generated, [*files, root / "tests" / "classroom.py"])
    (out / "GRADING.md").write_text(GRADING_MD.format(entry=entry))
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())


def check(module: str, results_path: Path) -> int:
    """Exit status of one invariant's graded step: 0 when every test of it passed."""
    try:
        results: dict[str, Any] = json.loads(results_path.read_text())
    except (OSError, ValueError):
        print(f"{module}: no grading results at {results_path}: the grading step did not "
              "finish (see its log above)")
        return 1
    mine = [t for t in results.get("tests", [])
            if f"test_invariant_{module}.py::" in t["name"]
            or f"test_exercise_{module}.py::" in t["name"]
            or (module == "rollback" and "test_fault_rollback.py::" in t["name"])]
    if not mine:
        print(f"{module}: no graded test of this invariant in the results")
        return 1
    for t in mine:
        verdict = t.get("status") or "NOT GRADED"
        print(f"{verdict.upper()}: {t['name']}\n{t.get('output', '')}".rstrip() + "\n")
    return 0 if all(t.get("status") == "passed" for t in mine) else 1


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["check"]:
        ap = argparse.ArgumentParser(prog="python -m tests.classroom check")
        ap.add_argument("module")
        ap.add_argument("--results", type=Path, required=True)
        a = ap.parse_args(argv[1:])
        return check(a.module, a.results)
    if argv[:1] == ["grade"]:
        from tests.autograder import run_session

        ap = argparse.ArgumentParser(prog="python -m tests.classroom grade")
        ap.add_argument("--submission", type=Path, required=True)
        ap.add_argument("--results", type=Path, required=True)
        a = ap.parse_args(argv[1:])
        run_session(a.submission, a.results)
        return 0  # the steps after it read the file; a failing submission is no failed step
    from tests.autograder import contents, parse_build_args
    from tests.harness.platforms.session import ROOT
    from tests.harness.report.grading import EXERCISES, WEIGHTS
    from tests.harness.report.policy import INVARIANT

    a, weights = parse_build_args(argv, "python -m tests.classroom",
                                  "write a GitHub Classroom template's workflow and suite",
                                  "template folder (the repository's root)", "classroom")
    if a.policy != INVARIANT:
        raise SystemExit(f"--policy {a.policy}: GitHub Classroom's command grader scores each "
                         "invariant by an exit code, all or nothing (the policy "
                         f"'{INVARIANT}'); for partial credit per check grade on Gradescope, "
                         "PrairieLearn or with python -m tests.grade_class")
    # One step per graded module: the invariants and the exercises the grading selects.
    weights = {**{k: v for k, v in WEIGHTS.items() if k not in EXERCISES
                  or k in a.exercises}, **weights}
    generated, files = contents(a.entry, a.run_timeout, weights, a.visibility, not a.no_observe,
                                a.run_mem_mb, a.suite_seed, a.not_checked_credit, a.exercises,
                                reference=a.reference)
    names = write_template(a.out, a.entry, weights, generated, files, ROOT)
    print(f"wrote {len(names)} files under {a.out}: add them to the assignment's template "
          "repository (see GRADING.md there)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

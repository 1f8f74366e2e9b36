"""GitHub Classroom: the template's workflow checked against the actions' documented inputs,
and its steps run as the actions run them (each command in a shell from the repository's
root, the command grader's environment, points for exit 0), then summed as the reporter
sums them."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.classroom import COMMAND_GRADER, COMMAND_GRADER_INPUTS, REPORTER, RESULTS, workflow
from tests.harness.report.grading import INVARIANTS, WEIGHTS, graded_name

yaml = pytest.importorskip("yaml", reason="the [class] extra (pip install -e '.[class]')")
ROOT = Path(__file__).resolve().parents[1]
SUBMISSIONS = ROOT / "tests" / "submissions"


def _template(out: Path, *extra: str) -> Path:
    subprocess.run([sys.executable, "-m", "tests.classroom", "--entry", "python3 main.py",
                    "--out", str(out), *extra], cwd=ROOT, check=True, capture_output=True)
    return out


def _steps(template: Path) -> list[dict[str, Any]]:
    flow = yaml.safe_load((template / ".github" / "workflows" / "classroom.yml").read_text())
    assert flow["on"] == ["push", "repository_dispatch"]  # 'on' quoted: not YAML's True
    return list(flow["jobs"]["run-autograding-tests"]["steps"])


def test_the_workflow_uses_the_actions_documented_inputs(tmp_path):
    steps = _steps(_template(tmp_path / "t"))
    graders = [s for s in steps if s.get("uses") == COMMAND_GRADER]
    assert [s["id"] for s in graders] == list(INVARIANTS)  # one graded step per invariant
    for s in graders:
        assert set(s["with"]) <= set(COMMAND_GRADER_INPUTS), s
        assert all(k in s["with"] for k, required in COMMAND_GRADER_INPUTS.items() if required)
        assert s["with"]["max-score"] == WEIGHTS[s["id"]] and isinstance(s["with"]["max-score"],
                                                                          int)
    assert sum(s["with"]["max-score"] for s in graders) == 100
    [reporter] = [s for s in steps if s.get("uses") == REPORTER]
    assert reporter["with"]["runners"].split(",") == [s["id"] for s in graders]
    assert reporter["env"] == {f"{s['id'].upper()}_RESULTS":
                               f"${{{{steps.{s['id']}.outputs.result}}}}" for s in graders}
    assert (tmp_path / "t" / ".grader" / "tests" / "classroom.py").is_file()
    assert "cannot guarantee" in (tmp_path / "t" / "GRADING.md").read_text()
    with pytest.raises(SystemExit, match="whole points"):
        workflow({"monotonic_loss": 2.5})


def run_as_the_actions_do(repo: Path, steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Run the workflow's steps in `repo` (the student's checkout): `run:` steps in bash (as
    root: `sudo` is this process), each command grader step's command in a shell with the
    action's own environment (PATH and HOME only), max-score for exit 0, then the reporter's
    sum. The suite's set-up step is left out: this Python already has the pinned packages
    (`tox -e py3XX` runs setup.sh itself)."""
    fake = repo.parent / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "sudo").write_text('#!/bin/sh\nexec "$@"\n')
    (fake / "sudo").chmod(0o755)
    path = os.pathsep.join([str(fake), str(Path(sys.executable).parent), os.environ["PATH"]])
    results: dict[str, dict[str, Any]] = {}
    for step in steps:
        if step.get("id") == "setup" or str(step.get("uses", "")).startswith("actions/"):
            continue
        if "run" in step:
            subprocess.run(["bash", "-e", "-c", step["run"]], cwd=repo, check=True,
                           env=dict(os.environ, PATH=path, GITHUB_WORKSPACE=str(repo)),
                           capture_output=True, timeout=60 * step.get("timeout-minutes", 10))
        elif step.get("uses") == COMMAND_GRADER:
            w = step["with"]
            env = {"PATH": path, "HOME": os.environ.get("HOME", "/root"), "FORCE_COLOR": "true"}
            proc = subprocess.run(w["command"], shell=True, cwd=repo, env=env, text=True,
                                  capture_output=True, timeout=60 * float(w["timeout"]))
            status = "pass" if proc.returncode == 0 else "fail"
            results[step["id"]] = {"version": 1, "status": status, "max_score": w["max-score"],
                                   "tests": [{"name": w["test-name"], "status": status,
                                              "score": w["max-score"] if status == "pass"
                                              else 0, "message": proc.stdout}]}
        elif step.get("uses") == REPORTER:
            encoded = {k: base64.b64encode(json.dumps(v).encode()).decode()
                       for k, v in results.items()}
            runners = [json.loads(base64.b64decode(encoded[r])) for r in
                       step["with"]["runners"].split(",")]
            return {"points": sum(t["score"] for r in runners for t in r["tests"]),
                    "max": sum(r["max_score"] for r in runners), "steps": results}
    raise AssertionError("the workflow has no reporter step")


def classroom_points(model: dict[str, Any]) -> float:
    """What Classroom gives for a results model: an invariant's weight when every test of it
    passed (the command grader scores an exit code)."""
    passed: dict[str, bool] = {}
    for t in model["tests"]:
        name = graded_name(t["name"])
        if name:
            passed[name] = passed.get(name, True) and t.get("status") == "passed"
    return sum(WEIGHTS[m] for m, ok in passed.items() if ok)


def grade_in_classroom(template: Path, submission: Path, repo: Path) -> tuple[dict, dict]:
    """The student's repository (the template and their files), graded by its workflow;
    returns the reporter's sum and the session's results model."""
    shutil.copytree(template, repo)
    for f in submission.iterdir():
        shutil.copy2(f, repo / f.name)
    reported = run_as_the_actions_do(repo, _steps(repo))
    return reported, json.loads((repo / ".grading" / "results.json").read_text())


@pytest.mark.platforms  # a whole grading (seconds), shared with the platforms tier's writers
@pytest.mark.long
@pytest.mark.slow
def test_the_steps_give_each_module_its_points_from_one_session(tmp_path, graded_once):
    """no_broadcast in a student's repository: one step grades it, into the one results file
    every graded step reads; the steps of the two invariants it breaks fail with its cause in
    their log, the others pass; the reporter's sum is the grade. The session is the suite's
    shared grading of no_broadcast under CI's seed (the workflow's own session step runs end
    to end in the `platforms` tier, tests/test_platforms.py)."""
    template = _template(tmp_path / "t", "--suite-seed", "0")
    repo = tmp_path / "repo"
    shutil.copytree(template, repo)
    for f in (SUBMISSIONS / "no_broadcast").iterdir():
        shutil.copy2(f, repo / f.name)
    steps = _steps(repo)
    [session] = [s for s in steps if s.get("id") == "session"]
    assert "-m tests.classroom grade" in session["run"]
    assert session["run"].endswith(f'--results "$GITHUB_WORKSPACE/{RESULTS}"')
    assert all(f"--results ../{RESULTS}" in s["with"]["command"] for s in steps
               if s.get("uses") == COMMAND_GRADER)
    model = graded_once(SUBMISSIONS / "no_broadcast", suite_seed=0)
    (repo / RESULTS).parent.mkdir()
    (repo / RESULTS).write_text(json.dumps(model))  # what the session step writes there
    reported = run_as_the_actions_do(repo, [s for s in steps if s is not session])
    assert reported["max"] == 100
    failed = {k for k, r in reported["steps"].items() if r["status"] == "fail"}
    assert failed == {"equal_rank_norms", "single_process_parity"}
    assert reported["points"] == classroom_points(model) == model["score"] == 100 - sum(
        WEIGHTS[m] for m in failed)
    assert "initial broadcast is missing" in \
        reported["steps"]["single_process_parity"]["tests"][0]["message"]
    assert len(list((repo / ".grading").glob("*.json"))) == 1


def test_partial_credit_per_check_is_refused_where_an_exit_code_scores(tmp_path):
    """The command grader gives an invariant all or none of its points: the policy
    `invariant`, the default everywhere. Asking for per-check credit says where to get it."""
    from tests.classroom import main

    with pytest.raises(SystemExit, match=r"all or nothing.*grade_class"):
        main(["--out", str(tmp_path / "t"), "--suite-seed", "0", "--policy", "per_check"])
    assert not (tmp_path / "t").exists()
    main(["--out", str(tmp_path / "t"), "--suite-seed", "0"])  # the default policy builds
    grading = json.loads((tmp_path / "t" / ".grader" / "grading.json").read_text())
    assert grading["policy"] == "invariant"

"""The Gradescope autograder end to end: the zip unpacked as Gradescope unpacks it, under a
temporary $AUTOGRADER_ROOT, `run_autograder` run from its source folder with the python3 on
PATH, against a correct and a broken submission (the feedback each mistake gets is asserted per
mutant in tests/test_fault_mutants.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.autograder import SUITE_PACKAGES, unpack
from tests.harness.report.grading import INVARIANTS, WEIGHTS

ROOT = Path(__file__).resolve().parents[1]
SUBMISSIONS = ROOT / "tests" / "submissions"


def run_autograder(root: Path) -> dict:
    env = dict(os.environ, AUTOGRADER_ROOT=str(root),
               PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    proc = subprocess.run([str(root / "source" / "run_autograder")], cwd=root / "source",
                          env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads((root / "results" / "results.json").read_text())


@pytest.fixture(scope="module")
def autograder_zip(tmp_path_factory):
    out = tmp_path_factory.mktemp("ag") / "autograder.zip"
    subprocess.run([sys.executable, "-m", "tests.autograder", "--entry", "python3 main.py",
                    "--out", str(out), "--visibility", "rollback=after_due_date"],
                   cwd=ROOT, check=True, capture_output=True)
    return out


def test_the_zip_holds_what_gradescope_runs(autograder_zip, tmp_path):
    names = zipfile.ZipFile(autograder_zip).namelist()
    assert {"setup.sh", "run_autograder", "conftest.py", "constraints.txt",
            "tests/observer/sitecustomize.py", "tests/test_fault_rollback.py"} <= set(names)
    assert not any("mutants" in n or "capstone/" in n for n in names)  # the suite only
    setup = zipfile.ZipFile(autograder_zip).read("setup.sh").decode()
    assert "-c constraints.txt" in setup and all(p in setup for p in SUITE_PACKAGES)
    assert "useradd --system" in setup and "--shell /usr/sbin/nologin capstone-run\n" in setup
    assert subprocess.run(["bash", "-n", "-c", setup]).returncode == 0


@pytest.mark.platforms  # a whole grading (seconds): the platforms tier
@pytest.mark.long
@pytest.mark.slow
def test_a_correct_submission_scores_100_with_a_fresh_seed(reference_only, autograder_zip,
                                                           tmp_path):
    """The ring submission: the reference's trainer with ZeRO-1's collectives written by hand
    as rings of sends and receives (a correct program written another way)."""
    results = run_autograder(unpack(autograder_zip, tmp_path, SUBMISSIONS / "ring"))
    assert results["score"] == sum(WEIGHTS[m] for m in INVARIANTS) == 100, [
        t["output"] for t in results["tests"] if t["status"] != "passed"]
    assert results["extra_data"]["suite_seed"] != 0  # not CI's seed: no answers to replay
    vis = {t["name"].split("::")[0].rsplit("/", 1)[-1]: t["visibility"] for t in results["tests"]}
    assert vis["test_fault_rollback.py"] == "after_due_date"
    assert vis["test_invariant_monotonic_loss.py"] == "visible"


@pytest.mark.long
@pytest.mark.slow
def test_a_broken_submission_gets_reasons_and_likely_causes(autograder_zip, tmp_path):
    results = run_autograder(unpack(autograder_zip, tmp_path, SUBMISSIONS / "missing_flag"))
    assert results["score"] < 100 and results["tests"]
    failed = {t["name"].split("::")[0].rsplit("/", 1)[-1]: t["output"]
              for t in results["tests"] if t["status"] == "failed"}
    assert "unrecognized arguments: --checkpoint-every" in \
        failed["test_invariant_no_deadlock.py"]
    assert any("\nlikely: " in t["output"] for t in results["tests"])


def test_bounds_that_cannot_fit_gradescopes_smallest_box_are_warned_about(tmp_path):
    from tests.autograder import fit_warnings

    assert fit_warnings(30, None) == []  # the defaults fit 768 MB and 10 minutes
    [mem] = fit_warnings(30, 2048)
    assert "--run-mem-mb 2048 cannot fit" in mem and "768 MB" in mem
    [time_] = fit_warnings(80, None)  # 8 runs x 80 s
    assert "over Gradescope's default 600 s" in time_
    proc = subprocess.run([sys.executable, "-m", "tests.autograder", "--run-mem-mb", "2048",
                           "--out", str(tmp_path / "a.zip")], cwd=ROOT, capture_output=True,
                          text=True, check=True)
    assert "warning: --run-mem-mb 2048" in proc.stderr
    config = json.loads(zipfile.ZipFile(tmp_path / "a.zip").read("autograder.json"))
    assert config["run_mem_mb"] == 2048


@pytest.mark.python_matrix
@pytest.mark.parametrize("name, failing, hint", [
    ("reference", (), ""),
    ("no_broadcast", ("equal_rank_norms", "single_process_parity"),
     "initial broadcast is missing"),
])
def test_the_autograder_grades_alike_on_this_python(tmp_path, name, failing, hint):
    """`tox -e py310 .. py313`: with this Python as the image's python3, the reference gets
    every point and no_broadcast loses exactly its two invariants' points, with its cause.
    One suite seed for every Python (CI's, 0: a fresh one may also make a rank that starts
    from its own parameters raise the loss at some step)."""
    zip_path = tmp_path / "ag.zip"
    subprocess.run([sys.executable, "-m", "tests.autograder", "--entry", "python3 main.py",
                    "--suite-seed", "0", "--out", str(zip_path)], cwd=ROOT, check=True,
                   capture_output=True)
    results = run_autograder(unpack(zip_path, tmp_path / "root", SUBMISSIONS / name))
    failed = {t["name"].split("::")[0].rsplit("/", 1)[-1] for t in results["tests"]
              if t["status"] == "failed"}
    assert failed == {f"test_invariant_{m}.py" for m in failing}, sys.version
    assert results["score"] == pytest.approx(100 - sum(WEIGHTS[m] for m in failing))
    assert all(hint in t["output"] for t in results["tests"] if t["status"] == "failed")


def run_prairielearn(grader: Path, submission: Path, root: Path) -> tuple[dict, dict]:
    """The PrairieLearn layout as its external grader runs it: the student's files in
    root/student, the question's entrypoint `run`, results in root/results/results.json.
    Returns PrairieLearn's results and the results model (Gradescope's) beside them."""
    (root / "student").mkdir(parents=True)
    for f in submission.iterdir():
        (root / "student" / f.name).write_bytes(f.read_bytes())
    env = dict(os.environ, PL_GRADE_ROOT=str(root),
               PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    proc = subprocess.run([str(grader / "run")], cwd="/", env=env, capture_output=True,
                          text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return (json.loads((root / "results" / "results.json").read_text()),
            json.loads((root / "results" / "gradescope.json").read_text()))


@pytest.fixture(scope="module")
def no_broadcast_model(graded_once):
    """no_broadcast graded once under CI's seed: the results model every platform's writer
    test reads (each platform's grading end to end is the `platforms` tier's,
    tests/test_platforms.py)."""
    return graded_once(SUBMISSIONS / "no_broadcast", suite_seed=0)


@pytest.mark.platforms  # a whole grading (seconds): the platforms tier
@pytest.mark.long
@pytest.mark.slow
def test_prairielearn_grades_with_the_same_verdicts_and_points(tmp_path, no_broadcast_model):
    """`--platform prairielearn`: a folder with `run` (the question's entrypoint), the suite,
    a Dockerfile and the question's info.json settings; its results.json, written from the
    session's results model: no_broadcast loses its two invariants there as on Gradescope,
    with the cause in each failed test's message, and a 0..1 score."""
    from tests.harness.platforms.prairielearn import write

    grader = tmp_path / "pl"
    subprocess.run([sys.executable, "-m", "tests.autograder", "--platform", "prairielearn",
                    "--entry", "python3 main.py", "--suite-seed", "0", "--out", str(grader)],
                   cwd=ROOT, check=True, capture_output=True)
    info = json.loads((grader / "info.json").read_text())["externalGradingOptions"]
    assert info["entrypoint"] == "/capstone-grader/run" and info["enabled"] is True
    assert "COPY . /capstone-grader" in (grader / "Dockerfile").read_text()
    assert os.access(grader / "run", os.X_OK)
    assert json.loads((grader / "autograder.json").read_text())["suite_seed"] == 0
    model = no_broadcast_model
    write(tmp_path / "results" / "results.json", model)
    pl = json.loads((tmp_path / "results" / "results.json").read_text())
    assert pl["gradable"] is True
    assert pl["score"] == pytest.approx((100 - WEIGHTS["equal_rank_norms"]
                                         - WEIGHTS["single_process_parity"]) / 100)
    assert pl["score"] == pytest.approx(model["score"] / 100)
    lost = {t["description"].split("::")[0].rsplit("/", 1)[-1] for t in pl["tests"]
            if t["points"] < t["max_points"]}
    assert lost == {"test_invariant_equal_rank_norms.py",
                    "test_invariant_single_process_parity.py"}
    assert sum(t["max_points"] for t in pl["tests"]) == pytest.approx(100, abs=0.01)
    assert all("initial broadcast is missing" in t["output"] and t["message"]
               for t in pl["tests"] if t["points"] < t["max_points"])


def test_a_submission_the_machine_could_not_grade_is_not_gradable_on_prairielearn():
    from tests.harness.platforms.prairielearn import to_prairielearn

    model = {"score": 80.0, "output": "SCORE INCOMPLETE: 1 of 2 tests could not be graded",
             "extra_data": {"not_graded": ["t2"]},
             "tests": [{"name": "a.py::t1", "score": 80.0, "max_score": 80.0,
                        "status": "passed", "output": ""},
                       {"name": "a.py::t2", "score": 0.0, "max_score": 20.0, "output": "OOM"},
                       {"name": "a.py::off", "score": 0.0, "max_score": 0.0, "output": ""}]}
    pl = to_prairielearn(model)
    assert pl["gradable"] is False and pl["score"] == 0.8
    assert [t["name"] for t in pl["tests"]] == ["t1", "t2"]  # checks turned off: not listed
    assert pl["message"].startswith("SCORE INCOMPLETE")


@pytest.mark.slow
def test_a_submission_cannot_read_the_results_folder(autograder_zip, tmp_path):
    """tests/hostile/peek.py in the rehearsed box, naming the platform's results folder (an
    earlier results file planted there): it reads nothing of it. (The box holds no
    reference: the zip ships the suite alone.)"""
    hostile = ROOT / "tests" / "hostile"
    sub = tmp_path / "peek"
    sub.mkdir()
    for name in ("peek.py", "_common.py"):
        (sub / ("main.py" if name == "peek.py" else name)).write_text((hostile / name).read_text())
    box = tmp_path / "box"
    root = unpack(autograder_zip, box, sub)
    secret = "EARLIER-" + "9a7e" * 8
    (root / "results").mkdir(exist_ok=True)
    (root / "results" / "earlier.json").write_text(secret)
    (root / "submission" / "guess.txt").write_text(
        f"{root / 'results'}\n{root / 'results' / 'earlier.json'}\n")
    results = run_autograder(root)
    said = json.dumps(results)
    assert "files of others" in said and secret not in said, said[:3000]  # it ran, saw none


# The sample `reference` submission (it imports the reference package) as on a machine where
# the package is not installed: the editable install's finder taken out of its path.
UNINSTALLED = """import sys
sys.meta_path[:] = [f for f in sys.meta_path
                    if "__editable__" not in str(getattr(f, "__module__", ""))]
from capstone.cli import exit_now, main

exit_now(main(sys.argv[1:]))
"""


@pytest.mark.platforms  # a whole grading (seconds): the platforms tier
@pytest.mark.long
@pytest.mark.slow
def test_a_grader_never_charges_a_class_built_on_the_reference_it_does_not_ship(
        autograder_zip, reference_only, tmp_path):
    """A grader built without saying whether the class may use the reference ships the
    suite alone: a submission built on it is not graded (no status, SCORE INCOMPLETE, the
    two flags to build with), never charged. Built with --reference-visible, the grader
    ships the package, the runs import it, and the same submission scores 100."""
    sub = tmp_path / "built_on_it"
    sub.mkdir()
    (sub / "main.py").write_text(UNINSTALLED)
    unsaid = run_autograder(unpack(autograder_zip, tmp_path / "unsaid", sub))
    assert unsaid["output"].startswith("SCORE INCOMPLETE"), unsaid["output"][:500]
    assert not [t["name"] for t in unsaid["tests"] if "status" in t]
    assert "reference package `capstone`" in unsaid["output"] and \
        "--reference-visible" in unsaid["output"]  # the instructor's to do, at the top
    assert all("No module named 'capstone" in t["output"] for t in unsaid["tests"])
    shipped = tmp_path / "visible.zip"
    subprocess.run([sys.executable, "-m", "tests.autograder", "--entry", "python3 main.py",
                    "--out", str(shipped), "--reference-visible"], cwd=ROOT, check=True,
                   capture_output=True)
    assert "capstone/zero.py" in zipfile.ZipFile(shipped).namelist()
    visible = run_autograder(unpack(shipped, tmp_path / "visible", sub))
    assert visible["score"] == 100, [t["output"][:300] for t in visible["tests"]
                                     if t.get("status") != "passed"]

"""A class graded end to end: broken students cost only their own rows, a second run resumes,
and the CSV, feedback files and summary are written."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.grade_class import grade_class
from tests.harness.platforms.session import Grading
from tests.harness.report.grading import INVARIANTS

STUDENTS = {
    "crasher": "raise SystemExit('ImportError: no module named zero')\n",
    "hanger": "import time\ntime.sleep(3600)\n",
    "flooder": "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n",
}


@pytest.mark.platforms  # a whole grading (seconds): the platforms tier
@pytest.mark.long
@pytest.mark.slow
def test_a_class_of_broken_students_is_graded_and_resumed(tmp_path):
    subs = tmp_path / "submissions"
    for name, code in STUDENTS.items():
        (subs / name).mkdir(parents=True)
        (subs / name / "main.py").write_text(code)
    out = tmp_path / "grades"
    # one run at a time in each student's session: two at once is the grade-file tests' and
    # the autograder's to show; here three sessions already go at once
    g = Grading(entry=f"{sys.executable} main.py", run_timeout_s=0.5, suite_seed=0,
                session_timeout_s=120, file_mb=4, runs_at_once=1)
    grades = grade_class(subs, out, g, jobs=3, progress=False)
    assert set(grades) == set(STUDENTS) and all(r["score"] == 0 for r in grades.values())
    with open(out / "grades.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["student"] for r in rows] == sorted(STUDENTS)
    assert list(rows[0]) == ["student", "score", *INVARIANTS, "first_violation",
                             "lost_through", "not_graded", "sid", "email", "submission"]
    assert all(r["submission"] == r["student"] for r in rows)  # a plain folder per student
    assert all(r["not_graded"] == "" for r in rows)
    assert all(r["first_violation"] for r in rows)
    assert all(r["lost_through"].startswith(r["first_violation"].split(":")[0]) for r in rows)
    hang = (out / "feedback" / "hanger.md").read_text()
    assert "FAILED" in hang and "bound" in hang and "no module named zero" not in hang
    assert "no module named zero" in (out / "feedback" / "crasher.md").read_text()
    assert (out / "summary.png").stat().st_size > 0
    assert f"| no_deadlock | {len(STUDENTS)} |" in (out / "summary.md").read_text()
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("students/*/results.json")}
    again = grade_class(subs, out, g, jobs=3, progress=False)  # resumes: nobody is graded twice
    assert again.keys() == grades.keys()
    assert {p: p.stat().st_mtime_ns for p in out.glob("students/*/results.json")} == stamps


EXPORT_METADATA = """\
---
submission_1001:
  :submitters:
  - :name: Ada Lovelace
    :sid: '1815'
    :email: ada@example.edu
  - :name: Charles Babbage
    :sid: '1791'
    :email: cb@example.edu
  :created_at: 2026-11-30 23:59:01.000000000 -08:00
  :score: 0.0
  :status: processed
  :results: !ruby/hash:ActiveSupport::HashWithIndifferentAccess
    score: 0.0
submission_1002:
  :submitters:
  - :name: Grace Hopper
    :sid: '1906'
    :email: gh@example.edu
  :created_at: 2026-11-29 10:00:00.000000000 -08:00
"""


def _export(root: Path) -> Path:
    """A Gradescope-shaped export: a folder per submission id and its metadata (a group of
    two and one student; Ruby symbols and tags as Gradescope writes them)."""
    export = root / "export"
    for sid, code in (("submission_1001", STUDENTS["crasher"]),
                      ("submission_1002", STUDENTS["hanger"])):
        (export / sid).mkdir(parents=True)
        (export / sid / "main.py").write_text(code)
    (export / "submission_metadata.yml").write_text(EXPORT_METADATA)
    return export


def test_a_gradescope_export_is_read_with_its_students():
    import tempfile

    from tests.harness.report.roster import Student, read_roster

    with tempfile.TemporaryDirectory() as d:
        roster = read_roster(_export(Path(d)))
        assert [s.name for s in roster] == ["submission_1001", "submission_1002"]
        assert roster[0].students == (Student("Ada Lovelace", "1815", "ada@example.edu"),
                                      Student("Charles Babbage", "1791", "cb@example.edu"))
        assert roster[0].folder.name == "submission_1001" and "2026-11-30" in \
            roster[0].submitted_at
        (Path(d) / "export" / "submission_1003").mkdir()  # a folder the metadata lacks
        with pytest.raises(SystemExit, match="no entry for the folder submission_1003"):
            read_roster(Path(d) / "export")


@pytest.mark.platforms  # a whole grading (seconds): the platforms tier
@pytest.mark.long
@pytest.mark.slow
def test_an_export_graded_as_submitit_jobs_gives_each_member_the_groups_grade(tmp_path):
    """`--executor local`: one submitit job per submission (as on Slurm, on this machine);
    the grades are those graded here, one row per student, a group's members alike."""
    pytest.importorskip("submitit", reason="the [class] extra (pip install -e '.[class]')")
    export = _export(tmp_path)
    g = Grading(entry=f"{sys.executable} main.py", run_timeout_s=0.5, suite_seed=0,
                session_timeout_s=120, file_mb=4, runs_at_once=1)
    here = grade_class(export, tmp_path / "here", g, progress=False)
    jobs = grade_class(export, tmp_path / "jobs", g, jobs=2, progress=False, executor="local")
    assert {k: v["score"] for k, v in jobs.items()} == {k: v["score"] for k, v in here.items()}
    assert list((tmp_path / "jobs" / "submitit").glob("*_result.pkl"))  # submitit's own
    with open(tmp_path / "jobs" / "grades.csv") as f:
        rows = {r["student"]: r for r in csv.DictReader(f)}
    assert set(rows) == {"Ada Lovelace", "Charles Babbage", "Grace Hopper"}
    assert rows["Ada Lovelace"]["submission"] == rows["Charles Babbage"]["submission"] == \
        "submission_1001"
    assert rows["Grace Hopper"]["sid"] == "1906" and rows["Grace Hopper"]["email"]
    first = {r["submission"]: r["first_violation"] for r in rows.values()}
    assert "no module named zero" in first["submission_1001"]  # the crasher's own cause


def test_a_class_and_its_regrade_face_one_seed(tmp_path):
    """grade_class draws the assignment's seed once and keeps it beside the grades: the
    regrade reads it back (the same program, the same grade)."""
    from tests.grade_class import class_seed

    first = class_seed(tmp_path / "grades")
    assert first > 0 and (tmp_path / "grades" / "suite_seed").read_text().strip() == str(first)
    assert class_seed(tmp_path / "grades") == first
    assert class_seed(tmp_path / "other") != first or class_seed(tmp_path / "o2") != first


def test_a_grader_is_built_with_the_assignments_seed():
    """Every platform's grader is built with one seed written in its configuration, unless
    the instructor asks for a seed per session."""
    from tests.autograder import parse_build_args

    a, _ = parse_build_args(["--out", "x"], "p", "d", "o")
    assert isinstance(a.suite_seed, int) and a.suite_seed > 0
    assert parse_build_args(["--out", "x", "--suite-seed", "7"], "p", "d", "o")[0].suite_seed == 7
    assert parse_build_args(["--out", "x", "--seed-per-session"], "p", "d", "o")[0] \
        .suite_seed is None


@pytest.fixture(params=["allowed", "refused"])
def contained(request: pytest.FixtureRequest, tmp_path: Path,
              monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder to grade a class in (yielded), its runs contained in namespaces ("allowed"),
    or as the run user with an `unshare` that exits 1 first on PATH ("refused"), as in
    Gradescope's and PrairieLearn's Docker boxes; skipped where this machine cannot. The
    folder is outside pytest's own temporary root: every pytest that starts (another
    worker's grading session) closes that root to others again, and with it the way to a
    class inside it for the run user, as no grader's class folder is closed."""
    import shutil
    import tempfile

    from tests.harness.run import contain

    if request.param == "refused":
        fake = tmp_path / "bin"
        fake.mkdir()
        (fake / "unshare").write_text("#!/bin/sh\nexit 1\n")
        (fake / "unshare").chmod(0o755)
        monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    contain._unshare_prefix.cache_clear()
    try:
        wanted = contain.USER if request.param == "refused" else contain.NAMESPACES
        if contain.mode() != wanted:
            pytest.skip(f"no {wanted} here: {contain.why_not_user()}")
        folder = Path(tempfile.mkdtemp(prefix="capstone-class-"))
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    finally:
        contain._unshare_prefix.cache_clear()  # the PATH is put back: so is what it decided


@pytest.mark.long
@pytest.mark.slow
def test_a_submission_cannot_read_its_classmates_or_the_grades(contained, monkeypatch):
    """A reader (tests/hostile/undo.py) first tries to undo its sandbox (remount, unmount,
    bind-mount, the cgroups, /proc/sys, ptrace, setuid) and to write into its classmate's
    folder, then walks the class folder and the outputs, and reads its classmate's folder
    and file, the outputs and the project's reference by name, then raises what it read:
    none of a classmate's bytes reach its feedback or the CSV, and nothing of the
    classmate's changes (issue 62: the program holds no privilege to undo the hiding). Under
    namespaces the run sees those folders empty but for its own submission; with unshare
    refused (an `unshare` that exits 1 first on PATH, as in Gradescope's and PrairieLearn's
    Docker boxes) the run user is denied them by an ACL entry for the run
    (tests/harness/run/unseen.py)."""
    secret = "SECRET-" + "5f1c" * 8
    subs, out = contained / "submissions", contained / "grades"
    for name in ("a_reader", "b_secret"):
        (subs / name).mkdir(parents=True)
    hostile = Path(__file__).parent / "hostile"
    (subs / "a_reader" / "main.py").write_text((hostile / "undo.py").read_text())
    (subs / "a_reader" / "_common.py").write_text((hostile / "_common.py").read_text())
    reference = Path(__file__).resolve().parents[1] / "capstone"
    (subs / "a_reader" / "guess.txt").write_text("\n".join([  # by name: folders and files
        "b_secret", "b_secret/main.py", "roster.csv", str(out), str(reference),
        str(reference / "trainer.py")]) + "\n")
    (subs / "b_secret" / "main.py").write_text(f"# {secret}\nraise SystemExit('{secret}')\n")
    (subs / "roster.csv").write_text(f"b_secret,{secret}\n")
    g = Grading(entry=f"{sys.executable} main.py", run_timeout_s=5, suite_seed=0,
                session_timeout_s=120, file_mb=4, runs_at_once=1, hidden=(subs, out))
    planted = [Path(__file__).resolve().parents[1] / "tests" / "undo-was-here.txt",
               out / "undo-was-here.txt", contained / "undo-was-here.txt"]
    monkeypatch.setenv("CAPSTONE_TAMPER_TARGETS", ":".join(map(str, planted)))

    def classmate() -> dict[str, tuple[int, bytes]]:
        return {str(p): (p.stat().st_mode, p.read_bytes() if p.is_file() else b"")
                for p in [subs / "b_secret", *(subs / "b_secret").rglob("*")]}

    before = classmate()
    class_files = [contained, subs, *sorted(subs.rglob("*"))]
    access_before = _access(class_files)
    grades = grade_class(subs, out, g, jobs=1, progress=False)
    assert classmate() == before  # nothing written there, no mode changed
    assert _access(class_files) == access_before  # every mode and ACL put back
    assert not [p for p in planted if p.exists()]  # nothing written outside its run
    # the summary: a_reader's row and every cause told for it (b_secret's own hold its secret)
    summary = (out / "summary.md").read_text()
    told = [ln for ln in summary.splitlines() if ln.startswith("| a_reader ")] + \
        re.findall(r"a_reader \(([^)]*)\)", summary)
    assert told and not [t for t in told if secret in t], told
    reader = (out / "feedback" / "a_reader.md").read_text()
    assert "read 0 files of others" in reader, reader[:2000]
    assert secret not in reader
    with open(out / "grades.csv") as f:
        row = next(r for r in csv.DictReader(f) if r["student"] == "a_reader")
    assert secret not in " ".join(row.values())
    assert not [p for p in [subs, *subs.rglob("*")] if "system.posix_acl_access" in
                os.listxattr(p, follow_symlinks=False)], "an ACL entry outlived the runs"
    assert grades["b_secret"]["score"] == 0  # graded as itself, its own bytes its own


@pytest.mark.platforms  # a whole grading (seconds): the platforms tier
@pytest.mark.long
@pytest.mark.slow
def test_a_class_built_on_the_hidden_reference_is_never_charged_for_it(contained):
    """The reference (capstone/) is hidden from the runs unless the instructor says: a class
    whose programs import it is stopped before anyone is graded, with the two flags to
    choose from; graded all the same (an import the scan cannot see), every run that fails
    reaching for it is not graded, never a failed invariant, with or without namespaces.
    Only where the instructor said it is hidden (--reference-hidden) is the failed import
    the programs' own: what the suite charged before it told the two apart."""
    subs, out = contained / "submissions", contained / "grades"
    (subs / "static").mkdir(parents=True)
    (subs / "static" / "main.py").write_text(
        (Path(__file__).parent / "submissions" / "reference" / "main.py").read_text())
    (subs / "dynamic").mkdir()
    (subs / "dynamic" / "main.py").write_text(  # an import no static scan finds
        "import importlib, sys\ncli = importlib.import_module('caps' + 'tone.cli')\n"
        "cli.exit_now(cli.main(sys.argv[1:]))\n")
    done = subprocess.run([sys.executable, "-m", "tests.grade_class", str(subs), "--out",
                           str(out), "--suite-seed", "0"], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1], timeout=120)
    assert done.returncode == 2, done.stderr
    [line] = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert "1 submission imports the reference package capstone (static)" in line and \
        "--reference-visible" in line and "--reference-hidden" in line, line
    assert not (out / "grades.csv").exists()

    def graded(sees_reference: bool | None, into: Path) -> dict[str, dict[str, str]]:
        g = Grading(entry=f"{sys.executable} main.py", run_timeout_s=10, suite_seed=0,
                    session_timeout_s=180, file_mb=4, runs_at_once=1, hidden=(subs, into),
                    sees_reference=sees_reference)
        grades = grade_class(subs, into, g, jobs=1, progress=False)
        assert all(r["score"] == 0 for r in grades.values())
        with open(into / "grades.csv") as f:
            return {r["student"]: r for r in csv.DictReader(f)}

    unsaid = graded(None, out)
    for name in ("static", "dynamic"):
        results = json.loads((out / "students" / name / "results.json").read_text())
        charged = [f"{t['name']}: {t['output'][:400]}" for t in results["tests"]
                   if "status" in t]
        assert not charged, (name, charged)  # none failed
        assert results["output"].startswith("SCORE INCOMPLETE"), results["output"][:300]
        page = (out / "feedback" / f"{name}.md").read_text()
        shown = re.sub(r"\\(.)", r"\1", page)  # as Markdown renders it (escape.markdown)
        assert "reference package `capstone`" in shown and "--reference-visible" in shown
        assert unsaid[name]["first_violation"] == "" and \
            set(unsaid[name]["not_graded"].split()) == set(INVARIANTS), unsaid[name]
    said = graded(False, contained / "hidden")  # the instructor said: they must not use it
    for name in ("static", "dynamic"):
        assert said[name]["not_graded"] == "" and "capstone" in said[name]["first_violation"]


def _access(paths: list[Path]) -> dict[str, tuple[int, bytes | None]]:
    """Each path's mode and ACL (None: none), as the instructor's files are compared."""
    found = {}
    for p in paths:
        try:
            raw: bytes | None = os.getxattr(p, "system.posix_acl_access", follow_symlinks=False)
        except OSError:
            raw = None
        found[str(p)] = (p.lstat().st_mode, raw)
    return found


@pytest.mark.long
@pytest.mark.slow
def test_a_grading_killed_mid_run_is_put_back_by_the_next(contained, tmp_path):
    """Issue 62: a class whose folders are closed to others (0700; files 0600), graded by
    `python -m tests.grade_class` and SIGKILLed while a submission runs (the access opened
    to the run's user and, with `unshare` refused, each classmate's folder closed to it by an
    ACL entry, are then still in place), then graded again: every mode and ACL of the class
    is as before the first grading (tests/harness/run/access.py's journal, replayed)."""
    import contextlib
    import signal
    import time

    import psutil

    # the gradings' own journal (this process keeps the machine's: access.store)
    env = dict(os.environ, CAPSTONE_ACCESS_JOURNAL=str(tmp_path / "journal"))
    subs, out = contained / "submissions", contained / "grades"
    for name, body in (("a_slow", "import time\ntime.sleep(20)\n"),
                       ("b_quick", "raise SystemExit(3)\n")):
        (subs / name).mkdir(parents=True)
        (subs / name / "main.py").write_text(body)
        (subs / name / "main.py").chmod(0o600)
        (subs / name).chmod(0o700)
    subs.chmod(0o700)
    contained.chmod(0o700)
    files = [contained, subs, *sorted(subs.rglob("*"))]
    before = _access(files)
    command = [sys.executable, "-m", "tests.grade_class", str(subs), "--out", str(out),
               "--suite-seed", "0", "--run-timeout", "60"]
    root = Path(__file__).resolve().parents[1]
    first = subprocess.Popen(command, cwd=root, start_new_session=True, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    slow = (subs / "a_slow").resolve()

    def running() -> list[psutil.Process]:
        found = []
        for p in psutil.process_iter(["cwd", "cmdline"]):
            if p.info["cwd"] == str(slow) and "main.py" in (p.info["cmdline"] or []):
                found.append(p)
        return found

    deadline = time.monotonic() + 120
    while not running() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert running(), "a_slow never started"
    time.sleep(0.5)
    # the whole grading at once, as an OOM killer or a platform's timeout ends it: grade_class,
    # the grading session it started, the run's sandbox and the run
    tree = psutil.Process(first.pid).children(recursive=True)
    os.killpg(first.pid, signal.SIGKILL)
    for p in tree:
        with contextlib.suppress(psutil.Error):
            p.kill()
    first.wait()
    assert _access(files) != before, "the first grading changed nothing: nothing to put back"
    (subs / "a_slow" / "main.py").write_text("raise SystemExit(3)\n")  # quick this time
    again = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=300,
                           env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert _access(files) == before


def test_a_machine_that_cannot_confine_the_runs_grades_nobody_unless_told(tmp_path):
    """Issue 62: neither namespaces nor root (forced here: CAPSTONE_CONTAINMENT=marker-scan):
    grade_class stops before anyone is graded, says what the instructor would give up and
    the flag to accept it; with --unconfined it grades."""
    from tests.harness.run import contain

    subs = tmp_path / "subs"
    (subs / "alice").mkdir(parents=True)
    (subs / "alice" / "main.py").write_text("raise SystemExit(3)\n")
    env = dict(os.environ, **{contain.FORCE_VAR: contain.MARKER_SCAN})
    command = [sys.executable, "-m", "tests.grade_class", str(subs), "--suite-seed", "0",
               "--run-timeout", "10"]
    root = Path(__file__).resolve().parents[1]
    refused = subprocess.run([*command, "--out", str(tmp_path / "a")], cwd=root, env=env,
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2, refused.stderr
    assert "the runs cannot be confined on this machine" in refused.stderr
    assert "CANNOT guarantee" in refused.stderr and "--unconfined" in refused.stderr
    assert not (tmp_path / "a" / "grades.csv").exists()
    graded = subprocess.run([*command, "--out", str(tmp_path / "b"), "--unconfined"],
                            cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert graded.returncode == 0, graded.stderr[-2000:]
    assert (tmp_path / "b" / "grades.csv").is_file()

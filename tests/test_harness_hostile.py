"""The suite against hostile or broken submissions: it finishes within the bound + 10 s,
reports a clear failure, leaves no process behind and still writes the grade file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.harness.check.checks import check_clean_exit, check_monotonic_loss, check_zero_memory
from tests.harness.run.runner import Watch, processes_with_token
from tests.harness.run.runs import BASE, RunCache

HOSTILE = Path(__file__).resolve().parent / "hostile"
ROOT = Path(__file__).resolve().parents[1]
BOUND = 1.0  # seconds: the fixtures are up in well under 0.1 s
SLACK = 10.0


def impl(name: str) -> tuple[str, ...]:
    return (sys.executable, str(HOSTILE / f"{name}.py"))


@pytest.fixture(scope="module")
def cache(shared_tmp):
    """Each hostile program runs once: its tests read the same run."""
    return RunCache(shared_tmp / "hostile", BOUND, ROOT, mem_bytes=512 * 2**20,
                    file_bytes=8 * 2**20,
                    watch=Watch(grace_s=0.5))  # escape's helper sleeps for ever: no 3 s wait


@pytest.mark.parametrize("name", ["hang", "escape", "sigterm", "chatty", "garbage", "nothing",
                                  "memhog"])
def test_hostile_submission_fails_cleanly(cache, name):
    r = cache.get(impl(name), BASE)
    assert r.outcome.wall_s <= BOUND + SLACK, f"{name}: the suite waited {r.outcome.wall_s:.1f}s"
    assert processes_with_token(r.outcome.token) == [], f"{name}: a process survived"
    violations = check_clean_exit(r) + check_monotonic_loss(r) + check_zero_memory(r)
    assert violations, f"{name} passed the checks"
    assert all(str(v) for v in violations)


def test_hang_report_names_unfinished_ranks_and_their_last_step(cache):
    r = cache.get(impl("hang"), BASE)
    assert r.outcome.timed_out and len(r.outcome.alive_at_bound) == 4, r.outcome.reason()
    first = str(check_clean_exit(r)[0])
    for rank in range(4):
        assert f"rank {rank} at step {rank if rank else 2}" in first, first


def test_escaped_process_is_found_and_killed(cache):
    r = cache.get(impl("escape"), BASE)
    assert r.outcome.returncode == 0 and len(r.outcome.survivors) == 1
    assert any("no process left" in str(v) for v in check_clean_exit(r))


def test_a_process_forking_while_proc_is_read_is_still_found():
    """The escape's race (1 fresh clone in 5 under load): the scan lists the intermediate
    child, which forks and is a zombie by the time it is read, its child born after the
    listing: the first scan finds nothing. A second look finds the grandchild; a clean run
    (two empty looks) ends at once; a helper still exiting is waited for."""
    from tests.harness.run.procfs import lingering

    scans = iter([[], [7], [7], [7]])
    assert lingering(lambda: next(scans), 0.0) == [7]
    scans = iter([[], []])
    assert lingering(lambda: next(scans), 5.0) == []
    scans = iter([[9], [9], [], []])
    assert lingering(lambda: next(scans), 5.0) == []


def test_output_flood_is_bounded(cache):
    r = cache.get(impl("chatty"), BASE)
    assert len(r.outcome.stdout_tail) <= 4096
    log = Path(r.parsed.out.parent / "out.log" / "stdout")
    assert log.stat().st_size <= 8 * 2**20  # RLIMIT_FSIZE stopped it


def test_garbage_is_reported_not_crashed_on(cache):
    r = cache.get(impl("garbage"), BASE)
    messages = "\n".join(str(v) for v in check_monotonic_loss(r))
    assert "invalid JSON" in messages and "rank-0.jsonl:22" in messages
    assert "'step' is str" in messages
    assert any("summary.json" in str(v) for v in r.parsed.problems)


def _pytest(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                           *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
@pytest.mark.long
# ids must not carry the word the nested run selects on, or it would select this test too
@pytest.mark.parametrize("name, select, workers", [("garbage", "invariant", "2"),
                                                   ("hang", "no_deadlock", "0")],
                         ids=["garbage-all-checks-xdist", "hang-termination-check"])
def test_grade_file_is_written_for_a_broken_submission(tmp_path, name, select, workers):
    grade = tmp_path / "results.json"
    # Only the invariant modules are collected: the grading flow never imports the reference.
    modules = sorted(str(p) for p in (ROOT / "tests").glob("test_invariant_*.py"))
    proc = _pytest(*modules, "-n", workers, "-k", select, "--impl", " ".join(impl(name)),
                   "--run-timeout", str(BOUND), "--grade-json", str(grade))
    assert proc.returncode == 1, proc.stdout[-2000:]
    results = json.loads(grade.read_text())
    selected = [ln for ln in proc.stdout.splitlines() if ln.startswith("FAILED ")]
    assert len(results["tests"]) == len(selected) > 0, "every graded test is in the file"
    assert results["score"] == 0 and isinstance(results["execution_time"], float)
    assert results["tests"] and all(t["status"] == "failed" and t["score"] == 0
                                    for t in results["tests"])
    assert all(t["output"] and t["output"].splitlines()[0] for t in results["tests"])
    named = [ln.split(": ", 1)[1].split(" (")[0] for t in results["tests"]
             for ln in t["output"].splitlines() if ln.startswith("timeline of the ")]
    assert named and all((tmp_path / n).is_file() for n in named), named  # kept beside it
    assert {"name", "score", "max_score", "status", "output", "visibility"} <= \
        set(results["tests"][0])
    assert "FAIL" in proc.stdout and "processes left behind by runs: 0" in proc.stdout


def test_a_run_cannot_read_the_fault_the_suite_will_make(shared_tmp):
    """In the run where the suite makes its own NaN, nothing the program can read names the
    fault's kind, step or rank: not its environment, its arguments, its parent's, the files
    of its run directory, nor the plan's socket asked a second time (tests/hostile/
    plan_reader.py looks in each)."""
    from tests.harness.run.runs import nemesis_nan

    spec = nemesis_nan(0)
    assert spec.nemesis
    observed = RunCache(shared_tmp / "hostile-observed", BOUND, ROOT, mem_bytes=512 * 2**20,
                        file_bytes=8 * 2**20, watch=Watch(observe=True, grace_s=0.5))
    r = observed.get(impl("plan_reader"), spec)
    report = json.loads((Path(r.parsed.out) / "plan.json").read_text())
    assert report["asked"], "the run was told of no plan socket: not a nemesis run"
    assert report["found"] == {}, report["found"]
    assert report["seeds"] == [], report["seeds"]  # no session seed to draw the plan from
    kind, _, where = spec.nemesis.partition("@")
    assert f"{kind}{where.split(':')[0]}" not in r.parsed.out.as_posix()  # not in --out


class _Options:
    def __init__(self, **given: object) -> None:
        self.given = given

    def getoption(self, name: str) -> object:
        return self.given.get(name)


def test_under_grading_the_faults_are_drawn_apart_from_the_seed_a_run_holds():
    """A run's --seed holds the suite seed, and the suite's formula for the nemesis's step is
    public: under --grade-json the fault seed is drawn afresh, never from the suite seed, so
    no run can compute where the suite's NaN or kill lands; --fault-seed replays a grading;
    outside grading it is the suite seed (the same faults for the same seed)."""
    from tests.harness.report.plugin import _draw
    from tests.harness.run.runs import nemesis_nan

    graded = {_draw(_Options(grade_json="r.json"), "fault_seed", 7)  # type: ignore[arg-type]
              for _ in range(20)}
    assert 7 not in graded and len(graded) > 15
    assert len({nemesis_nan(s).nemesis for s in graded}) > 1  # the faults move with it
    assert _draw(_Options(grade_json="r.json", fault_seed=5),  # type: ignore[arg-type]
                 "fault_seed", 7) == 5
    assert _draw(_Options(), "fault_seed", 7) == 7  # type: ignore[arg-type]


@pytest.mark.slow
def test_ranks_out_of_the_observers_sight_are_not_graded_never_charged(reference_only,
                                                                        run_cache):
    """Issue 61: a correct run whose ranks the observer never saw (unobserved.py) has nothing
    the observed checks may charge or accuse on: each says what it could not see (not
    graded: no points, no charge), where the same program seen (the reference) is judged."""
    from tests.harness.check.observed_checks import (
        check_genuine_ranks,
        check_zero_traffic,
        unseen_ranks,
    )

    hidden = run_cache.get(impl("unobserved"), BASE)
    assert hidden.outcome.returncode == 0 and hidden.parsed.records.get(3), hidden.outcome
    why = unseen_ranks(hidden)
    assert why is not None and why.startswith("the suite could not see the ranks"), why
    assert "-I" in why
    assert check_genuine_ranks(hidden) == [] and check_zero_traffic(hidden) == []
    seen = run_cache.get((sys.executable, "-m", "capstone"), BASE)
    assert unseen_ranks(seen) is None and check_genuine_ranks(seen) == []


def test_a_sandbox_that_fails_is_never_run_unconfined(tmp_path):
    """Issue 62, fail closed: where nsinit cannot confine a run (here its run directory is
    gone), the submission is never started; the report says why, and the runner's outcome
    is not graded, never graded unconfined."""
    from tests.harness.run import contain, nsinit

    prefix = contain._unshare_prefix()
    if prefix is None:
        pytest.skip("no namespaces here: nothing for nsinit to confine")
    ran = tmp_path / "ran"
    with tempfile.TemporaryFile() as report:  # nsinit's report: the runner's unnamed file
        wrapped = contain.wrap([sys.executable, "-c", f"open({str(ran)!r}, 'w')"],
                               tmp_path / "gone", report.fileno(), 1.0)
        proc = subprocess.run(wrapped, capture_output=True, text=True, timeout=60,
                              pass_fds=(report.fileno(),))
        said = json.loads(os.pread(report.fileno(), 1 << 20, 0))
    assert proc.returncode == nsinit.NOT_CONFINED, proc.stderr
    assert not ran.exists() and "not started" in proc.stderr
    assert said["filesystem"].startswith("not confined")
    from tests.harness.run.runner import Outcome
    from tests.harness.run.runs import unconfined

    failed = Outcome([], ".", nsinit.NOT_CONFINED, False, 0.0)
    failed.sandbox = said
    assert unconfined(failed).startswith("the run's sandbox could not be set up (not confined")
    assert unconfined(Outcome([], ".", 0, False, 0.0)) == ""


@pytest.mark.slow
@pytest.mark.parametrize("name", ["plan_prober", "plan_prober_libc"])
def test_a_process_that_asks_the_plan_in_a_ranks_place_takes_the_fault_and_is_told(
        reference_only, run_cache, name):
    """Issue 62: a child forked from the launcher (by os.fork, or libc's fork that skips
    Python's at-fork hooks) asks the plan every question a rank could ask. The plan answers
    only the question of its fault's moment, once: the prober learns it only by taking it,
    the rank then meets no fault, and the suite says so with the hint, never 100."""
    from tests.harness.check.fault_checks import PLAN_HINT, check_nemesis
    from tests.harness.diagnose.diagnosis import diagnose
    from tests.harness.run.runs import nemesis_nan, nemesis_of

    spec = nemesis_nan(0)
    _, step, rank = nemesis_of(spec) or ("nan", 0, 0)
    r = run_cache.get(impl(name), spec)
    probe = json.loads((Path(r.parsed.out) / "probe.json").read_text())
    assert probe["found"] == [f"backward {step} {rank}: {spec.nemesis}"], probe
    [v] = check_nemesis(r, step, rank)
    assert v.found == "taken" and v.message.endswith(PLAN_HINT), v
    assert any("asked the suite's plan" in h for h in diagnose("rollback", [v])), v
    clean = run_cache.get((sys.executable, "-m", "capstone"), spec)  # the rank asks itself
    assert check_nemesis(clean, step, rank) == [] and clean.outcome.plan_fired

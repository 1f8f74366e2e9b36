"""A worker that would wait for a run another worker is computing starts a run the session's
tests will read instead (runs.RunCache.plan, from their `reads` markers), so that neither of a
grading's two workers stands idle; it starts none whose inputs are not there, and none after
a clean run that did not finish. Every graded test names the runs it reads (`reads`)."""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import cast

import pytest

from tests.harness.observe.parse import ParsedRun
from tests.harness.platforms.session import graded_modules
from tests.harness.report.grading import EXERCISES
from tests.harness.run import contain
from tests.harness.run.runner import Watch
from tests.harness.run.runs import BASE, RunCache, RunSpec, longest_first

ROOT = Path(__file__).resolve().parents[1]
# A program that keeps the contract's argv and nothing else: it sleeps 20 ms per step, writes
# when it started and ended, and exits with the code in the file `rc` beside it, if any.
PROGRAM = """
import json, os, sys, time
a = dict(zip(sys.argv[1::2], sys.argv[2::2]))
t0 = time.time()
time.sleep(int(a["--steps"]) / 50)
os.makedirs(a["--out"], exist_ok=True)
with open(os.path.join(a["--out"], "span.json"), "w") as f:
    json.dump([t0, time.time()], f)
sys.exit(int(open("rc").read()) if os.path.exists("rc") else 0)
"""
IMPL = (sys.executable, "program.py")
SLOW = RunSpec("slow", world_size=1, steps=75)
OTHER = RunSpec("other", world_size=1, steps=2)


def _cache(root: Path, tmp_path: Path) -> RunCache:
    tmp_path.mkdir(parents=True, exist_ok=True)
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    return RunCache(root, 30, tmp_path, None, None, Watch(hang_after_s=0, contain=True))


def _span(cache: RunCache, spec: RunSpec) -> tuple[float, float] | None:
    path = cache.root / spec.key(IMPL, cache.cwd) / "out" / "span.json"
    return tuple(json.loads(path.read_text())) if path.is_file() else None



def _wait_behind(tmp_path: Path, plan: list[list[RunSpec]], wanted: RunSpec = SLOW
                 ) -> RunCache:
    """One worker computes `wanted`; a second asks for it while it runs, with `plan` (each
    test's reads) planned. Returns the second worker's cache."""
    first, second = _cache(tmp_path / "runs", tmp_path), _cache(tmp_path / "runs", tmp_path)
    second.plan(IMPL, plan)
    worker = threading.Thread(target=first.get, args=(IMPL, wanted))
    worker.start()
    while not (first.root / wanted.key(IMPL, first.cwd)).exists():  # the first holds it
        time.sleep(0.01)
    run = second.get(IMPL, wanted)
    worker.join()
    assert run.outcome.returncode == 0  # the first worker's run, read by the second
    return second


def test_a_waiting_worker_starts_a_planned_run_meanwhile(tmp_path):
    if contain.mode() != contain.NAMESPACES:  # runs go one at a time on the machine there
        pytest.skip(f"runs cannot overlap under {contain.mode()} containment")
    cache = _wait_behind(tmp_path, [[OTHER]])
    slow, other = _span(cache, SLOW), _span(cache, OTHER)
    assert slow is not None and other is not None, "the planned run was not started ahead"
    # It ended before the awaited run did: started while waiting, not after (its start may
    # come before the awaited program's first line, which its interpreter's start-up delays)
    assert other[1] < slow[1], (
        f"the planned run ran at {other}, not while the awaited one ran ({slow})")


def test_nothing_is_started_ahead_after_a_clean_run_that_did_not_finish(tmp_path):
    (tmp_path / "rc").write_text("1")
    assert _cache(tmp_path / "runs", tmp_path).get(IMPL, BASE).outcome.returncode == 1
    (tmp_path / "rc").unlink()
    cache = _wait_behind(tmp_path, [[OTHER]])
    assert _span(cache, OTHER) is None, "a run was started after the clean run failed"


def test_a_run_read_only_after_the_clean_run_waits_for_it(tmp_path):
    """A broken program's clean run does not finish: a run that every test reads after it
    is never read, so it is not started while the clean run runs; a run some test reads on
    its own is; and once the clean run has finished, the first one is too."""
    alone = RunSpec("alone", world_size=1, steps=2)
    cache = _wait_behind(tmp_path / "a", [[BASE, OTHER], [alone], [OTHER, BASE]], BASE)
    assert _span(cache, OTHER) is not None and _span(cache, alone) is not None
    cache = _wait_behind(tmp_path / "b", [[BASE, OTHER], [BASE, alone]], BASE)
    assert _span(cache, OTHER) is None and _span(cache, alone) is None, \
        "a run read only after the clean run was started while the clean run ran"
    cache = _wait_behind(tmp_path / "b", [[BASE, OTHER]])
    assert _span(cache, OTHER) is not None, "not started ahead once the clean run finished"


def test_a_run_is_not_started_ahead_before_its_inputs_are_there(tmp_path):
    """A resume whose source has not run, and a kill whose clean run (its bound) has not."""
    resume = RunSpec("resume", world_size=1, steps=2, resume_from=(OTHER, 1))
    kill = RunSpec("kill", world_size=1, steps=2, nemesis="kill@1:0")
    cache = _wait_behind(tmp_path, [[resume, kill]])
    assert _span(cache, resume) is None and _span(cache, kill) is None
    cache.get(IMPL, OTHER)  # its source finished now: ready, and started by the next wait
    cache = _wait_behind(tmp_path, [[resume]], replace(SLOW, name="slow2"))
    assert _span(cache, resume) is not None


def test_the_plan_starts_the_longest_runs_first():
    short, long_ = RunSpec("s", world_size=1, steps=6), RunSpec("l", world_size=4, steps=20)
    assert longest_first([short, BASE, long_, short]) == [BASE, long_, short]


class _Item:
    """What conftest reads of a collected test: its `reads` marker and its parameters."""

    def __init__(self, marker: pytest.MarkDecorator | None, **params: object) -> None:
        self.marker = marker.mark if marker is not None else None
        self.callspec = type("CallSpec", (), {"params": params})()

    def get_closest_marker(self, name: str) -> object:
        return self.marker if name == "reads" else None


def test_a_test_may_read_only_the_runs_its_marker_names():
    """The plan is only as good as the markers: the `run` fixture fails a test that reads a
    run its marker does not name (conftest.undeclared), whether named as a RunSpec or by a
    function of the test's parameters."""
    import conftest

    single = RunSpec("single", world_size=1, batch_size=16)
    marked = _Item(pytest.mark.reads(BASE, lambda spec: [spec]), spec=single)
    assert conftest.declared_reads(cast(pytest.Item, marked)) == [BASE, single]
    assert conftest.undeclared(cast(pytest.Item, marked), single) == ""
    assert "reads the other run, which its `reads` marker does not name" in \
        conftest.undeclared(cast(pytest.Item, marked), OTHER)
    assert conftest.undeclared(cast(pytest.Item, _Item(None)), OTHER) == ""  # no marker


def test_every_graded_test_names_the_runs_it_reads():
    """Each test of a graded module carries a `reads` marker (its reads are then checked by
    the `run` fixture as the test runs): a test without one is never planned ahead. (One
    test, not one per module: a test id must not carry the word -k selects the modules by.)"""
    import ast

    modules = graded_modules(ROOT, tuple(EXERCISES))
    assert len(modules) == 10
    for module in map(Path, modules):
        marked = "pytestmark = pytest.mark.reads" in module.read_text()
        tree = ast.parse(module.read_text())
        tests = [f for f in tree.body
                 if isinstance(f, ast.FunctionDef) and f.name.startswith("test_")]
        bare = [f.name for f in tests if not marked and not any(
            "reads" in ast.unparse(d) for d in f.decorator_list)]
        assert tests and not bare, f"{module.name}: no `reads` marker on {bare}"


def test_a_run_is_read_once_per_process_and_anew_once_made_again(tmp_path, monkeypatch):
    from tests.harness.run import runs

    reads: list[Path] = []
    parse = runs.parse_run

    def counted(out: Path, world_size: int) -> ParsedRun:
        reads.append(out)
        return parse(out, world_size)
    monkeypatch.setattr(runs, "parse_run", counted)
    cache = _cache(tmp_path / "runs", tmp_path)
    first = cache.get(IMPL, OTHER)
    assert cache.get(IMPL, OTHER) is first and len(reads) == 1  # the tests' later reads
    # Another worker's cache reads the run it did not make, once, too
    other = _cache(tmp_path / "runs", tmp_path)
    assert other.get(IMPL, OTHER) is other.get(IMPL, OTHER) and len(reads) == 2
    (cache.root / f"{OTHER.key(IMPL, cache.cwd)}.outcome.json").unlink()  # made again
    again = cache.get(IMPL, OTHER)
    assert again is not first and len(reads) == 3


def test_a_helper_thread_computes_planned_runs_beside_the_tests(tmp_path):
    """--runs-at-once 2: one pytest process, the tests' thread and a helper, two runs at once
    (tests/harness/run/helpers.py). While the tests' thread computes the slow run it reads,
    the helper computes the other planned run; the tests then read it without making it
    again, and the helper ends once nothing planned is left."""
    from tests.harness.run.helpers import Helpers

    if contain.mode() != contain.NAMESPACES:
        pytest.skip(f"runs cannot overlap under {contain.mode()} containment")
    cache = _cache(tmp_path / "runs", tmp_path)
    cache.plan(IMPL, [[SLOW], [OTHER]])
    helpers = Helpers(cache, 1)
    slow_run = cache.get(IMPL, SLOW)
    helpers.stop()
    assert slow_run.outcome.returncode == 0 and not helpers.errors
    slow, other = _span(cache, SLOW), _span(cache, OTHER)
    assert other is not None and slow is not None, "the helper did not compute the planned run"
    assert other[1] < slow[1], f"the planned run ran at {other}, not beside the slow one"
    before = (cache.root / f"{OTHER.key(IMPL, cache.cwd)}.outcome.json").stat().st_mtime_ns
    assert cache.get(IMPL, OTHER).outcome.returncode == 0
    assert (cache.root / f"{OTHER.key(IMPL, cache.cwd)}.outcome.json").stat().st_mtime_ns \
        == before, "the tests made the helper's run again"
    assert not cache.planned_left()


def test_helpers_compute_nothing_after_a_clean_run_that_did_not_finish(tmp_path):
    """The helpers keep the plan's rules: after a failed clean run they start nothing."""
    from tests.harness.run.helpers import Helpers

    (tmp_path / "rc").write_text("1")
    cache = _cache(tmp_path / "runs", tmp_path)
    cache.plan(IMPL, [[BASE, OTHER]])
    helpers = Helpers(cache, 1)
    assert cache.get(IMPL, BASE).outcome.returncode == 1
    time.sleep(0.3)  # a helper that ignored the rule would have started OTHER by now
    helpers.stop()
    assert _span(cache, OTHER) is None, "a helper started a run after the clean run failed"

"""Suite configuration: which implementation to check, how long a run may take, where the
grade file goes; the shared run cache; the reporting plugin (tests/harness/report/plugin.py)."""

from __future__ import annotations

import gc
import inspect
import json
import os
import shlex
import sys
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import options, profiles
from tests.harness.check.checks import Run, unwritten
from tests.harness.check.exercise_checks import EXIT_USAGE, NOT_IMPLEMENTED
from tests.harness.check.observed_checks import unseen_ranks
from tests.harness.diagnose.diagnosis import diagnose
from tests.harness.diagnose.evidence import Evidence, evidence_of
from tests.harness.observe.traces import rank_list
from tests.harness.observe.violations import Violation, summarize
from tests.harness.platforms import session
from tests.harness.platforms.session import Grading
from tests.harness.report.grading import LIKELY, NOT_CHECKED, NOT_GRADED
from tests.harness.report.pictures import KINDS, as_text, facts
from tests.harness.report.plugin import SuiteReport, suite_seed
from tests.harness.run import box, bytecode, contain, stress, warm
from tests.harness.run.helpers import Helpers
from tests.harness.run.runner import Watch, start_warm_server
from tests.harness.run.runs import (
    BASE,
    MICRO,
    RESUMED,
    SINGLE,
    RunCache,
    RunSpec,
    killed_by_the_suite,
    resumable,
    timeline_of,
)

# the suite's own fixtures that several test modules share
pytest_plugins = ("tests.containments",)

ROOT = Path(__file__).resolve().parent
REFERENCE_IMPL = (sys.executable, "-m", "capstone")
# One OpenMP thread in the suite's own processes (xdist workers inherit it; runs get their own
# in the runner): their tensors are tiny, and an idle OpenMP thread spin-waits on a core the
# runs need (measured: the workers' CPU over a suite 36 -> 26 CPU-s). Set before any test
# module imports torch; a value the user exported stays.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Where this environment writes no bytecode, the suite's own processes keep theirs outside the
# tree (xdist workers and grading sessions inherit it; runs never see it): else each rewrites
# the asserts of every test module anew (tests/harness/run/bytecode.py).
_KEPT = bytecode.kept(os.environ)
if _KEPT is not None:  # this process too: for the test modules it has still to import
    sys.dont_write_bytecode, sys.pycache_prefix = False, str(_KEPT)
    bytecode.prune(_KEPT)  # once per session: what earlier sessions' temporary copies left


# The Hypothesis profile (tests/profiles.py, docs/suite.md): by default and in CI
# derandomized with no database, `CAPSTONE_HYPOTHESIS=explore` to draw afresh from a
# printed seed. Loaded in pytest_configure, before any test module builds its `@settings` on
# it, where Hypothesis's plugin is on: a grading session turns it off and never imports
# Hypothesis (0.14 s a session).
HYPOTHESIS: tuple[str, int | None] | None = None


def pytest_report_header() -> str | None:
    return profiles.replay(*HYPOTHESIS) if HYPOTHESIS is not None else None


def pytest_addoption(parser: pytest.Parser) -> None:
    """The suite's options, unless the package's plugin already registered them (it loads
    tests/options.py before pytest reads its arguments: capstone/pytest_impl.py)."""
    options.register(parser)


@pytest.hookimpl(tryfirst=True)  # before Hypothesis's plugin reads its options
def pytest_configure(config: pytest.Config) -> None:
    global HYPOTHESIS
    if config.pluginmanager.has_plugin("hypothesispytest"):
        HYPOTHESIS = profiles.load()
        seed = HYPOTHESIS[1]
        if seed is not None and config.getoption("hypothesis_seed", None) is None:
            config.option.hypothesis_seed = str(seed)  # every property test's draws
    box.protect_self()  # if the box runs out, the kernel ends a run, not the suite
    config.pluginmanager.register(SuiteReport(config), "capstone-suite-report")


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Generator[None, object, object]:
    """The test modules import with the cyclic collector paused, and what they imported
    (torch's ~165,000 objects among them, in the suite's own sessions) is then frozen, as
    Python's gc docs advise for objects that live as long as the process: every later full
    collection, frequent in the checks' parsing and Hypothesis's examples, rereads none of it
    (measured: ~15% of the in-process tests' CPU)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return (yield)
    finally:
        if collecting:
            gc.enable()
        gc.freeze()


def _bound_s(item: pytest.Item) -> float:
    """The test's own time bound (its `timeout` marker, positional or `timeout=` as
    pytest-timeout takes it, else pytest-timeout's setting)."""
    marker = item.get_closest_marker("timeout")
    bound = None if marker is None else (marker.args[0] if marker.args
                                         else marker.kwargs.get("timeout"))
    return float(bound if bound is not None else item.config.getini("timeout") or 0)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The `long` tests first, the ones with the largest time bound first among them (a
    stable sort: the rest keep their order). xdist hands tests out in this order, so the
    longest start at once, spread over the workers, and short ones fill the gaps, instead of
    one long test ending the suite on a single worker (where tiers share a session, the
    platforms' class of 16 gradings would otherwise start after the style space's shards)."""
    def order(item: pytest.Item) -> tuple[bool, float]:
        short = item.get_closest_marker("long") is None
        return short, 0.0 if short else -_bound_s(item)
    items.sort(key=order)


@pytest.fixture(scope="session")
def impl(pytestconfig: pytest.Config) -> tuple[str, ...]:
    """The command under test, as argv."""
    text = pytestconfig.getoption("impl")
    return tuple(shlex.split(text)) if text else REFERENCE_IMPL


@pytest.fixture(scope="session")
def is_reference(impl: tuple[str, ...]) -> bool:
    return impl == REFERENCE_IMPL


@pytest.fixture
def reference_only(is_reference: bool) -> None:
    """Skip, under another --impl, a test of the reference package itself (its exercises,
    launchers, plot, mutants and reliability): those are not part of the run contract."""
    if not is_reference:
        pytest.skip("tests the reference package itself, not the --impl under test")


@pytest.fixture(scope="session")
def shared_tmp(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder every xdist worker of this session sees (never shared across sessions)."""
    base = tmp_path_factory.getbasetemp()
    if hasattr(pytestconfig, "workerinput"):  # an xdist worker of this session (not the
        base = base.parent                    # inherited variable of a nested session)
    return base


@pytest.fixture(scope="session")
def warm_server(pytestconfig: pytest.Config, impl: tuple[str, ...],
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """This worker's fork server (tests/harness/run/warm.py) for the runs of the reference and
    its mutants; "" where every run starts cold: an --impl that is not a program this
    repository ships, named in place (a submission starts cold, always; a mutant or a
    hold-out graded as one, by the grades tier, starts warm as in the catalogue's tests),
    --no-observe, no namespaces to start a run in, or a box (a memory limit or a CPU quota:
    the server's torch would be held beside the runs the box is planned for)."""
    if not warm.eligible(list(impl)) or pytestconfig.getoption("no_observe") \
            or contain.mode() != contain.NAMESPACES or stress.in_a_box():
        yield ""
        return
    server = start_warm_server(tmp_path_factory.mktemp("warm"))
    yield server.path
    server.close()


def _run_cache(config: pytest.Config, root: Path, impl: tuple[str, ...], warm_path: str
               ) -> RunCache:
    cwd = ROOT if impl == REFERENCE_IMPL else config.invocation_params.dir
    mem = config.getoption("run_mem_mb")
    fsize = config.getoption("run_file_mb")
    watch = Watch(observe=not config.getoption("no_observe"),
                  hang_after_s=config.getoption("hang_after"), contain=True, warm=warm_path)
    return RunCache(root, config.getoption("run_timeout"), cwd, mem * 2**20 if mem else None,
                    fsize * 2**20 if fsize else None, watch, seed=suite_seed())


class SuiteSlip(Exception):
    """A mistake of the suite's own (a test reading a run its marker does not name): reported
    as not graded, the suite's to fix, never as a failed invariant."""


def declared_reads(item: pytest.Item) -> list[RunSpec] | None:
    """The runs a test reads, as its `reads` marker names them: RunSpecs, or functions of the
    test's parameters (by name) that return a list of them. None: the test has no marker."""
    marker = item.get_closest_marker("reads")
    if marker is None:
        return None
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec is not None else {}
    specs: list[RunSpec] = []
    for arg in marker.args:
        specs += [arg] if isinstance(arg, RunSpec) else arg(
            **{name: params[name] for name in inspect.signature(arg).parameters})
    return specs


def undeclared(item: pytest.Item, spec: RunSpec) -> str:
    """Why the test may not read the `spec` run: it has a `reads` marker that does not name
    it ("" where it may), so the run would never be planned."""
    declared = declared_reads(item)
    if declared is None or spec in declared:
        return ""
    return (f"this test reads the {spec.name} run, which its `reads` marker does not name: "
            "add it there (conftest.py, declared_reads)")


@pytest.fixture(scope="session")
def run_cache(pytestconfig: pytest.Config, shared_tmp: Path, impl: tuple[str, ...],
              warm_server: str, request: pytest.FixtureRequest) -> Iterator[RunCache]:
    """Runs shared by every xdist worker of this session (never across sessions), with the
    runs the session's tests declare (`reads`) planned, for a worker that would wait, and
    for the helper threads of --runs-at-once."""
    cache = _run_cache(pytestconfig, shared_tmp / "capstone-runs", impl, warm_server)
    cache.plan(impl, [r for item in request.session.items if (r := declared_reads(item))])
    helpers = Helpers(cache, pytestconfig.getoption("runs_at_once") - 1)
    yield cache
    helpers.stop()


@pytest.fixture(scope="session")
def cold_run_cache(pytestconfig: pytest.Config, shared_tmp: Path, impl: tuple[str, ...]
                   ) -> RunCache:
    """Runs that start cold whatever they run, as a submission's do: the corpus graded the
    way a platform grades it (the styles tier)."""
    return _run_cache(pytestconfig, shared_tmp / "capstone-runs-cold", impl, "")


@pytest.fixture(scope="session")
def graded_once(shared_tmp: Path) -> Callable[..., dict[str, Any]]:
    """`graded_once(submission, **Grading options)`: its results model, one grading session
    per submission and options for every test and xdist worker of this session that asks
    (the tests of what each platform writes from a results model)."""
    def get(submission: Path, **options: Any) -> dict[str, Any]:
        g = Grading(entry=f"{sys.executable} main.py", sees_reference=True,  # the samples
                    **options).resolved()                                   # import it
        return session.graded_once(shared_tmp / "graded", submission, g)
    return get


@pytest.fixture(scope="session")
def deadlocked(shared_tmp: Path) -> Run:
    """tests/hostile/deadlock.py, stopped by a 2 s deadlock watch: the one run that the
    observer's, the timeline's and the pictures' tests read."""
    cache = RunCache(shared_tmp / "deadlocked", 60, ROOT, None, None,
                     Watch(observe=True, hang_after_s=2, contain=True))
    return cache.get((sys.executable, str(ROOT / "tests" / "hostile" / "deadlock.py")), BASE)


RUNS_USED = pytest.StashKey[list[Run]]()
ENDINGS_CHECKED = {BASE.name, SINGLE.name, RESUMED.name}  # the runs no_deadlock checks


def unfinished(runs: list[Run], invariant: str) -> Run | None:
    """The first run a check read that did not finish (a crash, a deadlock, the bound) where
    the check needed it to: its violations would be consequences, not findings. A fault run
    is what the rollback checks are about (how it ends is their finding), and the runs in
    which the suite kills a rank are meant to end so."""
    for r in runs:
        o = r.outcome
        # Exercise 2's observed checks read the first steps of its micro-batch run, however
        # that run ended.
        subject = (invariant == "rollback" and r.name != BASE.name) or (
            invariant == "accumulation" and r.name == MICRO.name) or (
            invariant == "tensor_parallel" and r.name.startswith("tp"))
        if not subject and not killed_by_the_suite(r.name) and not o.finished():
            return r
    return None


def _not_checked(record: Callable[[str, object], None], what: str, stopped: Run) -> None:
    """Fail a check as a consequence of `stopped`, a run it needed that did not finish: one
    line, the cause named briefly and told where that run's ending is checked."""
    o, cause = stopped.outcome, stopped.outcome.reason()[:300]
    see = ""
    if stopped.name in ENDINGS_CHECKED:  # no_deadlock tells it whole: named, not repeated
        see = "; see no_deadlock"
        if o.deadlock_s is not None and not o.limit:
            cause = "deadlock"
        elif o.blocked:  # the bound: where each rank was blocked is no_deadlock's to say
            cause = o.reason().replace(f"; {o.blocked}", "")[:300]
    line = f"{NOT_CHECKED}the {stopped.name} run did not finish ({cause}){see}"
    record("not_checked", "1")  # the grade file's mark (a run's words cannot forge it)
    record("first_violation", line)
    record("reason", f"{what}: {line}")
    pytest.fail(f"{what}: {line}", pytrace=False)


def _not_logged(record: Callable[[str, object], None], what: str, silent: Run) -> None:
    """Fail a check as a consequence of `silent`, a run that ended well but some of whose
    ranks wrote no metrics file: one line, the contract violation told at no_deadlock."""
    ranks = unwritten(silent)
    files = ", ".join(f"rank-{r}.jsonl" for r in ranks)
    line = (f"{NOT_CHECKED}the {silent.name} run's {rank_list(ranks)} wrote no metrics file "
            f"({files}); see no_deadlock")
    record("not_checked", "1")
    record("first_violation", line)
    record("reason", f"{what}: {line}")
    pytest.fail(f"{what}: {line}", pytrace=False)


@pytest.fixture
def run(run_cache: RunCache, impl: tuple[str, ...], request: pytest.FixtureRequest,
        record_property: Callable[[str, object], None]) -> Callable[[RunSpec], Run]:
    """`run(spec)`: the finished run of the implementation under test (remembered for the
    test's failure report). A run the grading machine killed twice (out of memory) is not
    graded: the test is skipped with the reason, never failed."""
    used = request.node.stash.setdefault(RUNS_USED, [])

    def get(spec: RunSpec) -> Run:
        slip = undeclared(request.node, spec)  # the suite's slip, not the run's: an
        if slip:                                 # error (not graded), never a failed check
            raise SuiteSlip(slip)
        # Whatever a test reads after a base run that did not finish, its verdict is that
        # run's consequence (`holds`): told now, in the same line, without starting the run.
        stopped = next((r for r in used if r.name == BASE.name and not r.outcome.finished()),
                       None)
        if stopped is None and spec.resume_from is not None \
                and not killed_by_the_suite(spec.resume_from[0].name):
            # A resume from a checkpoint that a run which did not finish never wrote cannot
            # succeed: its failure would be that run's consequence. (A run the suite killed
            # is meant not to finish; the rollback checks read its resume as it goes.)
            source, step = run_cache.get(impl, spec.resume_from[0]), spec.resume_from[1]
            if source.outcome.not_graded:
                pytest.skip(f"{NOT_GRADED}{source.name} run: {source.outcome.not_graded}")
            if not resumable(source.outcome, source.parsed.out, step):
                stopped = source
        if stopped is not None:
            _not_checked(record_property, f"{spec.name} run not started", stopped)
        r = run_cache.get(impl, spec)
        if r.outcome.not_graded:
            pytest.skip(f"{NOT_GRADED}{spec.name} run: {r.outcome.not_graded}")
        used.append(r)
        return r
    return get


@pytest.fixture
def observed(run: Callable[[RunSpec], Run]) -> Callable[[RunSpec], Run]:
    """run(spec), skipping when the suite runs with --no-observe, and not graded where the
    observer saw none of the ranks (no evidence either way: no points, no charge)."""
    def get(spec: RunSpec) -> Run:
        r = run(spec)
        if r.observed is None:
            pytest.skip("the observer is off (--no-observe)")
        why = unseen_ranks(r)
        if why is not None:
            pytest.skip(f"{NOT_GRADED}{why}")
        return r
    return get


@pytest.fixture
def exercise_run(run: Callable[[RunSpec], Run], record_property: Callable[[str, object], None]
                 ) -> Callable[[RunSpec, str], Run]:
    """`exercise_run(spec, flag)`: a run with one of the lesson's exercises' flags; a program
    that rejects the flag (exit 2) fails the test here with one line, and nothing else."""
    def get(spec: RunSpec, flag: str) -> Run:
        r = run(spec)
        if r.outcome.returncode == EXIT_USAGE:
            line = f"{NOT_IMPLEMENTED}: the program rejects {flag} (exit 2)"
            record_property("reason", line)
            pytest.fail(line, pytrace=False)
        return r
    return get


@pytest.fixture
def holds(record_property: Callable[[str, object], None], request: pytest.FixtureRequest
          ) -> Callable[[list[Violation], str, str], None]:
    """`holds(violations, what, detail="")`: fail with the located violations, their likely
    causes, `detail` (e.g. each rank's stack) and the timelines of the runs the test read, and
    record the first violation for the session's invariant table and the grade file."""
    def _picture(invariant: str, runs: list[Run], violations: list[Violation]
                 ) -> dict[str, object] | None:
        """What the failure's picture shows; None where it cannot be drawn. The picture is
        the suite's own: the run it compares with is read past the test's `reads` marker,
        and its errors go to the session's log, never into the verdict."""
        try:
            if KINDS.get(invariant) == "curves" and all(r.world_size > 1 for r in runs):
                cache = request.getfixturevalue("run_cache")
                impl = request.getfixturevalue("impl")
                runs = [*runs, cache.get(impl, SINGLE)]  # what it is compared to
            return facts(invariant, runs, violations)
        except Exception as e:  # the suite's error: the check's verdict stands
            record_property("suite_error", f"the picture of {invariant}: {e!r}")
            return None

    def _evidence(runs: list[Run]) -> Evidence | None:
        """What the test's runs show, for the hints to be weighed against (evidence.py); the
        suite's own: its errors go to the session's log, and the hints weigh the violations
        alone."""
        try:
            return evidence_of(runs)
        except Exception as e:  # the suite's error: the check's verdict stands
            record_property("suite_error", f"the evidence of the runs: {e!r}")
            return None

    def check(violations: list[Violation], what: str, detail: str = "") -> None:
        if violations:
            first = violations[0]
            runs = list({id(r): r for r in request.node.stash.get(RUNS_USED, [])}.values())
            stopped = unfinished(runs, first.invariant) \
                if first.invariant != "no_deadlock" else None
            if stopped is not None:  # a consequence: told in one line, the cause elsewhere
                _not_checked(record_property, what, stopped)
            silent = next((r for r in runs if unwritten(r)), None) \
                if first.invariant != "no_deadlock" else None
            if silent is not None:  # the contract violation first, as itself, at no_deadlock
                _not_logged(record_property, what, silent)
            timelines = {r.name: str(t) for r in runs if (t := timeline_of(r)) is not None}
            if timelines:
                record_property("timelines", json.dumps(timelines))
                detail += "".join(f"\ntimeline of the {name} run: {path} (open it in "
                                  "ui.perfetto.dev)" for name, path in timelines.items())
                detail = detail.lstrip("\n")
            picture = _picture(first.invariant, runs, violations)
            if picture is not None:
                record_property("picture", json.dumps(picture))
                detail = f"{as_text(picture)}\n{detail}".rstrip("\n")
            hints = diagnose(first.invariant, violations, evidence=_evidence(runs))
            record_property("first_violation", str(first))
            record_property("reason", f"{what}: {first}")
            if hints:
                record_property("hint", json.dumps(hints))
            if detail:
                record_property("detail", detail)
            likely = "".join(f"\n  {LIKELY}{h}" for h in hints)
            pytest.fail(f"{what}: {len(violations)} violation(s)\n{summarize(violations)}"
                        f"{likely}" + (f"\n{detail}" if detail else ""), pytrace=False)
    return check

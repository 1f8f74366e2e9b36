"""Session reporting: the per-invariant PASS/FAIL table, the mutant matrix, the grade file
and the check that no process of any run outlived the suite."""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.harness.observe.boundary import Refused, RunFolder
from tests.harness.report.class_report import TIMELINE_CAP
from tests.harness.report.escape import flat
from tests.harness.report.grading import LIKELY, NOT_GRADED, graded_name, one_line, write_results
from tests.harness.run import access, box, contain, nested, plan, stress
from tests.harness.run.runner import SESSION_VAR, kill_pids, processes_with_token, session_prefix

INVARIANT_PREFIX = "test_invariant_"
SEED_VAR = plan.SUITE_SEED_VAR  # set by the controller, inherited by xdist workers


def suite_seed() -> int:
    """This session's seed, added to every run's (0 outside grading unless --suite-seed)."""
    return int(os.environ.get(SEED_VAR, "0"))


def fault_seed() -> int:
    """This session's fault seed: it draws the step and rank of each fault the suite makes
    itself (the nemesis). A run's --seed holds the suite seed, so under grading the two are
    drawn apart, and the fault seed never reaches a run (tests/harness/run/runner.py)."""
    return int(os.environ.get(plan.FAULT_SEED_VAR, "0"))


def _draw(config: pytest.Config, option: str, otherwise: int) -> int:
    """A session's seed: `--OPTION` where given (to replay a grading); a fresh one per
    grading session (no answer replay; no run can compute the nemesis's step from its own
    --seed, which holds the suite seed); else `otherwise` (the suite's own sessions: the
    same data and faults for the same seed)."""
    fixed = config.getoption(option)
    if fixed is not None:
        return int(fixed)
    return random.SystemRandom().randrange(1, 2**31) if config.getoption("grade_json") \
        else otherwise


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")


class SuiteReport:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        if not hasattr(config, "workerinput"):  # a controller: a fresh id, even when nested
            os.environ[SESSION_VAR] = uuid.uuid4().hex[:12]
            os.environ[SEED_VAR] = str(_draw(config, "suite_seed", 0))
            os.environ[plan.FAULT_SEED_VAR] = str(_draw(config, "fault_seed", suite_seed()))
            # what a grading killed mid-run left changed on the instructor's files
            access.replay()
        self.nested: Path | None = None
        self.started = time.monotonic()
        self.collected: dict[str, str] = {}  # graded nodeid -> weight key
        self.outcomes: dict[str, dict[str, Any]] = {}
        self.invariants: dict[str, list[tuple[str, str]]] = {}  # name -> [(status, where)]
        self.matrix: list[dict[str, Any]] = []
        self.left_behind: list[int] = []
        self.observed: dict[str, dict[str, Any]] = {}  # test name -> what the observer measured
        self.suite_errors: list[str] = []  # the suite's own errors: the instructor's to see

    @pytest.hookimpl(tryfirst=True)  # before xdist starts the workers (trylast)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        # the sessions this one starts never close its runs (a worker's: its own folder, as
        # two workers' nested sessions would close each other's)
        self.nested = nested.keep_apart(self.config)

    def _graded(self, nodeids: list[str]) -> None:
        for nodeid in nodeids:
            name = graded_name(nodeid)
            if name:
                self.collected[nodeid] = name

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        self._graded([item.nodeid for item in items])  # a single process collects itself

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self._graded(list(ids))  # under xdist only the workers collect: take their lists

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        failed = report.failed or (report.when == "call" and report.outcome != "passed")
        if report.when != "call" and not failed:
            return
        props = {k: str(v) for k, v in report.user_properties}
        status = "passed" if report.passed else ("skipped" if report.skipped else "failed")
        # The output's first line and its "likely: " lines are read back (grading.py's
        # per_invariant): a run's words in a reason or a hint (its exception text) stay on
        # their one line, and a line of the detail never reads as a cause.
        reason = flat(props["reason"]) if props.get("reason") else \
            (one_line(_failure_text(report)) if failed else "")
        if failed and suite_error(report):  # the suite's own error: not graded, never the
            reason = (f"{NOT_GRADED}the suite failed, not the submission ("  # student's
                      f"{one_line(_failure_text(report), 200)}); the instructor regrades "
                      "once it is fixed (the session's log holds its traceback)")
            self.suite_errors.append(f"{report.nodeid} ({report.when}): "
                                     f"{one_line(_failure_text(report), 300)}")
            props.pop("hint", None)
            props.pop("detail", None)
        if "suite_error" in props:
            self.suite_errors.append(f"{report.nodeid}: {props['suite_error']}")
        if "hint" in props:
            reason += "".join(f"\n{LIKELY}{flat(h)}" for h in json.loads(props["hint"]))
        if "detail" in props:
            reason += "".join(f"\n  {ln}" if ln.startswith(LIKELY) else f"\n{ln}"
                              for ln in props["detail"].splitlines())
        if report.skipped and isinstance(report.longrepr, tuple):
            reason = str(report.longrepr[2]).removeprefix("Skipped: ")
        prev = self.outcomes.get(report.nodeid)
        if prev is None or prev["status"] == "passed":  # a failing teardown still fails it
            self.outcomes[report.nodeid] = {"status": status, "output": reason}
            if "not_checked" in props:  # a consequence: the mark the policy reads
                self.outcomes[report.nodeid]["not_checked"] = True
            for key in ("timelines", "picture"):
                if key in props:
                    self.outcomes[report.nodeid][key] = json.loads(props[key])
        module = _module(report.nodeid)
        if module.startswith(INVARIANT_PREFIX) and report.when == "call":
            self.invariants.setdefault(module.removeprefix(INVARIANT_PREFIX), []).append(
                (status, props.get("first_violation", reason)))
        if "observed" in props:
            self.observed[report.nodeid.split("::")[-1]] = json.loads(props["observed"])
        if "matrix_row" in props:
            self.matrix.append(json.loads(props["matrix_row"]))

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        nested.remove(self.nested)
        if hasattr(self.config, "workerinput"):
            return
        self.left_behind = _kill_leftovers()
        if self.left_behind and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        path = self.config.getoption("grade_json")
        if path:
            keep_timelines(Path(path).parent / "timelines", self.outcomes)
        contain.remove_user_roots(os.environ.get(SESSION_VAR, "nosession"))
        if path:
            write_results(Path(path), self.collected, self.outcomes,
                          time.monotonic() - self.started, suite_seed(),
                          {"box": box.read_box().describe(), "containment": contain.mode(),
                           "fault_seed": fault_seed()},
                          note="" if contain.mode() != contain.MARKER_SCAN
                          else f"Containment: {containment_line()}.")

    def not_graded(self) -> list[str]:
        return [f"{nodeid}: {o['output'].removeprefix(NOT_GRADED)}"
                for nodeid, o in sorted(self.outcomes.items())
                if str(o.get("output", "")).startswith(NOT_GRADED)]

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if hasattr(self.config, "workerinput"):
            return
        tr = terminalreporter
        if self.suite_errors:  # first of all: the suite's own errors, charged to nobody
            tr.section(f"SUITE ERRORS: {len(self.suite_errors)} (the suite's, not the "
                       "submission's; tracebacks above)")
            for line in self.suite_errors:
                tr.write_line(line)
        spoiled = self.not_graded()
        if spoiled:  # first: no verdict was reached on these
            tr.section(f"NOT GRADED: {len(spoiled)} test(s), no verdict reached (reasons below)")
            for line in spoiled:
                tr.write_line(line)
        if self.invariants:
            tr.section("invariants")
            for name, results in sorted(self.invariants.items()):
                bad = [where for status, where in results if status == "failed"]
                skipped = all(status == "skipped" for status, _ in results)
                verdict = "SKIP" if skipped else ("FAIL" if bad else "PASS")
                tr.write_line(f"{name:<24} {verdict}" + (f"  first: {bad[0]}" if bad else ""))
        if self.matrix:
            tr.section("mutant x invariant (violations found; '.' not evaluated)")
            cols = sorted({c for row in self.matrix for c in row["cells"]})
            tr.write_line(f"{'mutant':<24}" + "".join(f"{c[:14]:>16}" for c in cols)
                          + "  feedback hint")
            for row in sorted(self.matrix, key=lambda r: r["mutant"]):
                cells = []
                for c in cols:
                    v = row["cells"].get(c)
                    mark = "." if v is None else str(v)
                    if c in row["targets"]:
                        mark += "*"
                    cells.append(f"{mark:>16}")
                tr.write_line(f"{row['mutant']:<24}" + "".join(cells) + "  " + row.get("hint", ""))
            tr.write_line("(* = the invariant the mutant is meant to break)")
        if self.observed:
            tr.section("observed (what the runs did, not what they wrote)")
            for name, figures in sorted(self.observed.items()):
                for key, value in figures.items():
                    tr.write_line(f"{name[:50]:<50} {key}: {value}")
        tr.write_line(f"containment of runs: {containment_line()}")
        tr.write_line(f"box: {box.read_box().describe()}")
        factory = getattr(self.config, "_tmp_path_factory", None)  # the session's runs' root
        bound = stress.bound_line(factory.getbasetemp() / "capstone-runs",
                                  self.config.getoption("run_timeout"),
                                  self.config.getoption("hang_after")) if factory else ""
        if bound:
            tr.write_line(bound)
        tr.write_line(f"processes left behind by runs: {len(self.left_behind)}")
        path = self.config.getoption("grade_json")
        if path:
            tr.write_line(f"grade file written: {path} (suite seed {suite_seed()})")


# What a failed check raises: pytest.fail (the suite's checks, "Failed: ...") or an assert.
# Anything else that ends a graded test (a KeyError in a checker, a fixture's error, the
# suite's own slips) is the suite's error.
STUDENT_FAILURES = ("Failed:", "assert ", "AssertionError")
XDIST_HEADER = "[gw"  # "[gw1] linux -- Python 3.11.7 /path": xdist's line, not the failure's


def suite_error(report: pytest.TestReport) -> bool:
    """Whether a failed report is the suite's own error rather than a check that failed."""
    if report.when != "call":
        return True  # a fixture's setup or teardown: the suite's
    crash = getattr(report.longrepr, "reprcrash", None)
    return crash is not None and not str(crash.message).startswith(STUDENT_FAILURES)


def _failure_text(report: pytest.TestReport) -> str:
    """A failure's own words: the exception's message, else its report without xdist's
    worker header."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None and crash.message:
        return str(crash.message).removeprefix("Failed: ")
    return "\n".join(ln for ln in report.longreprtext.splitlines()
                     if not ln.startswith(XDIST_HEADER))


def keep_timelines(folder: Path, outcomes: dict[str, dict[str, Any]]) -> None:
    """Copy the timelines that failed tests name next to the grade file (the runs' own
    directories are temporary), and name them there, relative to the grade file: in the
    output's line for students to read, and in the outcome's `kept_timelines`, the one
    field grade_class copies from (grading.write_results writes it)."""
    import re

    for o in outcomes.values():
        for run, src in (o.get("timelines") or {}).items():
            try:  # the suite's own file, beside the run's folder: never through a link
                data = RunFolder(Path(src).parent).read(Path(src).name, TIMELINE_CAP)
            except Refused:
                continue
            # the run's name, in the characters class_report.TIMELINE_PATH accepts
            name = re.sub(r"[^A-Za-z0-9_.-]+", "-", run)
            dest = folder / f"{name}.json"  # once per run, whichever tests read it
            folder.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
            rel = f"{folder.name}/{dest.name}"
            o["output"] = o["output"].replace(src, rel)
            o.setdefault("kept_timelines", []).append(rel)


def _kill_leftovers() -> list[int]:
    """Pids of this session's runs still alive at its end (then killed)."""
    found = processes_with_token(session_prefix(), prefix=True)
    kill_pids(found)
    return found


def containment_line() -> str:
    through = contain.passage()
    granted = (f"; {contain.RUN_USER} passes through {', '.join(map(str, through))} (closed to "
               "other users) by an ACL entry of its own" if through else "")
    return contain.GUARANTEES[contain.mode()] + granted

"""`pytest -k invariant` selects exactly the invariant modules: no helper, fixture or other
test carries the word; the long tests are handed out first; and the suite's own processes
keep torch to one thread."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import cast

import pytest

from tests.harness.run import access

ROOT = Path(__file__).resolve().parents[1]


def _collect(*selections: tuple[str, ...]) -> list[set[str]]:
    """Node ids collected for each selection, the collections running side by side."""
    procs = [subprocess.Popen([sys.executable, "-m", "pytest", "--collect-only", "-q",
                               "-p", "no:cacheprovider", *args], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for args in selections]
    out = []
    for proc in procs:
        stdout, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, stdout
        out.append({line for line in stdout.splitlines() if "::" in line})
    return out


def _unfiltered(config: pytest.Config) -> bool:
    """The session collected what `pytest` alone collects: the whole tree, no -k, and no -m
    but the one addopts gives every session (pytest -k invariant gets it too)."""
    args = [Path(a).resolve() for a in config.args]
    addopts = config.getini("addopts")
    default_m = addopts[addopts.index("-m") + 1] if "-m" in addopts[:-1] else ""
    return (not config.getoption("keyword") and config.getoption("markexpr") == default_m
            and args in ([ROOT], [ROOT / "tests"]))


def _selected_by_k(items: list[pytest.Item], expression: str) -> set[str]:
    """What `-k expression` keeps of `items`: pytest's own matcher, as its -k applies it."""
    from _pytest.mark import KeywordMatcher
    from _pytest.mark.expression import Expression

    expr = Expression.compile(expression)
    return {i.nodeid for i in items if expr.evaluate(KeywordMatcher.from_item(i))}


@pytest.mark.slow
def test_k_selection_is_exactly_the_seven_contract_modules(request):
    if _unfiltered(request.config):  # this session collected everything already: no
        everything = {item.nodeid for item in request.session.items}  # second collection
        selected = _selected_by_k(request.session.items, "invariant")
    else:
        everything, selected = _collect((), ("-k", "invariant"))
    expected = {n for n in everything if Path(n.split("::")[0]).name.startswith("test_invariant_")}
    assert len({Path(n.split("::")[0]).name for n in expected}) == 7
    assert selected == expected, (f"extra: {sorted(selected - expected)}, "
                                  f"missing: {sorted(expected - selected)}")


class _Ini:
    """pytest-timeout's setting, as conftest's ordering reads it."""

    def getini(self, name: str) -> object:
        return "300" if name == "timeout" else None


class _Item:
    """What conftest's ordering reads of a pytest item: its markers and the config."""

    config = _Ini()

    def __init__(self, name: str, long: bool, bound: float | None = None,
                 by_name: bool = False) -> None:
        self.name, self.long, self.bound, self.by_name = name, long, bound, by_name

    def get_closest_marker(self, name: str) -> object:
        if name == "timeout" and self.bound is not None:  # timeout(900) or timeout=900
            mark = pytest.mark.timeout(timeout=self.bound) if self.by_name else \
                pytest.mark.timeout(self.bound)
            return mark.mark
        return object() if name == "long" and self.long else None


def test_the_long_tests_are_handed_out_first(request):
    """xdist hands tests out in collection order: the `long` ones come first, the largest
    time bound first among them (and the rest keep their order), so the longest start at
    once instead of one ending the suite alone."""
    import conftest

    items = [_Item("a", False), _Item("b", True), _Item("c", False, 900), _Item("d", True),
             _Item("e", True, 2400), _Item("f", True, 60), _Item("g", True, 600, by_name=True)]
    conftest.pytest_collection_modifyitems(cast(list[pytest.Item], items))
    assert [i.name for i in items] == ["e", "g", "b", "d", "f", "a", "c"]
    if _unfiltered(request.config):  # and this very session's order
        marked = [i.get_closest_marker("long") is not None for i in request.session.items]
        assert any(marked) and marked == sorted(marked, reverse=True)
        bounds = [conftest._bound_s(i) for i, long in zip(request.session.items, marked,
                                                           strict=True) if long]
        assert bounds == sorted(bounds, reverse=True)


def test_the_suites_own_torch_keeps_to_one_thread_unless_told_otherwise():
    """conftest sets OMP_NUM_THREADS before torch is imported here: an idle OpenMP thread of a
    worker would spin on a core the runs need."""
    import torch

    assert torch.get_num_threads() == int(os.environ["OMP_NUM_THREADS"])


def test_what_the_test_modules_imported_is_frozen_and_the_collector_runs_on():
    """conftest freezes what collection imported (this module's classes, and torch's where a
    test module imports it), so that the session's full collections skip it, and resumes the
    collector for the tests."""
    import gc

    assert gc.isenabled() and gc.get_freeze_count() > 10_000
    assert not any(o is _Item for o in gc.get_objects())  # frozen: not listed
    made_now = type("MadeByThisTest", (), {})
    assert any(o is made_now for o in gc.get_objects())


@pytest.mark.slow
def test_impl_may_be_one_absolute_path(tmp_path):
    """`pytest -k invariant --impl /abs/path/run.sh` in the suite's folder: pytest would
    root itself at run.sh's folder (a path among its arguments) and never learn `--impl`;
    the package's pytest plugin (capstone/pytest_impl.py) starts it again with
    `--impl=...`. The runs are run.sh's, as each run's outcome records."""
    student = tmp_path / "student"
    student.mkdir()
    run_sh = student / "run.sh"
    run_sh.write_text(f'#!/bin/sh\nexec {sys.executable} -m capstone "$@"\n')
    run_sh.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "CAPSTONE_"))}
    # a basetemp outside pytest's own root, whose runs stay there (under an unprivileged run
    # user, runs below pytest-of-USER are kept elsewhere for the session: contain.user_root)
    bt = Path(tempfile.mkdtemp(prefix="capstone-bt-"))
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                               "-k", "invariant and no_deadlock and base", "--basetemp",
                               str(bt / "bt"), "--impl", str(run_sh)], cwd=ROOT, env=env,
                              text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=280)
        assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout[-3000:]
        argvs = [json.loads(p.read_text())["argv"][0] for p in bt.rglob("*.outcome.json")]
    finally:
        shutil.rmtree(bt, ignore_errors=True)
    assert argvs == [str(run_sh)], argvs  # the one run the selected check reads


@pytest.mark.slow
@pytest.mark.parametrize("where", ["checkout", "elsewhere"])
def test_a_grade_file_that_already_exists_outside_the_checkout_is_regraded(tmp_path, where):
    """README's grading command with an existing results file elsewhere (a regrade), from
    the checkout and from another folder (the suite's path given): pytest would root itself
    at the file's folder and stop at "unrecognized arguments"; the package's plugin knows
    every option of the suite wherever pytest starts (tests/options.py)."""
    results = tmp_path / "results.json"
    results.write_text("{}")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "CAPSTONE_"))}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                           *([str(ROOT)] if where == "elsewhere" else []),
                           "-k", "invariant and no_deadlock and base", "--basetemp",
                           str(tmp_path / "bt"), "--impl", f"{sys.executable} -m capstone",
                           "--grade-json", str(results), "--run-timeout", "30",
                           "--suite-seed", "0", "--hang-after", "5"],
                          cwd=ROOT if where == "checkout" else elsewhere, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=280)
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout[-3000:]
    [graded] = json.loads(results.read_text())["tests"]  # written anew: the one check
    assert graded["status"] == "passed" and "no_deadlock" in graded["name"], graded


def test_the_package_plugin_registers_every_option_of_the_suite(tmp_path):
    """`pytest --help` in a folder that is not the checkout lists the suite's options:
    the plugin registered them, not conftest.py (which pytest never read there)."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--help"],
                          cwd=tmp_path, text=True, capture_output=True, timeout=120)
    for option in ("--impl", "--grade-json", "--run-timeout", "--run-mem-mb", "--run-file-mb",
                   "--suite-seed", "--hang-after", "--no-observe", "--runs-at-once"):
        assert option in proc.stdout, option


def test_a_session_a_test_starts_leaves_this_sessions_temporary_root_open(tmp_path_factory,
                                                                          tmp_path):
    """A pytest session that a test starts (a grading, a hostile submission's) makes its
    temporary root apart: pytest sets the `pytest-of-USER` it makes back to 0700, which would
    shut the run user out of this session's runs mid-run (tests/harness/run/nested.py)."""
    base = tmp_path_factory.getbasetemp()
    top = next((d for d in [base, *base.parents] if d.name.startswith("pytest-of-")), None)
    if top is None:
        pytest.skip("a --basetemp outside pytest's own root: no session resets it")
    (tmp_path / "test_nothing.py").write_text("def test_nothing(tmp_path):\n    pass\n")
    access.hold(top, lambda p: p.chmod(p.stat().st_mode | 0o011))  # a run's way through
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "-p", "no:xdist", str(tmp_path / "test_nothing.py")],
                              cwd=tmp_path, text=True, capture_output=True, timeout=120)
        assert proc.returncode == 0, proc.stdout[-2000:]
        assert top.stat().st_mode & 0o011 == 0o011, \
            f"{top} closed by a nested session: {oct(top.stat().st_mode)}"
    finally:
        access.release([top])

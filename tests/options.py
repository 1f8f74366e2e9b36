"""The suite's command-line options, in one place for both that register them: conftest.py,
and the package's pytest plugin (capstone/pytest_impl.py), which loads this file by its path
so that the options are known wherever pytest starts and whatever it takes for its rootdir
(a grade file that already exists, an absolute --impl). Standard library and pytest only:
the plugin loads it before anything else.
"""

from __future__ import annotations

import os

import pytest

GROUP = "capstone"


def register(parser: pytest.Parser) -> None:
    """Add the suite's options to `parser`, once (a second call finds them there)."""
    g = parser.getgroup(GROUP, "run contract v1 suite")
    if g.options:
        return
    g.addoption("--impl", default=os.environ.get("CAPSTONE_IMPL"),
                help="command of the implementation to check, shell-split "
                     "(default: $CAPSTONE_IMPL, else the reference `python -m capstone`)")
    g.addoption("--run-timeout", type=float, default=60.0,
                help="seconds one run may take before it is killed (default 60)")
    g.addoption("--run-mem-mb", type=int, default=2048,
                help="memory each process of a run may allocate (RLIMIT_DATA), MiB; a "
                     "process over it fails with MemoryError, its own fault (0: none; "
                     "default 2048)")
    g.addoption("--run-file-mb", type=int, default=512,
                help="largest file a run may write, MiB (0: none; default 512)")
    g.addoption("--grade-json", default=None, help="write a Gradescope results.json here")
    g.addoption("--no-observe", action="store_true",
                help="do not load the suite's observer into the runs (for submissions that "
                     "are not Python programs): the observed checks are skipped")
    g.addoption("--hang-after", type=float, default=5.0,
                help="stop a run once every rank has sat this many seconds in an unfinished "
                     "collective (a deadlock), instead of at --run-timeout (0: never; default 5)")
    g.addoption("--suite-seed", type=int, default=None,
                help="seed added to every run's seed (default: 0, or a fresh one per grading "
                     "session under --grade-json, recorded in the grade file)")
    g.addoption("--fault-seed", type=int, default=None,
                help="seed of the faults the suite makes itself, their steps and ranks "
                     "(default: the suite seed, or a fresh one per grading session under "
                     "--grade-json, recorded in the grade file: pass it to replay a grading)")
    g.addoption("--runs-at-once", type=int, default=1,
                help="runs this pytest process computes at once: the tests' and N-1 helper "
                     "threads' (a grading session's two CPUs without xdist workers; "
                     "default 1)")

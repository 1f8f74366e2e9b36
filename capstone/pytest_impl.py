"""`pytest --impl /abs/path/run.sh --grade-json /tmp/results.json` from any directory: a
pytest plugin this package registers (entry point `pytest11`), so that it loads before
pytest reads its arguments.

pytest settles its rootdir and ini file from the arguments that name existing paths before
it loads conftest.py, which declares `--impl`. A separate value that is a path
(`--impl /abs/path/run.sh`) is taken for a test path: pytest roots itself at that
submission's folder, never finds the suite's conftest.py, and stops at "unrecognized
arguments: --impl". So does a grade file that already exists (`--grade-json
/tmp/results.json`, a regrade). `--impl=VALUE` is never read as a path. On a command line
run, this plugin starts the same pytest again with each such option joined to its value;
nothing else changes.
It also registers every option of the suite (`--impl`, `--grade-json`, `--run-timeout`,
`--suite-seed`, ...), from the checkout's tests/options.py, so that pytest knows
them wherever it starts. It imports nothing of the reference: the suite still never imports
the code it checks.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

OPTIONS = ("--impl", "--grade-json")  # the suite's options whose value may be a path
SUITE_OPTIONS = Path(__file__).resolve().parents[1] / "tests" / "options.py"


def pytest_addoption(parser: pytest.Parser) -> None:
    """The suite's options, where this package sits in its checkout (an editable install;
    elsewhere the suite's conftest.py registers them)."""
    if not SUITE_OPTIONS.is_file():
        return
    spec = importlib.util.spec_from_file_location("capstone_suite_options", SUITE_OPTIONS)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.register(parser)


def joined(args: list[str]) -> list[str]:
    """`args` with each `OPTION VALUE` whose VALUE names an existing path as
    `OPTION=VALUE`."""
    out: list[str] = []
    i = 0
    while i < len(args):
        if args[i] in OPTIONS and i + 1 < len(args) and _is_path(args[i + 1]):
            out.append(f"{args[i]}={args[i + 1]}")
            i += 2
            continue
        if args[i] == "--":  # pytest passes what follows on as positional arguments
            out.extend(args[i:])
            break
        out.append(args[i])
        i += 1
    return out


def _is_path(value: str) -> bool:
    try:
        return not value.startswith("-") and Path(value.split("::")[0]).exists()
    except OSError:
        return False


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """Start pytest again with `--impl=VALUE` where pytest would root itself at VALUE.
    Only for pytest started from a command line (not `pytest.main` in a process of its
    own, nor an xdist worker): its argv is exactly the arguments pytest was given."""
    args = list(early_config.invocation_params.args)
    if sys.argv[1:] != args:
        return
    fixed = joined(args)
    if fixed != args:
        # pytest already captures fd 1 and 2 into files: give them back, as pytest-timeout
        # and pdb do, or the new pytest would write into those files.
        capture = early_config.pluginmanager.getplugin("capturemanager")
        if capture is not None:
            capture.suspend_global_capture(in_=True)
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, [sys.executable, "-m", "pytest", *fixed])

"""Nested pytest sessions (the suite's own tests start some: a grading, a collection, a
hostile submission graded) keep their temporary root apart from their parent's.

Every pytest session that makes its temporary root sets `pytest-of-USER` back to mode 0700
(and so, where a POSIX ACL grants a passage, the ACL's mask to none). The runs of this
session run as an unprivileged user below that folder: a nested session starting mid-run
would shut them out of their own run directory (a warm start's first file, a checkpoint
written at step 10). pytest reads its temporary root from `PYTEST_DEBUG_TEMPROOT`: the
controller sets it, for the sessions it starts, to a folder of its own."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

VAR = "PYTEST_DEBUG_TEMPROOT"


def keep_apart(config: pytest.Config) -> Path | None:
    """Make this session's own temporary root first (it reads the variable as it was), then
    point the sessions it starts at a fresh folder; returns that folder (None where this
    session makes no runs: `--help`, `--collect-only`)."""
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is None or config.getoption("help", False) \
            or config.getoption("collectonly", False):
        return None
    factory.getbasetemp()
    # short: a nested session's runs keep Unix sockets below it (108 bytes at most)
    folder = Path(tempfile.mkdtemp(prefix="capstone-n-"))
    os.environ[VAR] = str(folder)
    return folder


def remove(folder: Path | None) -> None:
    """The nested sessions' folder, at the end of the session that made it."""
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)

"""The suite's own processes keep their bytecode in a private folder where the environment
says to write none (tests/harness/run/bytecode.py), outside the tree; a folder another user
could write to is never used, and runs neither write bytecode nor read the suite's."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.harness.run import bytecode
from tests.harness.run.runner import observed_environment


@pytest.fixture
def tmp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_bytecode_is_kept_outside_the_tree_where_none_may_be_written(tmp_root: Path) -> None:
    env = {bytecode.NO_WRITE_VAR: "1", "PATH": os.environ["PATH"]}
    folder = bytecode.kept(env)
    assert folder is not None and folder.parent == tmp_root
    assert env == {bytecode.PREFIX_VAR: str(folder), "PATH": os.environ["PATH"]}
    assert folder.stat().st_mode & 0o777 == 0o700
    # A module imported under that environment: its bytecode is in the folder, not beside it
    tree = tmp_root / "tree"
    tree.mkdir()
    (tree / "mod.py").write_text("X = 1\n")
    subprocess.run([sys.executable, "-c", "import mod"], cwd=tree, env=env, check=True)
    assert not (tree / "__pycache__").exists()
    assert list(folder.rglob("mod.*.pyc"))


def test_an_environment_that_writes_bytecode_or_names_its_folder_is_left_alone(
        tmp_root: Path) -> None:
    for env in ({}, {bytecode.NO_WRITE_VAR: ""},
                {bytecode.NO_WRITE_VAR: "1", bytecode.PREFIX_VAR: "/elsewhere"}):
        before = dict(env)
        assert bytecode.kept(env) is None and env == before


def test_a_folder_others_may_write_to_is_not_used(tmp_root: Path) -> None:
    folder = tmp_root / f"capstone-pycache-{os.getuid()}"
    folder.mkdir(mode=0o700)
    folder.chmod(0o777)  # another user could plant bytecode that this user would then run
    env = {bytecode.NO_WRITE_VAR: "1"}
    assert bytecode.kept(env) is None and env == {bytecode.NO_WRITE_VAR: "1"}
    folder.rmdir()
    folder.symlink_to(tmp_root)  # nor a link to somewhere else
    assert bytecode.private_folder() is None


def test_runs_write_no_bytecode_and_read_none_of_the_suites(monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    monkeypatch.setenv(bytecode.PREFIX_VAR, "/suite/bytecode")
    monkeypatch.delenv(bytecode.NO_WRITE_VAR, raising=False)
    env = observed_environment(None)
    assert bytecode.PREFIX_VAR not in env and env[bytecode.NO_WRITE_VAR] == "1"


def test_bytecode_of_folders_that_are_gone_is_dropped(tmp_root: Path) -> None:
    folder = bytecode.private_folder()
    assert folder is not None
    alive, gone = tmp_root / "copy-alive" / "tests", tmp_root / "copy-gone" / "tests"
    alive.mkdir(parents=True)
    for source in (alive, gone):  # as Python lays out bytecode under a prefix
        mirror = folder / source.relative_to("/")
        mirror.mkdir(parents=True)
        (mirror / "mod.cpython-311.pyc").write_bytes(b"")
    bytecode.prune(folder)
    assert (folder / alive.relative_to("/") / "mod.cpython-311.pyc").is_file()
    assert not (folder / gone.parent.relative_to("/")).exists()

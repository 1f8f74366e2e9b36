"""The run user's view of a class under the run-user containment (tests/harness/run/unseen.py):
for one run, its own submission and nothing else of the class or the outputs; afterwards,
every file's access as it was."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.harness.run import acl, unseen
from tests.harness.run.contain import become

UID = 61_299  # a uid nobody has: an ACL entry names it all the same


def _class(tmp: Path, names: list[str]) -> tuple[Path, Path]:
    subs, out = tmp / "class", tmp / "out"
    for name in names:
        (subs / name).mkdir(parents=True)
        (subs / name / "main.py").write_text(f"# {name}'s\n")
    (subs / "roster.csv").write_text("names\n")
    out.mkdir()
    (out / "grades.csv").write_text("grades\n")
    for path in [tmp, *tmp.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)  # open to all, as after a grading
    return subs, out


def _reads(path: Path) -> bool:
    """Whether a process of UID can read `path` (list it, if a folder)."""
    cmd = ["ls", str(path)] if path.is_dir() else ["cat", str(path)]
    return subprocess.run(cmd, capture_output=True, preexec_fn=become((UID, UID)),
                          cwd="/").returncode == 0


def _access(root: Path) -> dict[Path, tuple[int, bytes | None]]:
    found = {}
    for path in [root, *root.rglob("*")]:
        try:
            raw: bytes | None = os.getxattr(path, acl.ATTR)
        except OSError:
            raw = None
        found[path] = (path.stat().st_mode, raw)
    return found


@settings(max_examples=10, deadline=None)
@given(names=st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True), min_size=1,
                      max_size=4, unique=True), own=st.integers(0, 3))
@example(names=["alice"], own=0)  # alone in the class: only the roster to hide
def test_the_plan_denies_all_but_the_way_to_the_runs_own(tmp_path_factory, names, own):
    subs, out = _class(tmp_path_factory.mktemp("c"), names)
    mine = subs / names[own % len(names)]
    planned = dict(unseen.plan([subs, out], mine))
    assert planned.pop(subs) == unseen.PASS and planned.pop(out) == unseen.DENY
    assert planned.pop(mine) == unseen.OWN
    assert planned == {p: unseen.DENY for p in subs.iterdir() if p != mine}


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A folder every user may pass into (pytest's own is closed to others)."""
    d = Path(tempfile.mkdtemp(prefix="capstone-unseen-"))
    yield d
    shutil.rmtree(d)


@pytest.mark.skipif(os.geteuid() != 0, reason="another user's view needs root to take")
def test_for_the_run_the_run_user_reads_its_own_and_nothing_else(open_tmp):
    tmp_path = open_tmp
    subs, out = _class(tmp_path, ["alice", "bob"])
    before = _access(tmp_path)
    assert _reads(subs / "bob" / "main.py") and _reads(subs)  # open to others, as it was
    with unseen.hidden_from(UID, [subs, out], subs / "alice"):
        assert _reads(subs / "alice" / "main.py")
        for hidden in (subs, subs / "bob", subs / "bob" / "main.py", subs / "roster.csv",
                       out, out / "grades.csv"):
            assert not _reads(hidden), f"{hidden} stays readable to the run user"
    assert _access(tmp_path) == before  # every ACL and mode put back
    assert _reads(subs / "bob" / "main.py")


@pytest.mark.skipif(os.geteuid() != 0, reason="another user's view needs root to take")
def test_a_deny_a_killed_session_left_on_the_runs_own_folder_is_undone_for_the_run(open_tmp):
    """A grading killed mid-run leaves alice's folder denied (it was bob's run); alice's own
    run still reads her submission."""
    subs, out = _class(open_tmp, ["alice", "bob"])
    with unseen.hidden_from(UID, [subs, out], subs / "bob"):
        left = os.getxattr(subs / "alice", acl.ATTR)  # what a session killed here leaves
    os.setxattr(subs / "alice", acl.ATTR, left)  # as the killed session left it
    assert not _reads(subs / "alice" / "main.py")
    with unseen.hidden_from(UID, [subs, out], subs / "alice"):
        assert _reads(subs / "alice" / "main.py")


def test_what_a_grading_hides_from_its_runs(tmp_path):
    """Every platform's grading hides its outputs and the project's reference from the runs,
    never the submission: a class folder holding it is shown down to it (grade_class), a
    results folder beside it (Gradescope, PrairieLearn) or inside it (Classroom's .grading/)
    is hidden; a grading of the lesson's own programs sees the reference."""
    from tests.harness.platforms.session import Grading, unseen_by_runs

    root = tmp_path / "checkout"
    (root / "capstone").mkdir(parents=True)
    cls, own = tmp_path / "class", tmp_path / "class" / "alice"
    own.mkdir(parents=True)
    beside, inside = tmp_path / "results", own / ".grading"
    hidden = unseen_by_runs(own, Grading(hidden=(cls, beside, inside, own)), root)
    assert hidden == [cls, beside, inside, root / "capstone"]
    assert unseen_by_runs(own, Grading(sees_reference=True), root) == []

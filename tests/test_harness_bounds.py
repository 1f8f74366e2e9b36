"""Bounds on the host (tests/harness/run/bounds.py, issue 72): a fork bomb and a program that
fills its directory and /tmp are each stopped with a violation that names the limit, under
namespaces and under the run user; nothing of them is left, the machine still forks, and the
next run starts. And what the bounds count: a run's files, never through a link."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.check.checks import check_clean_exit
from tests.harness.run import bounds, contain
from tests.harness.run.bounds import Bounds, Usage, over, usage
from tests.harness.run.runner import Watch, processes_with_token, run_command
from tests.harness.run.runs import BASE, Run, RunCache

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = ROOT / "tests" / "hostile"
BOUND_S = 60.0  # the wall-clock bound; each hostile run is stopped at its limit long before
MB = 2**20


def _cache(tmp_path: Path) -> RunCache:
    return RunCache(tmp_path, BOUND_S, ROOT, 1024 * MB, 64 * MB,
                    Watch(observe=False, contain=True, grace_s=0.5))


def _hostile(name: str) -> tuple[str, ...]:
    return (sys.executable, str(HOSTILE / name))


def _stopped_at(contained: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                program: str, small: Bounds) -> Run:
    """`program` run under `small` bounds, then the checks on what is left after it: none of
    its processes, a machine that forks, and a next run (default bounds) that starts."""
    monkeypatch.setenv(bounds.BOUNDS_VAR, small.to_env())
    cache = _cache(tmp_path)
    r = cache.get(_hostile(program), BASE)
    o = r.outcome
    assert o.containment == contained
    assert processes_with_token(o.token) == [], "a process of the run is left"
    if contained == contain.USER:
        user = contain.run_user()
        assert user is not None and contain.user_processes(user[0]) == []
    assert all(not (d / "cgroup.procs").read_text().split() for d in _own_cgroups()), \
        "the run's pids cgroup still holds a process"
    assert subprocess.run(["true"]).returncode == 0, "the machine no longer forks"
    monkeypatch.delenv(bounds.BOUNDS_VAR)
    after = cache.get(_hostile("nothing.py"), BASE).outcome
    assert after.returncode == 0 and not after.limit, after.reason()
    return r


def _own_cgroups() -> list[Path]:
    """The pids cgroups this process made for its runs that are still there."""
    parent = bounds._parent()
    return list(parent.glob(f"{bounds.PIDS_PREFIX}{os.getpid()}-*")) if parent else []


def _said_to_the_student(r: Run) -> str:
    """How the run ended, as the checks of how runs end say it."""
    return "\n".join(str(v) for v in check_clean_exit(r))


@pytest.mark.slow
def test_a_fork_bomb_is_stopped_at_the_limit_of_processes_and_named(contained, tmp_path,
                                                                    monkeypatch):
    why_not = bounds.hard_bound()
    if why_not:  # never a fork bomb where nothing hard holds it
        pytest.skip(why_not)
    small = Bounds(processes=64)
    r = _stopped_at(contained, tmp_path, monkeypatch, "fork_bomb.py", small)
    o = r.outcome
    assert o.limit.startswith("the run reached the limit of 64 processes and threads "
                              "(a fork bomb?)"), (o.limit, o.reason(), o.stderr_tail)
    assert o.reason() == o.limit
    assert o.limit in _said_to_the_student(r)


@pytest.mark.slow
@pytest.mark.parametrize("small, named", [
    (Bounds(disk_mb=16), "the run's directory grew past 16 MB (the limit of what a run may "
                         "write)"),
    (Bounds(inodes=300), "the run's directory grew past 300 files and folders"),
    (Bounds(tmp_mb=16), "the run's files in /tmp and /dev/shm reached 16 MB"),
], ids=["bytes", "inodes", "tmp"])
def test_a_run_that_fills_its_disk_is_stopped_at_the_limit_and_named(
        contained, tmp_path, monkeypatch, small, named):
    r = _stopped_at(contained, tmp_path, monkeypatch, "disk_filler.py", small)
    o = r.outcome
    assert o.limit.startswith(named), (o.limit, o.reason(), o.stderr_tail)
    assert o.limit in _said_to_the_student(r)
    if contained == contain.USER:  # the run user's files in the host's /tmp went with it
        user = contain.run_user()
        assert user is not None
        assert not [p for p in Path("/tmp").glob("disk-filler-*")
                    if p.lstat().st_uid == user[0]]


def test_each_process_of_a_run_holds_the_bounds_rlimits(tmp_path, monkeypatch):
    """RLIMIT_NOFILE everywhere; RLIMIT_NPROC only where the program's uid is the run's
    alone (here: as root), never on a grader's own uid."""
    import resource

    monkeypatch.setenv(bounds.BOUNDS_VAR, Bounds(processes=300, open_files=200).to_env())
    probe = ("import json, resource; print(json.dumps([resource.getrlimit(r) for r in "
             "(resource.RLIMIT_NOFILE, resource.RLIMIT_NPROC)]))")
    o = run_command([sys.executable, "-c", probe], tmp_path / "out", 30.0)
    nofile, nproc = json.loads(o.stdout_tail)
    assert nofile == [200, 200], o.reason()
    if os.geteuid() == 0:
        assert nproc[0] != resource.RLIM_INFINITY, "as root a run's uid is its own"
    assert bounds.rlimits(Bounds(), own_uid=False) == {resource.RLIMIT_NOFILE: 1024}
    assert bounds.rlimits(Bounds(processes=7), own_uid=True)[resource.RLIMIT_NPROC] == 7
    shared = bounds.rlimits(Bounds(processes=7), own_uid=True, shared=True)
    assert shared[resource.RLIMIT_NPROC] >= 7 * bounds.SHARED_RUNS


def test_what_a_run_holds_is_counted_never_through_a_link(tmp_path):
    run, outside = tmp_path / "run", tmp_path / "outside"
    (run / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "big.bin").write_bytes(os.urandom(4 * MB))
    (run / "a.bin").write_bytes(os.urandom(MB))
    (run / "sub" / "b.bin").write_bytes(os.urandom(MB))
    os.link(run / "a.bin", run / "sub" / "a-again.bin")  # one inode, counted once
    (run / "big").symlink_to(outside / "big.bin")
    (run / "there").symlink_to(outside, target_is_directory=True)
    found = usage(run, None)
    assert found.run_inodes == 5  # sub, a.bin, b.bin, big, there (a-again is a.bin)
    assert 2 * MB <= found.run_bytes < 3 * MB, found  # neither big.bin nor outside's
    assert found.tmp_bytes == found.tmp_inodes == 0  # no uid, no nsinit: not counted
    for i in range(40):
        (run / f"small-{i}").write_bytes(b"x")
    assert usage(run, None, most=11).run_inodes == 11, "the walk stops past the bound"


def test_over_names_each_limit_and_nothing_within_them():
    b = Bounds(processes=10, open_files=20, disk_mb=1, inodes=5, tmp_mb=2)
    within = Usage(run_bytes=MB, run_inodes=5, tmp_bytes=MB, tmp_inodes=4)
    assert over(b, within, processes=9, open_files=19) == ""
    assert "limit of 10 processes and threads (a fork bomb?)" in over(b, within, 10)
    assert "limit of 20 open files" in over(b, within, 1, open_files=20)
    assert "directory grew past 1 MB (the limit of what a run may write)" in over(
        b, Usage(run_bytes=MB + 1), 1)
    assert "directory grew past 5 files and folders" in over(b, Usage(run_inodes=6), 1)
    assert "/tmp and /dev/shm reached 2 MB" in over(b, Usage(tmp_bytes=2 * MB), 1)
    assert "/tmp and /dev/shm reached 5 files" in over(b, Usage(tmp_inodes=5), 1)


def test_bounds_are_read_from_the_environment_and_nsinit_keeps_the_same_defaults():
    assert bounds.configured({}) == Bounds()
    given = Bounds(processes=9, tmp_mb=3)
    assert bounds.configured({bounds.BOUNDS_VAR: given.to_env()}) == given
    with pytest.raises(ValueError, match="expected a JSON object"):
        bounds.configured({bounds.BOUNDS_VAR: json.dumps({"procs": 9})})  # a typo: no bound
    # nsinit (python -I -S, no dataclasses) sizes the run's /tmp tmpfs from the same bounds
    said = subprocess.run(
        [sys.executable, "-I", "-S", "-c",
         f"import sys; sys.path.insert(0, {str(ROOT / 'tests/harness/run')!r}); "
         "import nsinit, json; print(json.dumps([nsinit.tmp_bounds({}), nsinit.tmp_bounds("
         f"{{{bounds.BOUNDS_VAR!r}: {given.to_env()!r}}})]))"],
        capture_output=True, text=True, check=True).stdout
    assert json.loads(said) == [[Bounds().tmp_mb, Bounds().inodes], [3, Bounds().inodes]]

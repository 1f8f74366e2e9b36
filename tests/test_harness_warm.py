"""The warm start (tests/harness/run/warm.py): a run of the reference or of the suite's
corpus forked from the fork server writes the same bytes and the same trace records as a cold
start of the same command, inside the run's own namespaces, and what is not the repository's
own starts cold."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.harness.observe.traces import load_observation
from tests.harness.run import contain, warm
from tests.harness.run.runner import Outcome, Watch, run_command, start_warm_server
from tests.test_harness_observer import _files  # every file by content, timings aside

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(contain.mode() != contain.NAMESPACES,
                                reason="the warm start joins a run's namespaces: root and "
                                       "unshare needed")
FLAGS = ["--world-size", "4", "--steps", "20", "--seed", "0", "--batch-size", "4",
         "--checkpoint-every", "10"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = start_warm_server(tmp_path_factory.mktemp("warm"))
    yield s
    s.close()


def _run(tmp: Path, name: str, argv: list[str], warm_path: str = "") -> Outcome:
    d = tmp / name
    d.mkdir()
    return run_command([*argv, "--out", str(d / "out"), *FLAGS], d / "out", 120, cwd=ROOT,
                       watch=Watch(observe=True, contain=True, warm=warm_path))


def _written(out: Path) -> dict[str, str]:
    """What the run wrote, but a file rendezvous: gloo's FileStore deletes it when the last
    rank lets go of it, and whether one rank's store outlives its process is a race of the
    program's (seen in a cold start of zero1.py), not a difference of the start."""
    return {k: v for k, v in _files(out).items() if k != ".rendezvous"}


def _canonical(state: dict[str, object] | None) -> str:
    """Where the state lives, whatever order the storages were met in (and however long the
    search took)."""
    def sort(v: object) -> object:
        if isinstance(v, dict):
            return {k: sort(x) for k, x in v.items() if k not in ("ms", "t")}
        if isinstance(v, list):
            return sorted((sort(x) for x in v), key=lambda x: json.dumps(x, sort_keys=True))
        return v
    return json.dumps(sort(state), sort_keys=True)


def _records(o: Outcome) -> dict[int, dict[str, object]]:
    """Per rank, what the observer recorded, without pids, clocks and the run's folder."""
    obs = load_observation(Path(o.observe_dir))
    return {rank: {"argv": [a.replace(o.out, "OUT") for a in p.argv], "size": p.size,
                   "backwards": len(p.backwards), "work": p.work, "losses": p.losses,
                   "leaves": p.leaves, "state": _canonical(p.state),
                   "memory": len(p.memory),
                   "calls": [(c.op, c.numel_in, c.numel_out, c.dtype, c.group, c.site,
                              c.peer, c.source, c.values, c.digest) for c in p.calls],
                   "flight_recorder": len(p.flight_recorder or [])}
            for rank, p in obs.ranks().items()}


@pytest.mark.parametrize("program", [
    ["-m", "capstone"],
    [str(ROOT / "tests" / "students" / "zero1.py")],  # the corpus: its own model and launcher
], ids=["reference", "corpus"])
def test_a_warm_run_writes_what_a_cold_run_writes_inside_its_namespaces(server, tmp_path,
                                                                         program):
    argv = [sys.executable, *program]
    assert warm.eligible(argv)
    forks = len(list(Path(server.path).parent.glob("observe/p*.jsonl")))
    cold = _run(tmp_path, "cold", argv)
    assert len(list(Path(server.path).parent.glob("observe/p*.jsonl"))) == forks
    hot = _run(tmp_path, "warm", argv, server.path)
    # forked from the server: its helper said hello there (the program, forked once inside
    # the run's mount namespace, only in the run's private /tmp, then in the run's traces)
    # (the corpus's runs start from a second server, forked at the first of them: there too)
    assert len(list(Path(server.path).parent.glob("observe/p*.jsonl"))) == \
        forks + 1 + warm.in_corpus(argv)
    for o in (cold, hot):
        assert o.finished(), o.reason()
        assert o.sandbox.get("network") == "private" and o.sandbox.get("survivors") == []
        assert o.sandbox.get("filesystem") == "confined"
    assert _written(Path(hot.out)) == _written(Path(cold.out))
    cold_records, warm_records = _records(cold), _records(hot)
    assert sorted(warm_records) == [0, 1, 2, 3]
    assert warm_records == cold_records
    # its ranks were processes of the run's PID namespace (small pids there), as cold ones
    obs = load_observation(Path(hot.observe_dir))
    assert all(p.pid < 100 for p in obs.ranks().values())
    assert hot.peak_mb > 50  # measured though no descendant of the runner's child


def test_a_mutant_starts_warm_and_keeps_its_patch(server, tmp_path):
    """The mutant launcher patches the reference in the forked program only: the next run
    from the same server is the reference again."""
    launcher = [sys.executable, str(ROOT / "tests" / "mutants" / "launch.py"), "no_broadcast"]
    assert warm.eligible(launcher)
    mutant = _run(tmp_path, "mutant", launcher, server.path)
    after = _run(tmp_path, "after", [sys.executable, "-m", "capstone"], server.path)
    assert mutant.finished(), mutant.reason()
    assert after.finished(), after.reason()
    ops = {r: [c.op for c in p.calls] for r, p in
           load_observation(Path(mutant.observe_dir)).ranks().items()}
    ref = {r: [c.op for c in p.calls] for r, p in
           load_observation(Path(after.observe_dir)).ranks().items()}
    assert ops[0].count("broadcast") < ref[0].count("broadcast")


def test_what_the_repository_does_not_ship_starts_cold(tmp_path):
    assert not warm.eligible(["python3", "main.py"])
    assert not warm.eligible([sys.executable, "main.py"])
    assert not warm.eligible([sys.executable, "-m", "capstone_student"])
    # the suite's hostile programs and the class's submissions are graded as submissions are
    assert not warm.eligible([sys.executable, str(ROOT / "tests" / "hostile" / "hang.py")])
    assert not warm.eligible([sys.executable,
                              str(ROOT / "tests" / "submissions" / "ring" / "main.py")])
    assert not warm.eligible(["python3", str(ROOT / "tests" / "styles" / "lesson.py")])


def test_a_shipped_program_graded_in_place_starts_warm_and_its_copy_cold(tmp_path):
    """The grades tier grades the mutants and the hold-outs in place (`--impl` names the
    shipped file: conftest's warm_server starts where `eligible`); the same bytes copied into
    a submission's folder, as a platform and bench/holdout.py grade them, start cold."""
    import shutil

    holdout = ROOT / "tests" / "holdout" / "divided_twice.py"
    mutant = [sys.executable, str(ROOT / "tests" / "mutants" / "launch.py"), "no_broadcast"]
    assert warm.eligible([sys.executable, str(holdout)]) and warm.eligible(mutant)
    copy = tmp_path / "main.py"
    shutil.copy(holdout, copy)
    assert not warm.eligible([sys.executable, str(copy)])


def test_a_process_that_ends_while_the_run_is_measured_holds_nothing(monkeypatch):
    """The namespace's processes are listed, then looked at: one may end in between (a rank
    exiting at the end of its run). It holds nothing then; it does not fail the run."""
    import subprocess

    from tests.harness.run import runner

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # reaped: its pid names no process now
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        monkeypatch.setattr(contain, "host_pids", lambda leader: {1: gone.pid, 2: live.pid})
        held = runner.held_mb(gone.pid, set(), namespace=True)
        assert held > 0  # the live process's memory is counted, the ended one is skipped
    finally:
        live.kill()
        live.wait()


def test_a_run_far_below_the_box_is_measured_by_its_resident_sizes():
    """Forked children share their parent's pages: the sum of their resident sizes (statm,
    cheap) is a bound above the PSS (smaps_rollup, a walk of each page table). held_mb gives
    that bound only where it is below `exact_above_mb`, and the exact PSS elsewhere."""
    import subprocess

    from tests.harness.run import runner

    # 64 MB of the parent's pages, shared by 3 forked children that only sleep
    code = ("import os, time; b = bytearray(64 << 20); b[::4096] = b'x' * len(b[::4096])\n"
            "for _ in range(3):\n    if os.fork() == 0:\n        time.sleep(30); os._exit(0)\n"
            "time.sleep(30)")
    leader = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 10
        while len(psutil.Process(leader.pid).children()) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        exact = runner.held_mb(leader.pid, set())
        bound = runner.held_mb(leader.pid, set(), exact_above_mb=10_000)
        below = runner.held_mb(leader.pid, set(), exact_above_mb=50)
    finally:
        for child in psutil.Process(leader.pid).children():
            with contextlib.suppress(psutil.Error):
                child.kill()
        leader.kill()
        leader.wait()
    # The processes below the leader: its 3 children, 3/4 of the shared 64 MB by their PSS,
    # all of it in each by their resident sizes
    assert 0.75 * 64 <= exact < 0.75 * 64 + 16, exact
    assert bound >= 3 * 64, bound
    assert abs(below - exact) < 8, (below, exact)  # over the threshold: the PSS


def test_in_a_box_short_of_memory_every_run_is_measured_exactly(tmp_path, monkeypatch):
    """The run cache gives the runner a threshold from the box's memory budget: in
    Gradescope's 768 MB box it is below what any run's processes hold (one interpreter
    holds more), so every run's peak is its PSS there; on a roomy machine it is not."""
    from tests.harness.run import box
    from tests.harness.run.runs import RunCache

    small = box.Box(768.0, 0.5, 2, 700.0, "v1")
    roomy = box.Box(None, None, 2, 20_000.0, "none")
    monkeypatch.setattr(box, "read_box", lambda: small)
    monkeypatch.setattr("tests.harness.run.stress.in_a_box", lambda: False)
    assert RunCache(tmp_path / "a", 30, tmp_path, None, None).watch.exact_above_mb < 100
    monkeypatch.setattr(box, "read_box", lambda: roomy)
    assert RunCache(tmp_path / "b", 30, tmp_path, None, None).watch.exact_above_mb > 2000

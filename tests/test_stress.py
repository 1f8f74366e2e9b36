"""A starved box is the box's fault: the facts that excuse a failed run (thrashing, a CPU
quota under which no rank reached its first collective) and those that do not (a program
that hangs or sleeps by itself, in any box); a starved run is rerun alone with a longer
bound and, starved again, is NOT GRADED with the facts, never charged."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.run import runs, stress
from tests.harness.run.runner import Outcome, Watch
from tests.harness.run.runs import BASE, RunCache


def _stress(**kw: float) -> dict[str, float]:
    base = {"limit_mb": 768.0, "limit_hits": 0, "peak_mb": 300.0, "stall_us": 0,
            "quota": 0.5, "throttled": 0, "throttled_us": 0, "cpu_us": 0}
    return {**base, **kw}


def test_thrashing_at_the_memory_limit_is_the_box():
    why = stress.starved(_stress(limit_hits=40, peak_mb=767, stall_us=9_000_000), 31.0, False)
    assert "sat at its 768 MB memory limit (40 times, peak 767 MB" in why
    assert "stalled on memory for 9.0s" in why
    # At the limit now and then (page cache reclaimed) without stalls: not thrashing.
    assert stress.starved(_stress(limit_hits=3, stall_us=10_000), 31.0, False) == ""
    # No pressure figures from the kernel: a peak at the limit stands in for the stall.
    assert stress.starved(_stress(limit_hits=3, stall_us=-1, peak_mb=760), 31.0, False)


def test_a_quota_under_which_no_rank_started_is_the_box_but_a_sleeper_is_not():
    busy = _stress(throttled=300, throttled_us=20_000_000, cpu_us=15_000_000)  # 97% of 0.5 CPU
    why = stress.starved(busy, 31.0, reached_collective=False)
    assert "0.5 CPU quota throttled it 300 times (20.0s)" in why and "97%" in why
    assert stress.starved(busy, 31.0, reached_collective=True) == ""  # it ran, then hung
    idle = _stress(throttled=5, throttled_us=100_000, cpu_us=400_000)  # a sleeping program
    assert stress.starved(idle, 31.0, reached_collective=False) == ""
    # No CPU accounting at hand (cgroup v1, cpuacct mounted apart): the share of the quota's
    # periods in which it ran out stands in for the CPU used.
    unknown = dict(busy, cpu_us=-1, periods=310)
    assert "97%" in stress.starved(unknown, 31.0, reached_collective=False)
    assert stress.starved(dict(idle, cpu_us=-1, periods=310), 31.0, False) == ""
    # A program that failed by itself (a MemoryError at its own cap) before the bound is
    # charged, however hard the quota throttled it.
    assert stress.starved(busy, 3.0, reached_collective=False, timed_out=False) == ""


def test_a_program_that_hangs_in_a_roomy_box_is_its_own_fault():
    roomy = _stress(limit_mb=0.0, quota=0.0, cpu_us=30_000_000, stall_us=0)
    assert stress.starved(roomy, 60.0, reached_collective=False) == ""
    hung = Outcome([], ".", None, True, 60.0, stress=roomy)
    assert not hung.ended_by_the_box()
    fine = Outcome([], ".", 0, False, 60.0, stress=_stress(limit_hits=40, stall_us=9 * 10**6))
    assert not fine.ended_by_the_box()  # it ended well: nothing to excuse, however tight


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RunCache:
    monkeypatch.setattr(stress, "in_a_box", lambda: True)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "startup.json").write_text('{"startup_s": 5.0}')  # a slow box
    return RunCache(tmp_path / "runs", 30.0, tmp_path, None, None, Watch(hang_after_s=5.0))


def test_the_bound_follows_how_fast_python_starts_here(cache):
    assert cache.factor == 2.0 and cache.timeout_s == 60.0 and cache.watch.hang_after_s == 10.0
    assert "run bound 60s, hang watch 10.0s (x2.00: python with torch starts in 5.0s" in \
        stress.bound_line(cache.root, 30.0, 5.0)


@pytest.mark.parametrize("second", ["starved", "passed"])
def test_a_starved_run_is_rerun_alone_longer_then_not_graded_or_counted(cache, monkeypatch,
                                                                        second):
    starving = _stress(limit_hits=40, peak_mb=767, stall_us=20_000_000)
    calls: list[float] = []

    def fake_run(argv, out, timeout_s, *args, **kwargs):
        calls.append(timeout_s)
        if len(calls) == 1 or second == "starved":
            return Outcome(list(argv), str(out), None, True, timeout_s, stress=starving)
        return Outcome(list(argv), str(out), 0, False, 12.0)
    monkeypatch.setattr(runs, "run_command", fake_run)
    outcome = cache.get(("python3", "main.py"), BASE).outcome
    assert calls == [60.0, 60.0 * stress.RERUN_SCALE]
    assert outcome.earlier and "starved by the grading machine (the box sat at its 768 MB" \
        in outcome.earlier[0]
    if second == "starved":
        assert outcome.not_graded.startswith("the grading machine starved this run twice")
        assert "not your program's fault" in outcome.not_graded
    else:
        assert outcome.returncode == 0 and outcome.not_graded == ""


def test_a_torch_that_cannot_import_under_the_cap_raises_the_cap(tmp_path, monkeypatch):
    """PyPI's CUDA build of torch maps ~1 GB of private segments at import: under a grader's
    320 MB cap per process no correct program could start, so the cap doubles until torch
    imports, and the report says so."""
    tried: list[int | None] = []

    def import_torch(cap_mb):
        tried.append(cap_mb)
        return 1.0 if cap_mb is None or cap_mb >= 1024 else None
    monkeypatch.setattr(stress, "_import_torch", import_torch)
    monkeypatch.setattr(stress, "in_a_box", lambda: True)
    found = stress.probe(tmp_path, 320)
    assert tried == [320, 640, 1280] and found["cap_mb"] == 1280
    assert stress.probe(tmp_path, 320) == found and len(tried) == 3  # once per session
    assert "may allocate 1280 MB, not 320: this torch cannot import under less" in \
        stress.bound_line(tmp_path, 30.0, 5.0)
    cache = RunCache(tmp_path, 30.0, tmp_path, 320 * 2**20, None, Watch())
    assert cache.mem_bytes == 1280 * 2**20


def test_outside_a_box_nothing_is_probed_or_scaled(tmp_path, monkeypatch):
    monkeypatch.setattr(stress, "in_a_box", lambda: False)
    monkeypatch.setattr(stress, "_import_torch", lambda cap: pytest.fail("probed"))
    cache = RunCache(tmp_path, 30.0, tmp_path, 320 * 2**20, None, Watch(hang_after_s=5.0))
    assert cache.factor == 1.0 and cache.timeout_s == 30.0 and cache.mem_bytes == 320 * 2**20
    assert "not scaled" in stress.bound_line(tmp_path, 30.0, 5.0)

"""Every run's timeline, in the Chrome trace event format that Perfetto and chrome://tracing
open: its structure checked on real runs (a correct one, a deadlocked one, one that moves too
much data), and named by the failure it explains."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.harness.report.timeline_picture import draw
from tests.harness.run.runs import BASE, timeline_of

ROOT = Path(__file__).resolve().parents[1]
PHASES = {"X", "i", "M"}
METADATA = {"process_name", "process_sort_index", "thread_name"}


def valid_trace(path: Path, ranks: int, wall_s: float) -> dict:
    """The trace event format as the viewers read it (JSON object form): events with a phase,
    process and thread ids, microsecond times, complete events with durations, instant
    events with a scope, metadata naming every process and thread."""
    data = json.loads(path.read_text())
    events = data["traceEvents"]
    assert isinstance(events, list) and events and data["displayTimeUnit"] == "ms"
    named: dict[int, str] = {}
    for e in events:
        assert e["ph"] in PHASES and isinstance(e["name"], str) and isinstance(e["pid"], int)
        if e["ph"] == "M":
            assert e["name"] in METADATA and isinstance(e["args"], dict)
            if e["name"] == "process_name":
                named[e["pid"]] = e["args"]["name"]
            continue
        assert isinstance(e["tid"], int) and isinstance(e["ts"], (int, float))
        assert 0 <= e["ts"] <= (wall_s + 5) * 1e6, e  # microseconds from the run's start
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0
            assert {"elements", "bytes", "site"} <= set(e["args"])
        else:
            assert e["s"] in ("t", "p", "g")
    assert sorted(named.values()) == sorted(
        f"rank {r} (pid {p})" for r, p in ((int(v.split()[1]), int(v.split()[-1][:-1]))
                                           for v in named.values()))
    assert sorted(int(v.split()[1]) for v in named.values()) == list(range(ranks))
    return data


def test_a_correct_runs_timeline(run):
    r = run(BASE)
    path = timeline_of(r)
    assert path is not None, "the run cache writes every observed run's timeline"
    data = valid_trace(path, 4, r.outcome.wall_s)
    spans = [e for e in data["traceEvents"] if e["ph"] == "X"]
    marks = [e for e in data["traceEvents"] if e["ph"] == "i"]
    assert len(marks) == 4 * r.steps and "(step 20)" in marks[-1]["name"]
    assert not any("blocked" in e["name"] for e in spans)
    ops = {e["name"] for e in spans}
    assert {"broadcast", "all_to_all_single", "all_reduce"} <= ops, ops
    one = next(e for e in spans if e["name"] == "all_to_all_single")
    assert one["args"]["bytes"] == 4 * one["args"]["elements"] and ":" in one["args"]["site"]


def test_a_deadlocked_runs_timeline_marks_the_stop_and_the_blocked_calls(deadlocked, tmp_path):
    r = deadlocked
    assert r.outcome.deadlock_s is not None
    data = valid_trace(timeline_of(r), 4, r.outcome.wall_s)  # type: ignore[arg-type]
    [stop] = [e for e in data["traceEvents"] if e["ph"] == "i" and e["s"] == "g"]
    assert stop["name"] == "stopped by the suite: deadlock"
    assert stop["args"]["where each rank was"].startswith("rank 0 blocked in recv(src=1)")
    blocked = [e for e in data["traceEvents"] if e["ph"] == "X" and "(blocked)" in e["name"]]
    assert len(blocked) == 4 and all(e["cname"] == "terrible" for e in blocked)
    for e in blocked:  # drawn up to the stop
        assert abs(e["ts"] + e["dur"] - stop["ts"]) < 1e3
    png = draw(timeline_of(r), tmp_path / "t.png")  # type: ignore[arg-type]
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_too_much_traffic_shows_in_the_timeline_and_the_failure_names_it(reference_only,
                                                                         run_cache, tmp_path):
    from tests.harness.check.observed_checks import check_zero_traffic

    launcher = ROOT / "tests" / "mutants" / "launch.py"
    r = run_cache.get((sys.executable, str(launcher), "ddp_and_zero"), BASE)
    assert check_zero_traffic(r)
    data = valid_trace(timeline_of(r), 4, r.outcome.wall_s)  # type: ignore[arg-type]
    reduces = [e for e in data["traceEvents"] if e["ph"] == "X" and e["name"] == "all_reduce"
               and e["args"]["elements"] == 30_080 + 0]
    assert len(reduces) == 4 * r.steps and all("mutants/zero1.py" in e["args"]["site"]
                                               for e in reduces)

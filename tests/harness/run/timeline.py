"""Every rank's timeline of a run, in the Chrome trace event format that Perfetto
(ui.perfetto.dev), chrome://tracing and Holistic Trace Analysis open as they are.

From the observer's records (tests/harness/observe/traces.py): a process per rank, named by rank and
pid; on its "calls" thread a span per collective and point-to-point call (op, elements, bytes,
group, peer, call site; a call torch issued from C++ without a Python call, seen only by the
Flight Recorder, too); on its "training" thread a mark per backward call (the training step);
and, when the suite stopped the run, a mark at that moment saying why and what each rank was
in, its unfinished calls drawn up to it and coloured as blocked. Times are microseconds from
the first record of the run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.harness.observe.boundary import replace_own
from tests.harness.observe.traces import ITEMSIZE, Call, ProcessTrace
from tests.harness.run.result import Run

CALLS_TID, TRAINING_TID = 1, 2


def _span(c: Call, pid: int, origin: int, stop: int) -> dict[str, Any]:
    end = c.t1 if c.t1 is not None else stop
    itemsize = ITEMSIZE.get(c.dtype.lower(), 4)
    args: dict[str, Any] = {"elements": c.numel_in, "bytes": c.numel_in * itemsize,
                            "elements_out": c.numel_out, "group": c.group, "site": c.site}
    if c.peer:
        args["peer"] = c.peer
    if c.source != "python":
        args["issued by"] = "torch C++ (Flight Recorder; no Python call)"
    name = f"{c.op}({c.peer})" if c.peer and c.p2p else c.op
    blocked = c.t1 is None and not c.is_async
    if blocked:
        args["unfinished"] = True
    event: dict[str, Any] = {"ph": "X", "name": name + (" (blocked)" if blocked else ""),
                             "cat": "p2p" if c.p2p else "collective", "pid": pid,
                             "tid": CALLS_TID, "ts": (c.t0 - origin) / 1e3,
                             "dur": max(end - c.t0, 0) / 1e3, "args": args}
    if blocked:
        event["cname"] = "terrible"  # the trace viewers' red
    return event


def _process(rank: int, p: ProcessTrace, origin: int, stop: int, steps: int
             ) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": p.pid, "args": {"name": f"rank {rank} "
                                                                           f"(pid {p.pid})"}},
        {"ph": "M", "name": "process_sort_index", "pid": p.pid, "args": {"sort_index": rank}},
        {"ph": "M", "name": "thread_name", "pid": p.pid, "tid": CALLS_TID,
         "args": {"name": "collectives and sends"}},
        {"ph": "M", "name": "thread_name", "pid": p.pid, "tid": TRAINING_TID,
         "args": {"name": "training (backward calls)"}}]
    for c in [*p.calls, *(c for c in p.collectives() if c.source != "python")]:
        out.append(_span(c, p.pid, origin, stop))
    per_step = max(len(p.backwards) // steps, 1) if steps else 1
    for n, t in enumerate(p.backwards, 1):
        work = p.work[n - 1] if n - 1 < len(p.work) else {}
        out.append({"ph": "i", "s": "t", "name": f"backward {n} (step {(n - 1) // per_step + 1})",
                    "pid": p.pid, "tid": TRAINING_TID, "ts": (t - origin) / 1e3,
                    "args": dict(work)})
    return out


def trace_events(run: Run) -> dict[str, Any]:
    """The run's Chrome trace (a dict: `json.dump` it)."""
    obs = run.observed
    ranks = obs.ranks() if obs else {}
    if not ranks and obs:
        ranks = obs.trainers()
    stamps = [t for p in ranks.values() for t in
              [*(c.t0 for c in p.calls), *(c.t1 for c in p.calls if c.t1), *p.backwards]]
    origin = min(stamps, default=0)
    o = run.outcome
    stopped = o.deadlock_s is not None or o.timed_out
    stop = o.ended_ns or max(stamps, default=origin)
    events: list[dict[str, Any]] = []
    for rank, p in sorted(ranks.items()):
        events += _process(rank, p, origin, stop, run.steps)
    if stopped:
        why = "deadlock" if o.deadlock_s is not None else f"the {o.wall_s:.0f}s bound"
        events.append({"ph": "i", "s": "g", "name": f"stopped by the suite: {why}",
                       "pid": 0, "tid": 0, "ts": (stop - origin) / 1e3, "cname": "terrible",
                       "args": {"where each rank was": o.blocked}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"run": run.name, "world_size": run.world_size, "steps": run.steps,
                          "how it ended": o.reason(), "command": " ".join(o.argv[:3])}}


def write_trace(run: Run, path: Path) -> Path:
    """Write the run's timeline to `path` (open it in ui.perfetto.dev or chrome://tracing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_own(path, json.dumps(trace_events(run)).encode())  # the run may have left a link
    return path

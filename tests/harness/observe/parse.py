"""Read a run directory into plain data; whatever is missing or malformed becomes a
`Violation` (a contract breach with a message), never an exception in the suite."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.harness.observe.boundary import MB, Missing, Refused, RunFolder, loads
from tests.harness.observe.violations import Violation

STEP_KEYS: dict[str, tuple[type, ...]] = {
    "step": (int,), "rank": (int,), "world_size": (int,), "param_norm": (int, float),
    "optimizer_bytes": (int,),
}
TRAIN_KEYS: dict[str, tuple[type, ...]] = {
    "loss": (int, float), "grad_norm": (int, float), "step_time_s": (int, float),
}
EVENT_KEYS: dict[str, tuple[type, ...]] = {
    "event": (str,), "rank": (int,), "step": (int,), "to_step": (int,), "reason": (str,),
}
_STEP_DIR = re.compile(r"^step-(\d{6})$")
# The most the suite reads of each file of the contract's: a 20-step run's metrics are a
# few kB a rank, its summary and manifests a few hundred bytes
METRICS_CAP, SUMMARY_CAP, MANIFEST_CAP = 16 * MB, 1 * MB, 4 * MB
LINE_CAP = 64 * 1024  # one record of a metrics file


@dataclass
class Checkpoint:
    step: int
    path: Path
    manifest: dict[str, Any] | None


@dataclass
class ParsedRun:
    """A run's files: records[rank][step] is the last record of that (rank, step); each event
    carries `_last_step_before`, the step of the last record its file holds before it (the
    order the run did things in: a rollback logged after its faulty step kept that update)."""

    out: Path
    world_size: int
    records: dict[int, dict[int, dict[str, Any]]] = field(default_factory=dict)
    events: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    summary: dict[str, Any] | None = None
    checkpoints: dict[int, Checkpoint] = field(default_factory=dict)
    problems: list[Violation] = field(default_factory=list)  # contract breaches in the files

    @property
    def n_params(self) -> int | None:
        s = self.summary
        return s["n_params"] if s else None


def _typed(obj: dict[str, Any], keys: dict[str, tuple[type, ...]]) -> str | None:
    for key, types in keys.items():
        if key not in obj:
            return f"missing key {key!r}"
        value = obj[key]
        if isinstance(value, bool) or not isinstance(value, types):
            return f"{key!r} is {type(value).__name__}, expected {types[0].__name__}"
    return None


def parse_metrics(path: Path, rank: int, invariant: str = "contract",
                  folder: RunFolder | None = None
                  ) -> tuple[dict[int, dict[str, Any]], list[dict[str, Any]], list[Violation]]:
    """Parse one `rank-{r}.jsonl`: (records by step, events, problems). `folder`: the run's
    folder `path` lies beneath (by default its run directory, two levels up), read through
    the boundary (tests/harness/observe/boundary.py)."""
    records: dict[int, dict[str, Any]] = {}
    events: list[dict[str, Any]] = []
    problems: list[Violation] = []
    folder = folder or RunFolder(path.parents[2])
    rel = path.relative_to(folder.root)
    try:
        text = folder.read(rel, METRICS_CAP).decode("utf-8")
    except Missing:
        return records, events, [Violation(invariant, rank, None, "file", "missing",
                                           f"{path.name} was not written")]
    except Refused as e:
        return records, events, [Violation(invariant, rank, None, "a regular file",
                                           "refused", str(e))]
    except UnicodeDecodeError as e:
        return records, events, [Violation(invariant, rank, None, "UTF-8 text", "unreadable",
                                           f"{path.name}: {e}")]
    last_step: int | None = None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path.name}:{lineno}"
        if len(line) > LINE_CAP:
            problems.append(Violation(invariant, rank, None, "a JSON object", "too long",
                                      f"{where}: a line of {len(line)} characters (one "
                                      "record a line, at most {LINE_CAP})"))
            continue
        try:
            obj = loads(line)
        except ValueError as e:
            problems.append(Violation(invariant, rank, None, "a JSON object", "invalid JSON",
                                      f"{where}: {e} (truncated or not JSON lines?)"))
            continue
        if not isinstance(obj, dict):
            problems.append(Violation(invariant, rank, None, "a JSON object",
                                      type(obj).__name__, f"{where}: not an object"))
            continue
        if "event" in obj:
            err = _typed(obj, EVENT_KEYS)
            if err:
                problems.append(Violation(invariant, rank, obj.get("step"), "event record", err,
                                          f"{where}: {err}"))
            else:
                events.append({**obj, "_last_step_before": last_step})
            continue
        err = _typed(obj, STEP_KEYS)
        if err is None and obj["step"] >= 1:
            err = _typed(obj, TRAIN_KEYS)
        if err is None and obj["rank"] != rank:
            err = f"'rank' is {obj['rank']} in the file of rank {rank}"
        if err is None and obj["step"] < 0:
            err = f"negative step {obj['step']}"
        if err:
            problems.append(Violation(invariant, rank, obj.get("step") if isinstance(
                obj.get("step"), int) else None, "step record", err, f"{where}: {err}"))
            continue
        records[obj["step"]] = obj
        last_step = obj["step"]
    return records, events, problems


def parse_summary(path: Path, folder: RunFolder | None = None
                  ) -> tuple[dict[str, Any] | None, list[Violation]]:
    keys: dict[str, tuple[type, ...]] = {"contract": (int,), "n_params": (int,),
                                         "world_size": (int,), "steps": (int,)}
    folder = folder or RunFolder(path.parents[1])
    try:
        obj = folder.read_json(path.relative_to(folder.root), SUMMARY_CAP)
    except Missing:
        return None, [Violation("contract", None, None, "summary.json", "missing",
                                "summary.json was not written")]
    except Refused as e:
        return None, [Violation("contract", None, None, "summary.json", "invalid",
                                f"summary.json: {e.why}")]
    err = _typed(obj, keys) if isinstance(obj, dict) else "not an object"
    if err is None and obj["n_params"] < 1:
        err = f"n_params {obj['n_params']} < 1"
    if err:
        return None, [Violation("contract", None, None, "summary.json", err,
                                f"summary.json: {err}")]
    return obj, []


def parse_run(out: Path, world_size: int) -> ParsedRun:
    """Everything the suite reads from one run directory (`out`, the run's --out, beneath
    the run's folder: every file read through the boundary)."""
    run = ParsedRun(out=out, world_size=world_size)
    folder = RunFolder(out.parent)
    run.summary, run.problems = parse_summary(out / "summary.json", folder)
    for rank in range(world_size):
        recs, evs, probs = parse_metrics(out / "metrics" / f"rank-{rank}.jsonl", rank,
                                         folder=folder)
        run.records[rank], run.events[rank] = recs, evs
        run.problems += probs
    root = Path(out.name) / "checkpoints"
    if folder.kind(root) == "link":
        run.problems.append(Violation("contract", None, None, "a folder", "a link",
                                      f"{out.name}/checkpoints is a link: write your "
                                      "checkpoints, do not link them"))
    entries = folder.entries(root) if folder.kind(root) == "dir" else []
    for entry in entries:
        m = _STEP_DIR.match(entry.name)
        if not m:
            continue
        if entry.kind != "dir":
            if entry.kind == "link":
                run.problems.append(Violation(
                    "contract", None, int(m.group(1)), "a folder", "a link",
                    f"checkpoints/{entry.name} is a link: write your checkpoints, do not "
                    "link them"))
            continue
        manifest = None
        try:
            found = folder.read_json(root / entry.name / "manifest.json", MANIFEST_CAP)
            manifest = found if isinstance(found, dict) else None
        except Refused:
            manifest = None
        run.checkpoints[int(m.group(1))] = Checkpoint(int(m.group(1)), out / root.name /
                                                      entry.name, manifest)
    return run


def is_finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)

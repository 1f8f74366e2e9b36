"""Scores for a Gradescope `results.json`: the weights live here and only here.

Each graded test module carries a weight; its tests share it equally. Modules not listed
(unit tests of the reference, self-tests of the suite, the mutant catalogue) are not graded.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

WEIGHTS: dict[str, float] = {
    "monotonic_loss": 10,
    "equal_rank_norms": 10,
    "zero1_memory": 20,
    "byte_exact_resume": 20,
    "no_deadlock": 10,
    "single_process_parity": 10,
    "rollback": 10,
    "communication": 10,
}
_MODULE = re.compile(r"(?:^|/)test_(?:invariant|fault)_(?P<name>\w+)\.py::")


def graded_name(nodeid: str) -> str | None:
    """The weight key of a test node id, or None for ungraded tests."""
    m = _MODULE.search(nodeid)
    return m["name"] if m and m["name"] in WEIGHTS else None


def one_line(text: str, limit: int = 300) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    first = lines[0] if lines else ""
    return first if len(first) <= limit else first[:limit - 3] + "..."


def write_results(path: Path, collected: dict[str, str], outcomes: dict[str, dict[str, Any]],
                  elapsed_s: float) -> dict[str, Any]:
    """Write results.json; a graded test that never reported counts as failed (score 0)."""
    per_module: dict[str, int] = {}
    for name in collected.values():
        per_module[name] = per_module.get(name, 0) + 1
    tests = []
    total = 0.0
    for nodeid, name in sorted(collected.items()):
        max_score = WEIGHTS[name] / per_module[name]
        res = outcomes.get(nodeid, {"status": "failed", "output": "did not run to completion"})
        passed = res["status"] == "passed"
        total += max_score if passed else 0.0
        tests.append({"name": nodeid, "score": round(max_score if passed else 0.0, 4),
                      "max_score": round(max_score, 4),
                      "status": "passed" if passed else "failed",
                      "output": res.get("output", ""), "visibility": "visible"})
    results = {"score": round(total, 4),  # summed before rounding: 100, not 100.0001
               "execution_time": round(elapsed_s, 3), "tests": tests}
    path.write_text(json.dumps(results, indent=2) + "\n")
    return results

"""PrairieLearn: its results.json, written from the one results model (the Gradescope-shaped
dict `grading.write_results` returns), same verdicts, points and feedback; and the layout of
its external grader (`python -m tests.autograder --platform prairielearn --out DIR`).

PrairieLearn's external grader reads `/grade/results/results.json`: `gradable`, `score` in
0..1, `message`, `output`, and `tests` with `name`, `points`, `max_points`, `output`,
`message`. A submission the grading machine could not grade (a run it killed twice) is
`gradable: false`: PrairieLearn then shows "not gradable" and counts no attempt, as the
Gradescope text's "SCORE INCOMPLETE" asks the instructor to regrade.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.harness.report.grading import one_line

IMAGE_DIR = "/capstone-grader"  # where the grader image holds the suite
# The Python of Gradescope's Ubuntu 24.04 image, tested here (tox -e py312).
BASE_IMAGE = "python:3.12-slim"

RUN = """#!/usr/bin/env bash
# PrairieLearn's external grader runs this for each submission (the question's entrypoint):
# the submission is in $root/student, results go to $root/results/results.json.
# PL_GRADE_ROOT replaces /grade for a rehearsal. It always leaves results.json behind.
set -uo pipefail
root="${PL_GRADE_ROOT:-/grade}"
cd "$(dirname "$0")"
python3 -m tests.autograder run --platform prairielearn --root "$root"
"""

DOCKERFILE = f"""# The grader image: build and push it (docker build -t YOU/capstone-grader .
# && docker push YOU/capstone-grader), then name it in the question's info.json.
FROM {BASE_IMAGE}
COPY . {IMAGE_DIR}
RUN apt-get update && apt-get install -y --no-install-recommends acl procps \\
    && rm -rf /var/lib/apt/lists/* && bash {IMAGE_DIR}/setup.sh
"""


def info_json(image: str = "YOU/capstone-grader", timeout_s: int = 600) -> dict[str, Any]:
    """What the question's info.json needs for this grader."""
    return {"gradingMethod": "External",
            "externalGradingOptions": {"enabled": True, "image": image,
                                       "entrypoint": f"{IMAGE_DIR}/run",
                                       "timeout": timeout_s}}


def grader_texts() -> dict[str, str]:
    """What PrairieLearn's grader folder holds beside the suite and its configuration:
    `run`, the Dockerfile, the question's info.json settings and a README."""
    return {"run": RUN, "Dockerfile": DOCKERFILE,
            "info.json": json.dumps(info_json(), indent=2) + "\n", "README.md": README}


README = f"""# The capstone's PrairieLearn grader

1. Build the image from this folder and push it: `docker build -t YOU/capstone-grader .`
   then `docker push YOU/capstone-grader` ({BASE_IMAGE} with the suite in {IMAGE_DIR}).
2. In the question's `info.json`, put the settings of this folder's `info.json` (with your
   image's name). Students submit their files (e.g. `main.py`); they land in
   `/grade/student`, and `{IMAGE_DIR}/run` writes `/grade/results/results.json`.
3. A run the grading machine could not grade (it ran out of memory twice) makes the
   submission `gradable: false`: the student loses no attempt; raise the grader's memory.

PrairieLearn's graders run each job in a container that usually refuses `unshare`: runs go
as the unprivileged user `setup.sh` creates, one at a time (as on Gradescope).
"""


def to_prairielearn(results: dict[str, Any]) -> dict[str, Any]:
    """PrairieLearn's results for the results model `results`."""
    graded = [t for t in results.get("tests", []) if t.get("max_score", 0) > 0]
    max_total = sum(float(t["max_score"]) for t in graded)
    not_graded = list(results.get("extra_data", {}).get("not_graded", []))
    output = str(results.get("output", ""))
    tests = [{"name": t["name"].split("::", 1)[-1],
              "description": t["name"],
              "points": float(t.get("score", 0.0)),
              "max_points": float(t["max_score"]),
              "message": one_line(str(t.get("output", ""))) if t.get("status") != "passed"
              else "",
              "output": str(t.get("output", ""))} for t in graded]
    return {"gradable": not not_graded,
            "score": round(float(results.get("score", 0.0)) / max_total, 4) if max_total
            else 0.0,
            "message": one_line(output, 400),
            "output": output,
            "tests": tests}


def write(path: Path, results: dict[str, Any]) -> dict[str, Any]:
    """Write PrairieLearn's results.json for the results model `results`; return it."""
    pl = to_prairielearn(results)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(pl, indent=2) + "\n")
    return pl

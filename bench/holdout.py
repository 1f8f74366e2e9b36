"""The hold-out measure of the hints (issue 63): every mistake of tests/holdout/ graded as a
submission (as the autograder grades one), and for each whether it was caught and how the
first cause its feedback tells it: right, generic and true, or wrong (tests/holdout/
catalogue.py says which phrase is which). Writes docs/figures/holdout.json.

    python bench/holdout.py [NAME ...]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from record import Figure, save  # noqa: E402

from tests.harness.platforms.session import Grading, grade  # noqa: E402
from tests.harness.report.grading import root_causes  # noqa: E402
from tests.holdout.catalogue import FAULT_SEED, HOLDOUTS, SUITE_SEED, Holdout  # noqa: E402


def graded(mistake: Holdout) -> tuple[Holdout, float, str]:
    """The mistake graded in a folder of its own: its score and the first cause told."""
    with tempfile.TemporaryDirectory() as tmp:
        sub = Path(tmp) / "sub"
        sub.mkdir()
        shutil.copy(mistake.program, sub / "main.py")
        results = grade(sub, Path(tmp) / "results.json",
                        Grading(entry=f"{sys.executable} main.py", sees_reference=True,
                                suite_seed=SUITE_SEED, fault_seed=FAULT_SEED).resolved())
    causes = root_causes(results)
    return mistake, float(results["score"]), causes[0] if causes else ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="hold-outs to grade (default: all)")
    a = ap.parse_args()
    chosen = [h for h in HOLDOUTS if not a.names or h.name in a.names]
    figures: list[Figure] = []
    verdicts: Counter[str] = Counter()
    with ThreadPoolExecutor(2) as pool:  # two gradings at once: two cores
        for mistake, score, first in pool.map(graded, chosen):
            verdict = mistake.verdict(score, first)
            verdicts[verdict] += 1
            print(f"{mistake.name}: {score:g}, {verdict}: {first[:160]}", flush=True)
            said = f"{first[:300]}" if score < 100 else f"({mistake.gap})"
            figures.append(Figure(f"`{mistake.name}`: score, and how its first cause is told",
                                  f"{score:g}; {verdict}: {said}",
                                  "caught; right or generic and true"))
    figures.insert(0, Figure("hold-out mistakes graded", ", ".join(
        f"{n} {v}" for v, n in sorted(verdicts.items())), "all caught, 0 wrong"))
    save("holdout", figures)
    return 1 if verdicts["wrong"] or verdicts["not caught"] else 0


if __name__ == "__main__":
    sys.exit(main())

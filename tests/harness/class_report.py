"""A class's grades from its students' results.json files: grades.csv, one feedback file per
student, and a summary (Markdown and a picture) of how many students fail each invariant."""

from __future__ import annotations

import csv
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from tests.harness.grading import LIKELY, NOT_GRADED, WEIGHTS, graded_name

INVARIANTS = tuple(WEIGHTS)
# The order a student should read failures in: how the run ended and what the ranks did first
# (later failures are often their consequences), then the numbers.
ROOT_CAUSE_ORDER = ("no_deadlock", "communication", "equal_rank_norms", "single_process_parity",
                    "monotonic_loss", "zero1_memory", "byte_exact_resume", "rollback")


def _order(name: str) -> int:
    return ROOT_CAUSE_ORDER.index(name) if name in ROOT_CAUSE_ORDER else len(ROOT_CAUSE_ORDER)


def per_invariant(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """invariant -> {"score", "max_score", "passed", "first", "likely", "not_graded"} from a
    results.json ("not_graded": why the grading machine could not grade it, else "")."""
    out: dict[str, dict[str, Any]] = {}
    for t in results.get("tests", []):
        if not t.get("max_score"):
            continue  # not graded (skipped)
        name = graded_name(t["name"]) or t["name"]
        row = out.setdefault(name, {"score": 0.0, "max_score": 0.0, "passed": True,
                                    "first": "", "likely": [], "not_graded": ""})
        row["score"] += t.get("score", 0.0)
        row["max_score"] += t.get("max_score", 0.0)
        if str(t.get("output", "")).startswith(NOT_GRADED):
            row["not_graded"] = row["not_graded"] or str(t["output"]).removeprefix(NOT_GRADED)
        elif t.get("status") != "passed":
            lines = str(t.get("output", "")).splitlines()
            if row["passed"]:
                row["first"] = lines[0] if lines else ""
            row["passed"] = False
            for line in lines[1:]:
                cause = line.removeprefix(LIKELY)
                if line.startswith(LIKELY) and cause not in row["likely"]:
                    row["likely"].append(cause)
    return out


def _points(x: float) -> str:
    return f"{x:.4g}"


def write_csv(path: Path, grades: dict[str, dict[str, Any]]) -> None:
    """student, score, one column per invariant (points earned), first violation."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student", "score", *INVARIANTS, "first_violation", "not_graded"])
        for student, results in sorted(grades.items()):
            inv = per_invariant(results)
            failed = [(k, v) for k in sorted(INVARIANTS, key=_order)
                      if (v := inv.get(k)) and not v["passed"]]
            first = f"{failed[0][0]}: {failed[0][1]['first']}" if failed else ""
            spoiled = " ".join(k for k in INVARIANTS if inv.get(k, {}).get("not_graded"))
            w.writerow([student, _points(results.get("score", 0.0)),
                        *(_points(inv[k]["score"]) if k in inv else "" for k in INVARIANTS),
                        first, spoiled])


def feedback(student: str, results: dict[str, Any]) -> str:
    """One student's feedback: per invariant, the verdict, the first violation and the likely
    causes (most likely first), in the lesson's terms."""
    inv = per_invariant(results)
    lines = [f"# {student}: {results.get('score', 0):.4g} / 100", "",
             str(results.get("output", "")), ""]
    for name in sorted(inv, key=lambda k: (inv[k]["passed"], _order(k))):
        row = inv[name]
        if row["not_graded"] and row["passed"]:
            lines += [f"## {name}: NOT GRADED", "", f"{NOT_GRADED}{row['not_graded']}", ""]
            continue
        verdict = "passed" if row["passed"] else "FAILED"
        lines.append(f"## {name}: {verdict} ({_points(row['score'])} / "
                     f"{_points(row['max_score'])})")
        if not row["passed"]:
            lines += ["", f"First violation: {row['first']}"]
            if row["likely"]:
                lines += ["", "What it most likely means:"]
                lines += [f"{i}. {cause}" for i, cause in enumerate(row["likely"], 1)]
        lines.append("")
    return "\n".join(lines)


def write_summary(out: Path, grades: dict[str, dict[str, Any]]) -> list[Path]:
    """summary.md (and summary.png when matplotlib is there): failures per invariant."""
    counts: Counter[str] = Counter({k: 0 for k in INVARIANTS})
    causes: dict[str, Counter[str]] = {k: Counter() for k in INVARIANTS}
    for results in grades.values():
        for name, row in per_invariant(results).items():
            if not row["passed"]:
                counts[name] += 1
            if row["likely"]:
                causes.setdefault(name, Counter())[row["likely"][0]] += 1
    scores = sorted(r.get("score", 0.0) for r in grades.values())
    spoiled = sorted(name for name, r in grades.items()
                     if any(v["not_graded"] for v in per_invariant(r).values()))
    lines = [f"# Class summary: {len(grades)} students", ""]
    if spoiled:  # first: these grades are incomplete through no fault of the students
        lines += [f"**Not graded completely (the grading machine's fault; regrade on a larger "
                  f"machine): {', '.join(spoiled)}**", ""]
    lines += [f"Median score {statistics.median(scores):.4g}; "
              f"{sum(s >= 100 for s in scores)} at 100." if scores else "No students.", "",
             "| invariant | students failing | most common likely cause |", "|---|---|---|"]
    for name in INVARIANTS:
        top = causes[name].most_common(1)
        cause = top[0][0] if top else ""
        cause = cause if len(cause) <= 160 else cause[:157] + "..."
        lines.append(f"| {name} | {counts[name]} | {cause} |")
    written = [out / "summary.md"]
    try:
        written.append(_plot(out / "summary.png", counts, len(grades)))
        lines += ["", "![students failing each invariant](summary.png)"]
    except ImportError:
        lines += ["", "(no picture: install matplotlib, e.g. the project's [plot] extra)"]
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    return written


def _plot(path: Path, counts: Counter[str], students: int) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    names = list(INVARIANTS)[::-1]
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(names) + 1.2))
    bars = ax.barh(names, [counts[n] for n in names], color="#c0392b")
    ax.bar_label(bars, padding=3)
    ax.set_xlim(0, max(students, 1) * 1.1)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(f"students failing (of {students})")
    ax.set_title("Which invariants the class fails")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path

"""A class's grades from its students' results.json files: grades.csv, one feedback file per
student, and a summary (Markdown and a picture) of how many students fail each invariant."""

from __future__ import annotations

import csv
import itertools
import re
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from tests.harness.observe.boundary import Refused, RunFolder
from tests.harness.report.escape import csv_cell, flat, markdown, markdown_lines, mathtext_safe
from tests.harness.report.grading import (
    EXERCISES,
    INVARIANTS,
    NOT_GRADED,
    WENT_WRONG,
    graded_name,
    per_invariant,
    read_order,
    root_causes,
)
from tests.harness.report.ledger import text, units
from tests.harness.report.pictures import render
from tests.harness.report.policy import DESCRIBE, INVARIANT, POLICIES, apply_policy
from tests.harness.report.roster import Student

# A kept timeline, as the grade file names it (plugin.keep_timelines): a file directly in
# the "timelines" folder beside the grade file, never anywhere else.
TIMELINE_PATH = re.compile(r"timelines/[A-Za-z0-9_.-]+\.json", re.ASCII)
TIMELINE_CAP = 64 * 2**20  # bytes read of one timeline (a 20-step run's is well below 1 MB)


def columns(grades: dict[str, dict[str, Any]]) -> tuple[str, ...]:
    """The invariants, then the lesson's exercises some student was graded on."""
    graded = {name for r in grades.values() for name in per_invariant(r)}
    return INVARIANTS + tuple(e for e in EXERCISES if e in graded)


def _points(x: float) -> str:
    """A figure of a results file as written, every digit of it (the ledger's: the columns
    of a row add up to its score)."""
    return text(units(x))


def policy_of(results: dict[str, Any]) -> str:
    """The grading policy a results.json was scored under (older files: per check, the only
    policy there was)."""
    return str(results.get("extra_data", {}).get("policy", "per_check"))


def rescored(results: dict[str, Any], policy: str | None) -> dict[str, Any]:
    """`results` under `policy` (None: as graded), with the not-checked credit it was graded
    with: an instructor compares policies without grading anything again."""
    if policy is None:
        return results
    credit = float(results.get("extra_data", {}).get("not_checked_credit", 0.0))
    return apply_policy(results, policy, credit)


def lost_line(name: str, row: dict[str, Any], policy: str) -> str:
    """Which checks a failed invariant lost its points through, and what that means under
    the policy it was graded with."""
    lost, checks = row["lost"], row["checks"]
    if len(lost) >= checks:
        return f"Failed checks: {', '.join(lost)} (all {checks})."
    if policy == INVARIANT:
        return (f"{name} lost through {', '.join(lost)} ({len(lost)} of {checks} checks; the "
                f"other {checks - len(lost)} passed, but {DESCRIBE[INVARIANT]}).")
    return (f"{name} failed checks: {', '.join(lost)} ({len(lost)} of {checks}; grading "
            f"policy '{policy}': {DESCRIBE.get(policy, policy)}).")


def write_csv(path: Path, grades: dict[str, dict[str, Any]],
              who: dict[str, tuple[Student, ...]] | None = None) -> None:
    """One row per student: student, score, one column per invariant (points earned), first
    violation, the checks each failed invariant was lost through, not graded, SID, email,
    submission. `who`: each submission's students (a group's members each get the group's
    row); by default the submission is the student."""
    who = who or {}
    cols = columns(grades)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student", "score", *cols, "first_violation", "lost_through",
                    "not_graded", "sid", "email", "submission"])
        rows = [(s, name, results) for name, results in grades.items()
                for s in who.get(name, (Student(name),))]
        for person, name, results in sorted(rows, key=lambda r: (r[0].name, r[1])):
            inv = per_invariant(results)
            failed = [(k, v) for k in sorted(cols, key=read_order)
                      if (v := inv.get(k)) and not v["passed"]]
            first = f"{failed[0][0]}: {failed[0][1]['first']}" if failed else ""
            lost = "; ".join(f"{k}: {', '.join(v['lost'])}" for k, v in failed)
            spoiled = " ".join(k for k in cols if inv.get(k, {}).get("not_graded"))
            # every text cell may hold a run's words or a student's: one line, no formula
            w.writerow([csv_cell(person.name), _points(results.get("score", 0.0)),
                        *(_points(inv[k]["score"]) if k in inv else "" for k in cols),
                        *map(csv_cell, (first, lost, spoiled, person.sid, person.email,
                                        name))])


def feedback(student: str, results: dict[str, Any], pictures: dict[str, str] | None = None,
             timelines: dict[str, list[str]] | None = None,
             undrawn: tuple[str, ...] = ()) -> str:
    """One student's feedback: per invariant, the verdict, the first violation and the likely
    causes (most likely first), in the lesson's terms; for a failed invariant its picture (or,
    `undrawn`, that it could not be drawn) and the timelines of its runs (paths relative to
    the feedback file). Every text a run or a student chose is escaped (escape.markdown):
    it reads as written and never renders as a link, an image, HTML or a new block."""
    inv = per_invariant(results)
    pictures, timelines = pictures or {}, timelines or {}
    output = str(results.get("output", ""))
    if WENT_WRONG in output:  # the Gradescope text's own list: told once, below, on the page
        head, _, rest = output.partition(WENT_WRONG)
        output = head + rest.partition("\n\n")[2]
    lines = [f"# {markdown(student)}: {_points(results.get('score', 0))} / 100", "",
             markdown_lines(output), ""]
    causes = root_causes(results)
    if causes:  # the cause first, once: students fix the first thing they read
        lines += ["## What went wrong", ""]
        lines += [f"{i}. {markdown(cause)}" for i, cause in enumerate(causes, 1)]
        lines.append("")
    for name in sorted(inv, key=lambda k: (inv[k]["passed"], inv[k]["consequence"],
                                           read_order(k))):
        row = inv[name]
        if row["not_graded"] and row["passed"]:
            lines += [f"## {name}: NOT GRADED", "",
                      f"{NOT_GRADED}{markdown(row['not_graded'])}", ""]
            continue
        verdict = "passed" if row["passed"] else "FAILED"
        lines.append(f"## {name}: {verdict} ({_points(row['score'])} / "
                     f"{_points(row['max_score'])})")
        if not row["passed"] and row["consequence"]:  # one line: its cause is told above
            lines += ["", markdown(row["first"].split(": ", 1)[-1]), ""]
            continue
        if not row["passed"]:
            lines += ["", lost_line(name, row, policy_of(results)), "",
                      f"First violation: {markdown(row['first'])}"]
            if row["likely"]:
                lines += ["", "What it most likely means:"]
                lines += [f"{i}. {markdown(cause)}" for i, cause in enumerate(row["likely"], 1)]
            if name in pictures:
                lines += ["", f"![{name}: what the runs did]({pictures[name]})"]
            elif name in undrawn:
                lines += ["", "(The picture of what the runs did could not be drawn; the "
                          "violation above says what they did.)"]
            if timelines.get(name):
                lines += ["", "Every rank's timeline (open it in https://ui.perfetto.dev or "
                          "chrome://tracing): " + ", ".join(f"[{Path(t).name}]({t})"
                                                            for t in timelines[name])]
        lines.append("")
    return "\n".join(lines)


def failed_pictures(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """invariant -> the facts of its first failed test's picture (from the grade file)."""
    specs = results.get("extra_data", {}).get("pictures", {})
    out: dict[str, dict[str, Any]] = {}
    for t in results.get("tests", []):
        name = graded_name(t["name"])
        if name and name not in out and t.get("status") == "failed" and t["name"] in specs:
            out[name] = specs[t["name"]]
    return out


def failed_timelines(results: dict[str, Any]) -> dict[str, list[str]]:
    """invariant -> the timelines its failed tests read, from the grade file's own field
    (`extra_data.timelines`, relative to the grade file), each of the one shape
    TIMELINE_PATH allows. A test's output is never read for them: a run writes into it (a
    forged "timeline of the base run: /root/..." line would name any file)."""
    named = results.get("extra_data", {}).get("timelines", {})
    out: dict[str, list[str]] = {}
    if not isinstance(named, dict):
        return out
    for t in results.get("tests", []):
        name = graded_name(str(t.get("name", "")))
        paths = named.get(t.get("name"))
        if not name or t.get("status") != "failed" or not isinstance(paths, list):
            continue
        for rel in paths:
            if isinstance(rel, str) and TIMELINE_PATH.fullmatch(rel) \
                    and rel not in out.setdefault(name, []):
                out[name].append(rel)
    return out


def read_timeline(graded: Path, rel: str) -> bytes | None:
    """A kept timeline's bytes: `rel` of TIMELINE_PATH's shape, a regular file beneath
    `graded` reached with no link (the boundary: tests/harness/observe/boundary.py), at most
    TIMELINE_CAP bytes; else None."""
    if not TIMELINE_PATH.fullmatch(rel):
        return None
    try:
        return RunFolder(graded).read(rel, TIMELINE_CAP)
    except Refused:
        return None  # a cut trace opens nowhere: none at all


def write_feedback(out: Path, student: str, results: dict[str, Any], graded: Path) -> Path:
    """grades/feedback/STUDENT.md, with a picture per failed invariant and the timelines of
    its runs in grades/feedback/STUDENT/ (`graded`: the student's grade-file folder). A
    picture that cannot be drawn is said so on the page, and the class goes on."""
    import shutil

    folder = out / "feedback" / student
    shutil.rmtree(folder, ignore_errors=True)
    shown: dict[str, str] = {}
    undrawn: list[str] = []
    for name, spec in failed_pictures(results).items():
        png = folder / f"{name}.png"
        try:
            render(spec, png, f"{student}: {name}")  # render draws it as typed
        except ImportError:  # no matplotlib: the text facts are in the grade file
            break
        except Exception as e:  # the suite's or the facts': one picture, never the class
            png.unlink(missing_ok=True)
            undrawn.append(name)
            print(f"grade_class: {flat(student)}: the picture of {name} could not be "
                  f"drawn: {flat(repr(e), 300)}", file=sys.stderr)  # no terminal escapes
            continue
        shown[name] = f"{student}/{name}.png"
    kept: dict[str, list[str]] = {}
    for name, paths in failed_timelines(results).items():
        for rel in paths:
            data = read_timeline(graded, rel)
            if data is not None:
                folder.mkdir(parents=True, exist_ok=True)
                (folder / Path(rel).name).write_bytes(data)
                kept.setdefault(name, []).append(f"{student}/{Path(rel).name}")
    path = out / "feedback" / f"{student}.md"
    path.parent.mkdir(parents=True, exist_ok=True)  # a page without pictures made no folder
    path.write_text(feedback(student, results, shown, kept, tuple(undrawn)))
    return path


SCORE_BINS = (0, 20, 40, 60, 80, 90, 100)  # the last bin is exactly 100


def score_bins(scores: list[float]) -> list[tuple[str, int]]:
    """How many students fall in each score range ("100" on its own)."""
    out = []
    for lo, hi in itertools.pairwise(SCORE_BINS):
        out.append((f"{lo}-{hi}", sum(lo <= x < hi for x in scores)))
    out.append(("100", sum(x >= 100 for x in scores)))
    return out


def write_summary(out: Path, grades: dict[str, dict[str, Any]]) -> list[Path]:
    """summary.md (and summary.png when matplotlib is there): the distribution of scores,
    and per invariant the students failing it with their most likely cause."""
    cols = columns(grades)
    counts: Counter[str] = Counter({k: 0 for k in cols})
    causes: dict[str, Counter[str]] = {k: Counter() for k in cols}
    who: dict[str, list[str]] = {k: [] for k in cols}
    for student, results in sorted(grades.items()):
        for name, row in per_invariant(results).items():
            if not row["passed"] and not row["consequence"]:
                counts[name] += 1
                cause = row["likely"][0] if row["likely"] else row["first"]
                who.setdefault(name, []).append(
                    f"{markdown(student)} ({markdown(cause, 90)})")
            if row["likely"]:
                causes.setdefault(name, Counter())[row["likely"][0]] += 1
    by_cause: dict[str, list[str]] = {}
    for student, results in sorted(grades.items()):
        first = root_causes(results)[:1]
        if first:
            by_cause.setdefault(flat(first[0], 160), []).append(student)
    scores = sorted(r.get("score", 0.0) for r in grades.values())
    spoiled = sorted(name for name, r in grades.items()
                     if any(v["not_graded"] for v in per_invariant(r).values()))
    lines = [f"# Class summary: {len(grades)} students", "", policy_line(grades), ""]
    if spoiled:  # first: these grades are incomplete; a person must look
        lines += [f"**Not graded completely (no verdict: the grader's machine or set-up, or "
                  f"ranks the suite could not see; each feedback says what to do, then "
                  f"regrade): "
                  f"{', '.join(map(markdown, spoiled))}**", ""]
    bins = score_bins(scores)
    lines += [f"Median score {statistics.median(scores):.4g}; "
              f"{sum(s >= 100 for s in scores)} at 100." if scores else "No students.", "",
              "| score | " + " | ".join(b for b, _ in bins) + " |",
              "|---" * (len(bins) + 1) + "|",
              "| students | " + " | ".join(str(n) for _, n in bins) + " |", "",
              "| what went wrong first | students | who |", "|---|---|---|",
              *(f"| {markdown(cause)} | {len(who_)} | {', '.join(map(markdown, who_))} |"
                for cause, who_ in sorted(by_cause.items(), key=lambda kv: -len(kv[1]))), "",
              "Per invariant, what was checked (a student whose run did not get there is "
              "counted under its cause above, not here):", "",
              "| invariant | students failing | most common likely cause | who (their most "
              "likely cause) |", "|---|---|---|---|"]
    for name in cols:
        top = causes[name].most_common(1)
        cause = markdown(top[0][0], 160) if top else ""
        lines.append(f"| {name} | {counts[name]} | {cause} | {'; '.join(who[name])} |")
    written = [out / "summary.md"]
    try:
        written.append(_plot(out / "summary.png", counts, scores,
                             {c: len(w) for c, w in by_cause.items()}))
        lines += ["", "![scores and the invariants the class fails](summary.png)"]
    except ImportError:
        lines += ["", "(no picture: install matplotlib, e.g. the project's [plot] extra)"]
    except Exception as e:  # the picture's failure is the picture's: the tables stand
        (out / "summary.png").unlink(missing_ok=True)
        print(f"grade_class: the class's picture could not be drawn: {flat(repr(e), 300)}",
              file=sys.stderr)
        lines += ["", "(the class's picture could not be drawn; the tables above say the "
                  "same)"]
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    return written


def policy_line(grades: dict[str, dict[str, Any]]) -> str:
    """Which grading policy the class's scores follow, and the class under the other one."""
    used = sorted({policy_of(r) for r in grades.values()})
    if len(used) != 1:
        return (f"**Scores follow different grading policies ({', '.join(used)}): regrade, or "
                "report the class under one (`grade_class --policy`).**")
    policy = used[0]
    lines = f"Grading policy '{policy}': {DESCRIBE.get(policy, policy)}."
    for other in POLICIES:
        if other != policy and grades:
            scores = [rescored(r, other).get("score", 0.0) for r in grades.values()]
            lines += (f" Under '{other}' the class would have median "
                      f"{statistics.median(scores):.4g}, {sum(x >= 100 for x in scores)} "
                      "at 100.")
    return lines


def _plot(path: Path, counts: Counter[str], scores: list[float],
          by_cause: dict[str, int] | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(counts)[::-1]
    causes = sorted((by_cause or {}).items(), key=lambda kv: kv[1])[-8:]
    fig, (hist, ax, why) = plt.subplots(1, 3, figsize=(18, 0.45 * len(names) + 1.4))
    try:
        _draw_class(fig, (hist, ax, why), names, counts, scores, causes)
        fig.savefig(path, dpi=120)
    finally:  # a figure that failed is closed too: pyplot keeps every open one
        plt.close(fig)
    return path


def _draw_class(fig: Any, axes: tuple[Any, Any, Any], names: list[str],
                counts: Counter[str], scores: list[float], causes: list[tuple[str, int]]
                ) -> None:
    """The class's three panels: scores, the invariants failed, what went wrong first."""
    from matplotlib.ticker import MaxNLocator

    hist, ax, why = axes
    students = len(scores)
    if causes:  # a run's words: drawn as typed, never as mathtext
        cbars = why.barh([mathtext_safe(c, 45) for c, _ in causes], [n for _, n in causes],
                         color="#8e44ad")
        why.bar_label(cbars, padding=3)
        why.tick_params(axis="y", labelsize=6)
    why.xaxis.set_major_locator(MaxNLocator(integer=True))
    why.set_xlabel("students")
    why.set_title("What went wrong first")
    bins = score_bins(scores)
    hist.bar([b for b, _ in bins], [n for _, n in bins], color="#2980b9")
    hist.yaxis.set_major_locator(MaxNLocator(integer=True))
    hist.set_xlabel("score")
    hist.set_ylabel("students")
    hist.set_title(f"Scores (median {statistics.median(scores) if scores else 0:.4g})")
    bars = ax.barh(names, [counts[n] for n in names], color="#c0392b")
    ax.bar_label(bars, padding=3)
    ax.set_xlim(0, max(students, 1) * 1.1)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(f"students failing (of {students})")
    ax.set_title("Which invariants the class fails")
    fig.tight_layout()

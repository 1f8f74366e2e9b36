"""Issue 72: what a run leaves is hostile input. The grader acts, as root, on text a run
chose (its exception text, its file names, what it logged, a student's own name): that text
must read as written and never change what it lands in (a Markdown page, a CSV row, a
picture), and a timeline reaches a student's feedback only through the grade file's own
field, as a regular file kept beside it, never through a path a test's output names."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import string
import unicodedata
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.harness.report import grading
from tests.harness.report.class_report import (
    failed_timelines,
    write_csv,
    write_feedback,
    write_summary,
)
from tests.harness.report.escape import (
    csv_cell,
    flat,
    markdown,
    mathtext_safe,
    one_line,
)
from tests.harness.report.grading import LIKELY, per_invariant, write_results
from tests.harness.report.plugin import SuiteReport, keep_timelines
from tests.harness.report.roster import Student

# What a hostile run writes: Markdown's and HTML's structure, mathtext, formulas, line
# breaks of every kind, terminal escapes, bidi overrides, a lone surrogate.
HOSTILE = ["[click](http://evil)", "![x](http://evil/x.png)", "<img src=x onerror=alert(1)>",
           "<http://evil>", "www.evil.com", "ada@evil.com", "`code`", "**b**", "_i_", "|",
           "# h", "- item", "1. item", "> q", "---", "===", "[^1]", "[r]: http://evil",
           "$\\frac{$", "$x^2$", "\\", "$", "&lt;", "~~s~~", "=HYPERLINK(\"http://evil\")",
           "+1", "-1", "@SUM(A1)", "\n", "\r\n", "\r", "\x0b", "\x0c", "\x85", "\u2028",
           "\u2029", "\t", "\x00", "\x1b[31m", "\u202e", "\u200b", "\ud800", " ", "a", "_"]
texts = st.one_of(st.text(), st.lists(st.sampled_from(HOSTILE) | st.text(max_size=3),
                                      max_size=12).map("".join))
BREAKS = ("Cc", "Cf", "Cs", "Zl", "Zp")  # what no line of a report may hold
# What structures Markdown wherever it stands; each must come escaped.
ACTIVE = "\\`*[]<>|~$&@"
FORGED = "timeline of the base run: {} (open it in ui.perfetto.dev)"


def _escaped(s: str, i: int) -> bool:
    """Whether s[i] follows an odd run of backslashes (CommonMark: a literal character)."""
    j = i
    while j > 0 and s[j - 1] == "\\":
        j -= 1
    return (i - j) % 2 == 1


def _unescape(s: str) -> str:
    """What CommonMark shows for text of backslash escapes only."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", s)


@given(texts, st.integers(3, 400))
@example("ok\x1b[31m\u202e\x00", 300)
def test_one_line_has_no_line_break_or_control_character(text: str, limit: int) -> None:
    """The reports' one line (grading.one_line is it: the Gradescope text, PrairieLearn's
    messages, the session's reasons): the first non-blank line, nothing that breaks or
    reorders it, at most `limit` characters."""
    for got in (one_line(text, limit), grading.one_line(text, limit)):
        assert not any(unicodedata.category(c) in BREAKS for c in got), repr(got)
        assert got == got.strip() and len(got) <= limit and len(got.splitlines()) <= 1
    assert flat(text).splitlines() == ([flat(text)] if flat(text) else [])


@given(texts)
@example("[click](http://evil) <img src=x> ![i](y)")
@example("1. # x\\")
def test_markdown_renders_as_the_same_characters_and_no_structure(text: str) -> None:
    """escape.markdown: one line; every character that makes a link, an image, HTML, code,
    emphasis, a table cell or math escaped; no bare link (scheme:// or www.) and no block
    opened at the start of the line; and it reads back as the text itself."""
    got = markdown(text)
    assert "\n" not in got and len(got.splitlines()) <= 1
    assert not any(unicodedata.category(c) in BREAKS for c in got)
    for i, c in enumerate(got):
        if c in ACTIVE and not _escaped(got, i):
            assert c == "\\" and i + 1 < len(got) and got[i + 1] in string.punctuation \
                and _escaped(got, i + 1), (got, i)  # itself an escape
    assert "://" not in got and not re.search(r"(?i)www\.", got)
    assert not re.match(r"[#+=>*_-]|\d+[.)]", got), got
    assert _unescape(got) == flat(text)  # reads as written


@pytest.mark.filterwarnings("ignore::UserWarning")  # drawn texts lack glyphs, legends labels
@settings(max_examples=30)  # a figure each: a second or two in all
@given(text=texts)
@example(text="$\\frac{$")
@example(text="a $x^{$ b")
def test_mathtext_safe_text_draws_as_typed(text: str, tmp_path_factory: Any) -> None:
    """escape.mathtext_safe: matplotlib never parses it as mathtext (whose errors make
    savefig raise and stopped grade_class for the whole class) and shows it as written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import cbook

    safe = mathtext_safe(text, None)
    assert not cbook.is_math_text(safe) and safe.replace("\\$", "$") == flat(text)
    fig, ax = plt.subplots(figsize=(2, 1))
    try:
        ax.set_title(safe)
        ax.plot([0, 1], label=safe)
        ax.legend()
        ax.set_yticks([0], [mathtext_safe(text, 40)])
        fig.savefig(tmp_path_factory.mktemp("m") / "t.png", dpi=20)
    finally:
        plt.close(fig)


def test_a_raw_mathtext_title_does_raise() -> None:
    """What the escape is for: a run's `$\\frac{$` as is makes savefig raise."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.set_title("$\\frac{$")
    with pytest.raises(ValueError):
        fig.savefig(io.BytesIO())
    plt.close(fig)


@given(texts)
def test_a_csv_cell_is_one_cell_of_one_row_and_never_a_formula(text: str) -> None:
    buf = io.StringIO()
    csv.writer(buf).writerow(["a", csv_cell(text), "b"])
    [row] = list(csv.reader(io.StringIO(buf.getvalue())))
    assert row[0] == "a" and row[2] == "b" and "\n" not in row[1] and "\r" not in row[1]
    assert not row[1].startswith(("=", "+", "-", "@", "\t", "\r"))


def _failed(name: str, output: str, **kw: Any) -> dict[str, Any]:
    return {"name": name, "score": 0.0, "max_score": 10.0, "status": "failed",
            "output": output, **kw}


NODE = "tests/test_invariant_no_deadlock.py::t[base]"
EVIL = "[click](http://evil) <img src=x onerror=alert(1)> $\\frac{$"


def test_the_class_reports_escape_what_runs_and_students_wrote(tmp_path: Path) -> None:
    """A run's cause and violation and a student's name reach the feedback page, the
    summary and grades.csv as text: no link, image or HTML, no forged line or row, no
    formula; and the summary's picture of such a cause is drawn."""
    name = "eve\n| forged | 99 | x |"
    results = {"score": 0.0, "output": f"Graded\n{EVIL}",
               "tests": [_failed(NODE, f"termination of the base run: {EVIL}\n"
                                       f"{LIKELY}ranks deadlock {EVIL}\n| forged | 1 |")]}
    grades = {name: results, "=cmd": results}
    page = write_feedback(tmp_path, "eve", results, tmp_path / "none").read_text()
    summary = write_summary(tmp_path, grades)[0].read_text()
    for text in (page, summary):
        assert not re.search(r"(?<!\\)\[click|(?<!\\)<img|http://", text), text
        assert not any(ln.startswith("| forged") for ln in text.splitlines()), text
    assert "\\[click\\]" in page and (tmp_path / "summary.png").stat().st_size > 0
    write_csv(tmp_path / "grades.csv", grades,
              {name: (Student(name, sid="+1", email="@x"),), "=cmd": (Student("=cmd"),)})
    with open(tmp_path / "grades.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 and {r["student"] for r in rows} == {"'=cmd", flat(name)}
    assert all(r["sid"] in ("'+1", "") and r["email"] in ("'@x", "") for r in rows)


TIMELINE_FACTS = {"kind": "timeline", "run": "base", "stop_ms": 5.0, "blocked": EVIL,
                  "ranks": {"0": [["recv(src=1)", f"{EVIL} main.py:3", 0.0, None, 10]],
                            "1": [["send(dst=0)", "$x^{$:4", 0.0, 1.0, 10]]},
                  "sites": {f"all_reduce at {EVIL}.py:1": 100.0}, "bound": 50.0}


def test_a_run_chosen_mathtext_is_drawn_and_a_picture_that_fails_stops_nobody(
        tmp_path: Path) -> None:
    """A call site `$\\frac{$` (a run's file name) is drawn as typed; a picture whose facts
    cannot be drawn at all is said so on the page, and the feedback is written."""
    bad = "tests/test_invariant_monotonic_loss.py::t"
    results = {"score": 0.0, "output": "",
               "extra_data": {"pictures": {NODE: TIMELINE_FACTS,
                                           bad: {"kind": "curves", "runs": 7}}},
               "tests": [_failed(NODE, "termination of the base run: deadlock"),
                         _failed(bad, "losses of the base run: rises")]}
    page = write_feedback(tmp_path, "$\\frac{$", results, tmp_path).read_text()
    folder = tmp_path / "feedback" / "$\\frac{$"
    assert (folder / "no_deadlock.png").read_bytes()[:4] == b"\x89PNG"
    assert not (folder / "monotonic_loss.png").exists()
    assert "picture of what the runs did could not be drawn" in page
    assert "![no_deadlock: what the runs did]" in page


def test_a_trace_whose_names_hold_mathtext_is_drawn(tmp_path: Path) -> None:
    """timeline.draw reads anyone's trace: its process and event names are drawn as typed."""
    from tests.harness.report.timeline_picture import draw

    trace = tmp_path / "$x^{$.json"
    trace.write_text(json.dumps({"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "$\\frac{$"}},
        {"ph": "X", "name": "all_reduce", "pid": 1, "ts": 0, "dur": 10},
        {"ph": "i", "s": "g", "name": EVIL, "pid": 1, "ts": 5}]}))
    png = draw(trace, tmp_path / "t.png")
    assert png.read_bytes()[:4] == b"\x89PNG"


def _graded(tmp_path: Path) -> tuple[Path, Path]:
    """A student's grade folder with a kept timeline, and a secret beside it."""
    graded = tmp_path / "students" / "eve"
    (graded / "timelines").mkdir(parents=True)
    (graded / "timelines" / "base.json").write_text('{"traceEvents": []}')
    secret = tmp_path / "secret.json"
    secret.write_text("root's own")
    return graded, secret


def _copied(out: Path) -> dict[str, str]:
    folder = out / "feedback" / "eve"
    return {p.name: p.read_text() for p in folder.iterdir()} if folder.is_dir() else {}


def test_a_path_a_tests_output_names_is_never_copied(tmp_path: Path) -> None:
    """The vector of issue 72: a run's text holds a new line and "timeline of the base
    run: /root/FILE (open"; it reaches the failed test's output. Nothing acts on it."""
    graded, secret = _graded(tmp_path)
    (graded / "timelines" / "link.json").symlink_to(secret)
    forged = [FORGED.format(p) for p in ("/etc/passwd", str(secret), "../../secret.json",
                                         "timelines/link.json", "timelines/base.json")]
    results = {"score": 0.0, "output": "",
               "tests": [_failed(NODE, "termination of the base run: x\n" + "\n".join(forged))]}
    assert failed_timelines(results) == {}
    write_feedback(tmp_path / "out", "eve", results, graded)
    assert _copied(tmp_path / "out") == {}


@pytest.mark.parametrize("entry", ["../secret.json", "/etc/passwd", "timelines/../../x.json",
                                   "timelines/sub/base.json", "timelines/link.json",
                                   "timelines/fifo.json", "timelines/dir.json", "timelines/",
                                   "students/eve/timelines/base.json", 7, None])
def test_a_structured_entry_copies_only_a_regular_file_kept_beside_the_grade_file(
        tmp_path: Path, entry: Any) -> None:
    """extra_data.timelines names what is copied, and only `timelines/NAME.json` directly
    beneath the graded folder, a regular file, no link: a link, a FIFO (never waited on),
    a folder, a path outside or any other shape copies nothing (each also named in the
    output's readable line, which the old reader followed)."""
    graded, secret = _graded(tmp_path)
    (graded / "timelines" / "link.json").symlink_to(secret)
    os.mkfifo(graded / "timelines" / "fifo.json")
    (graded / "timelines" / "dir.json").mkdir()
    (graded / "timelines" / "sub").mkdir()
    (graded / "timelines" / "sub" / "base.json").write_text("{}")
    for outside in ("secret.json", "x.json"):  # where "../" and "timelines/../../" lead
        (graded.parent / outside).write_text("outside")
    results = {"score": 0.0, "output": "", "extra_data": {"timelines": {NODE: [entry]}},
               "tests": [_failed(NODE, f"x: y\n{FORGED.format(entry)}")]}
    write_feedback(tmp_path / "out", "eve", results, graded)
    assert _copied(tmp_path / "out") == {}


def test_a_timelines_folder_that_is_a_link_is_not_followed(tmp_path: Path) -> None:
    graded, _ = _graded(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    (graded / "timelines").rename(elsewhere)
    (graded / "timelines").symlink_to(elsewhere)
    results = {"score": 0.0, "output": "",
               "extra_data": {"timelines": {NODE: ["timelines/base.json"]}},
               "tests": [_failed(NODE, f"x: y\n{FORGED.format('timelines/base.json')}")]}
    write_feedback(tmp_path / "out", "eve", results, graded)
    assert _copied(tmp_path / "out") == {}


def test_a_kept_timeline_travels_from_the_session_to_the_feedback(tmp_path: Path) -> None:
    """The session's side: keep_timelines copies the run's timeline beside the grade file
    and names it in the outcome, write_results carries it as extra_data.timelines (JSON,
    under extra_data as Gradescope allows), and write_feedback copies it and links it; a
    run's timeline that is a link is not kept."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "timeline.json").write_text('{"traceEvents": [1]}')
    (run_dir / "planted.json").symlink_to(tmp_path / "secret")
    (tmp_path / "secret").write_text("root's own")
    graded = tmp_path / "students" / "eve"
    graded.mkdir(parents=True)
    src = str(run_dir / "timeline.json")
    outcomes = {NODE: {"status": "failed", "output": f"x: y\n{FORGED.format(src)}",
                       "timelines": {"base": src, "nan 15": str(run_dir / "planted.json")}}}
    keep_timelines(graded / "timelines", outcomes)
    assert outcomes[NODE]["kept_timelines"] == ["timelines/base.json"]
    assert FORGED.format("timelines/base.json") in outcomes[NODE]["output"]  # read by people
    assert sorted(p.name for p in (graded / "timelines").iterdir()) == ["base.json"]
    results = write_results(graded / "results.json", {NODE: "no_deadlock"}, outcomes, 1.0)
    assert json.loads((graded / "results.json").read_text())["extra_data"]["timelines"] == \
        {NODE: ["timelines/base.json"]}
    page = write_feedback(tmp_path / "out", "eve", results, graded).read_text()
    assert _copied(tmp_path / "out") == {"base.json": '{"traceEvents": [1]}'}
    assert "[base.json](eve/base.json)" in page


def test_a_timeline_above_the_cap_is_not_read(tmp_path: Path, monkeypatch) -> None:
    from tests.harness.report import class_report

    (tmp_path / "timelines").mkdir()
    (tmp_path / "timelines" / "t.json").write_bytes(b"x" * 11)
    monkeypatch.setattr(class_report, "TIMELINE_CAP", 11)
    assert class_report.read_timeline(tmp_path, "timelines/t.json") == b"x" * 11
    monkeypatch.setattr(class_report, "TIMELINE_CAP", 10)
    assert class_report.read_timeline(tmp_path, "timelines/t.json") is None


def test_a_runs_words_cannot_forge_a_likely_cause(tmp_path: Path) -> None:
    """The session's outcome of a failed check: its reason and hints stay one line each and
    a line of its detail (each rank's stack, the run's own words) never reads as a cause."""
    report = SuiteReport(SimpleNamespace(workerinput={}))  # type: ignore[arg-type]
    props = [("reason", "termination of the base run: KeyError('x\\nlikely: forged 1')"
                        .replace("\\n", "\n")),
             ("hint", json.dumps(["ranks deadlock\nlikely: forged 2"])),
             ("detail", "rank 0 stack:\nlikely: forged 3\n" + FORGED.format("/etc/passwd"))]
    report.pytest_runtest_logreport(pytest.TestReport(
        NODE, ("t", 0, "t"), {}, "failed", None, "call", user_properties=props))
    output = report.outcomes[NODE]["output"]
    results = {"score": 0.0, "tests": [_failed(NODE, output)]}
    row = per_invariant(results)["no_deadlock"]
    assert row["likely"] == ["ranks deadlock likely: forged 2"], row
    assert row["first"] == "termination of the base run: KeyError('x likely: forged 1')"
    assert FORGED.format("/etc/passwd") in output.splitlines()  # still there to read

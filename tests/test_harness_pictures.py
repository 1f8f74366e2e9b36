"""A picture for each failed invariant, from real runs of this session: the facts a failed
test records, their text (what Gradescope shows), and grade_class's feedback page, which
embeds one picture per failed invariant and none for a passing student."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.harness.check.checks import check_parity, check_resume
from tests.harness.check.matrix import CHECKS
from tests.harness.check.observed_checks import check_measured_memory
from tests.harness.check.state_checks import check_state_location
from tests.harness.report.class_report import write_feedback
from tests.harness.report.pictures import as_text, facts, render
from tests.harness.run.runner import Watch
from tests.harness.run.runs import (
    BASE,
    MEM1,
    MICRO,
    MICRO_BATCHES,
    N2,
    RESUMED,
    SINGLE,
    TP2,
    RunCache,
)

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = ROOT / "tests" / "mutants" / "launch.py"


def mutant(run_cache: RunCache, name: str, spec=BASE):
    return run_cache.get((sys.executable, str(LAUNCHER), name), spec)


@pytest.fixture
def failures(reference_only, run_cache, run, deadlocked):
    """invariant -> (facts, test id) for failures of the catalogue's mutants."""
    nb, single = mutant(run_cache, "no_broadcast"), run(SINGLE)
    moments = [mutant(run_cache, "checkpoint_without_moments", s) for s in (BASE, RESUMED)]
    mem = {s.world_size: mutant(run_cache, "whole_moments", s) for s in (MEM1, N2, BASE)}
    return {
        "no_deadlock": facts("no_deadlock", [deadlocked], []),
        "single_process_parity": facts("single_process_parity", [nb, single],
                                       check_parity(nb, single)),
        "byte_exact_resume": facts("byte_exact_resume", moments,
                                   check_resume(moments[0], moments[1], 10)),
        "zero1_memory": facts("zero1_memory", list(mem.values()),
                              check_state_location(mem) + check_measured_memory(mem)),
    }


def test_each_failure_has_facts_that_read_as_text_and_draw(failures, tmp_path):
    keep = ROOT / "docs" / "img" if "CAPSTONE_KEEP_PICTURES" in __import__("os").environ \
        else tmp_path  # README's pictures are drawn by this test
    for name, f in failures.items():
        assert f is not None, name
        text = as_text(f)
        assert text and max(len(ln) for ln in text.splitlines()) <= 100, name
        png = render(f, keep / f"feedback-{name}.png", f"a failing submission: {name}")
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    dl = as_text(failures["no_deadlock"])
    assert "recv(src=1)" in dl and "..." in dl  # the blocked call, still inside it
    assert "<- parts" in as_text(failures["byte_exact_resume"])
    memory = as_text(failures["zero1_memory"])
    assert "12P/N" in memory and "30,080" in memory
    held = {ln.split()[0]: ln.split()[1:3] for ln in memory.splitlines()
            if ln[:1].isdigit() and len(ln.split()) == 4}  # the located moments, per N
    assert held["4"] == ["30,080", "30,080"] and held["1"] == ["30,080", "30,080"]


def test_feedback_embeds_a_picture_per_failed_check_and_none_when_passing(failures,
                                                                             tmp_path):
    tests, pictures = [], {}
    for name, f in failures.items():
        nodeid = f"tests/test_invariant_{name}.py::t"
        tests.append({"name": nodeid, "score": 0.0, "max_score": 10.0, "status": "failed",
                      "output": f"{name}: first violation"})
        pictures[nodeid] = f
    failing = {"score": 60.0, "tests": tests, "extra_data": {"pictures": pictures}}
    passing = {"score": 100.0, "extra_data": {"pictures": {}},
               "tests": [{**t, "score": 10.0, "status": "passed"} for t in tests]}
    out = tmp_path / "grades"
    page = write_feedback(out, "ada", failing, tmp_path).read_text()
    for name in failures:
        assert f"![{name}: what the runs did](ada/{name}.png)" in page
        assert (out / "feedback" / "ada" / f"{name}.png").is_file()
    clean = write_feedback(out, "bob", passing, tmp_path).read_text()
    assert "![" not in clean and not (out / "feedback" / "bob").exists()


def test_only_the_checks_with_a_picture_kind_get_one():
    # equal_rank_norms's words are enough
    pictured = set(CHECKS) - {"equal_rank_norms"}
    assert pictured <= {"no_deadlock", "communication", "monotonic_loss",
                        "single_process_parity", "zero1_memory", "byte_exact_resume",
                        "rollback", "rank_killed", "accumulation", "tensor_parallel"}
    assert facts("equal_rank_norms", [], []) is None
    assert facts("accumulation", [], []) is None
    assert facts("tensor_parallel", [], []) is None


def _spans(line: str) -> str:
    return line.split(": ", 1)[1]


def test_the_exercises_pictures_show_the_heads_and_the_reductions(reference_only, run_cache,
                                                                   run, tmp_path):
    """Exercise 1: each rank's share of the attention's rows, from the one-rank run's weights
    (the reference's two ranks disjoint halves; tp_same_heads's rank 1 the same rows as rank
    0). Exercise 2: the elements reduced per step and step 1's gradient norm, the
    micro-batched run against the one-batch run (accum_summed's norm M times the other's)."""
    single = run(SINGLE)
    heads = {name: facts("tensor_parallel", [mutant(run_cache, name, TP2) if name else
                                             run(TP2), single], [])
             for name in ("", "tp_same_heads")}
    for name, f in heads.items():
        assert f is not None and f["kind"] == "heads", name
        render(f, tmp_path / f"heads{name}.png", name or "reference")
    shown = {name: as_text(f) for name, f in heads.items() if f is not None}
    ranks = [ln for ln in shown[""].splitlines() if ln.startswith("  rank ")]
    halves = {ln.split()[1]: _spans(ln) for ln in ranks if "weight" in ln}
    assert len(ranks) >= 2 and halves["0"] != halves["1"] and "of" in halves["0"], ranks
    same = [_spans(ln) for ln in shown["tp_same_heads"].splitlines()
            if ln.startswith("  rank ")]
    assert same[: len(same) // 2] == same[len(same) // 2:], same  # rank 1 holds rank 0's
    one = run(N2)
    for name in ("", "accum_summed"):
        micro = mutant(run_cache, name, MICRO) if name else run(MICRO)
        f = facts("accumulation", [micro, one], [])
        assert f is not None and f["kind"] == "reductions", name
        render(f, tmp_path / f"reductions{name}.png", name or "reference")
        norms = [v["norms"] for v in f["runs"].values()]
        reduced = [v["reduced"] for v in f["runs"].values()]
        assert norms[0] and len(norms[0]) == len(norms[1]) and reduced[0] == reduced[1], f
        ratio = norms[1][0] / norms[0][0]
        assert abs(ratio - (MICRO_BATCHES if name else 1)) < 1e-3, (name, ratio)
        assert "step 1's gradient norm" in as_text(f)


def test_a_run_that_did_nothing_gets_words_and_no_empty_picture(shared_tmp, tmp_path):
    """A program that exits at once (a crash on import is the same) made no call and logged
    no step: every picture of it would be empty axes, so there is none, and the feedback
    page is the failures' words alone."""
    cache = RunCache(shared_tmp / "pictures-nothing", 10, ROOT, None, None,
                     Watch(observe=True, contain=True))
    nothing = cache.get((sys.executable, str(ROOT / "tests" / "hostile" / "nothing.py")), BASE)
    assert nothing.observed is not None  # the observer saw the process: it made no call
    found = {name: facts(name, [nothing, nothing], CHECKS[name](lambda _: nothing, 0))
             for name in CHECKS}
    assert found and all(f is None for f in found.values()), found
    results = {"score": 0.0, "extra_data": {"pictures": {}},
               "tests": [{"name": f"tests/test_invariant_{n}.py::t", "score": 0.0,
                          "max_score": 10.0, "status": "failed", "output": f"{n}: no records"}
                         for n in found]}
    page = write_feedback(tmp_path / "grades", "eve", results, tmp_path).read_text()
    assert "no records" in page and "![" not in page


def test_a_late_guard_is_marked_where_it_kept_the_bad_update(reference_only, run_cache):
    """The runs of a guard that fired a step late do not part (the bad step is replayed):
    the picture marks where the bad update was kept, not a parting."""
    from tests.harness.check.checks import check_rollback
    from tests.harness.check.matrix import ROLLBACK_PROBE
    from tests.harness.run.runs import faulted

    base, late = (mutant(run_cache, "loss_only_guard", s) for s in (BASE, faulted(*ROLLBACK_PROBE)))
    f = facts("rollback", [base, late], check_rollback(base, late, *ROLLBACK_PROBE))
    assert f is not None
    text = as_text(f)
    assert "<- bad update kept" in text and "<- parts" not in text, text

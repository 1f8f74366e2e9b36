"""Properties of the invariant functions and the parser, on synthetic runs."""

from __future__ import annotations

import json
import math
from pathlib import Path

from hypothesis import assume, given
from hypothesis import strategies as st

from tests.harness.check.checks import (
    LOSS_RISE_RTOL,
    OVERSHOOT_RTOL,
    Run,
    check_equal_norms,
    check_monotonic_loss,
    check_parity,
)
from tests.harness.observe.parse import ParsedRun, parse_metrics
from tests.harness.run.runner import Outcome


def synthetic(losses: list[float], world_size: int = 2, norms: list[float] | None = None) -> Run:
    steps = len(losses)
    parsed = ParsedRun(out=Path("."), world_size=world_size)
    for rank in range(world_size):
        parsed.records[rank] = {0: {"step": 0, "rank": rank, "param_norm": 1.0}}
        for s, loss in enumerate(losses, 1):
            parsed.records[rank][s] = {"step": s, "rank": rank, "loss": loss, "grad_norm": 1.0,
                                       "param_norm": norms[s - 1] if norms else 1.0,
                                       "optimizer_bytes": 12}
    return Run("synthetic", steps, world_size, Outcome([], ".", 0, False, 0.0), parsed)


losses = st.floats(0.01, 10.0)
factors = st.floats(0.5, 1.0)


@given(start=losses, factors=st.lists(factors, min_size=1, max_size=25),
       noise=st.lists(st.floats(0, 0.9), min_size=25, max_size=25))
def test_monotonic_accepts_every_rise_within_the_tolerance(start, factors, noise):
    seq = [start]
    for f, n in zip(factors, noise, strict=False):
        seq.append(seq[-1] * f if f < 1 else seq[-1] * (1 + n * LOSS_RISE_RTOL))
    assert check_monotonic_loss(synthetic(seq)) == []


@given(seq=st.lists(losses, min_size=2, max_size=25), at=st.integers(1, 24),
       rise=st.floats(1.0001, 1e4))
def test_monotonic_rejects_every_rise_beyond_an_overshoot(seq, at, rise):
    assume(at < len(seq))
    seq = sorted(seq, reverse=True)
    seq[at] = seq[at - 1] * (1 + rise * OVERSHOOT_RTOL)
    found = check_monotonic_loss(synthetic(seq))
    assert any(v.rank == 0 and v.step == at + 1 for v in found), found


@given(data=st.data(), rise=st.floats(2.5 * LOSS_RISE_RTOL, 0.999 * OVERSHOOT_RTOL),
       last=st.booleans(), stays=st.floats(1.0, 1.5))
def test_an_overshoot_passes_only_if_the_next_step_takes_it_back(data, rise, last, stays):
    """A rise of at most 1% with the next step below the loss before it passes; the same rise
    at the last step, or with the next step at or above that loss, is a violation."""
    seq = sorted(data.draw(st.lists(losses, min_size=3, max_size=25, unique=True)),
                 reverse=True)
    at = data.draw(st.integers(1, len(seq) - 2))
    seq[at] = seq[at - 1] * (1 + rise)
    assert check_monotonic_loss(synthetic(seq)) == []  # seq[at + 1] < seq[at - 1]
    seq = seq[:at + 1] if last else [*seq[:at + 1], seq[at - 1] * stays, *seq[at + 2:]]
    found = check_monotonic_loss(synthetic(seq))
    assert any(v.rank == 0 and v.step == at + 1 for v in found), found


@given(seq=st.lists(losses, min_size=1, max_size=10), bad=st.sampled_from([math.nan, math.inf]),
       at=st.integers(0, 9))
def test_monotonic_rejects_non_finite_losses(seq, bad, at):
    assume(at < len(seq))
    seq = sorted(seq, reverse=True)
    seq[at] = bad
    assert any(v.step == at + 1 for v in check_monotonic_loss(synthetic(seq)))


@given(norm=st.floats(1, 100), at=st.integers(0, 5), ulp_steps=st.integers(1, 3))
def test_equal_norms_is_exact(norm, at, ulp_steps):
    run = synthetic([1.0, 0.9, 0.8, 0.7, 0.6], world_size=3)
    other = norm
    for _ in range(ulp_steps):
        other = math.nextafter(other, math.inf)
    for rank in range(3):
        run.parsed.records[rank][at]["param_norm"] = norm
    run.parsed.records[2][at]["param_norm"] = other
    assert [(v.rank, v.step) for v in check_equal_norms(run)] == [(2, at)]


@given(rel=st.floats(0, 0.9e-5))
def test_parity_tolerates_float_noise_only(rel):
    base, single = synthetic([3.0, 2.0]), synthetic([3.0 * (1 + rel), 2.0])
    assert check_parity(base, single) == []
    assert check_parity(base, synthetic([3.0 * (1 + 3e-5), 2.0]))


record = st.fixed_dictionaries({
    "step": st.integers(1, 20), "rank": st.just(0), "world_size": st.just(4),
    "param_norm": st.floats(0, 10), "optimizer_bytes": st.integers(0, 10**6),
    "loss": st.floats(0, 10), "grad_norm": st.floats(0, 10), "step_time_s": st.floats(0, 1)})


@given(rec=record, cut=st.integers(1, 60))
def test_parser_reports_a_truncated_line(tmp_path_factory, rec, cut):
    line = json.dumps(rec)
    assume(cut < len(line))
    path = tmp_path_factory.mktemp("m") / "rank-0.jsonl"
    path.write_text(json.dumps(rec) + "\n" + line[:cut] + "\n")
    records, _, problems = parse_metrics(path, 0)
    assert rec["step"] in records
    assert len(problems) == 1 and "rank-0.jsonl:2" in problems[0].message


@given(rec=record, key=st.sampled_from(sorted(record.wrapped_strategy.mapping)),  # type: ignore[attr-defined]
       value=st.one_of(st.text(max_size=3), st.none(), st.lists(st.integers(), max_size=2)))
def test_parser_reports_a_mistyped_value(tmp_path_factory, rec, key, value):
    rec = dict(rec, **{key: value})
    path = tmp_path_factory.mktemp("m") / "rank-0.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    records, _, problems = parse_metrics(path, 0)
    assert records == {} and len(problems) == 1 and repr(key) in problems[0].message


@given(blob=st.binary(max_size=200))
def test_parser_never_raises_on_arbitrary_bytes(tmp_path_factory, blob):
    path = tmp_path_factory.mktemp("m") / "rank-0.jsonl"
    path.write_bytes(blob)
    parse_metrics(path, 0)


@given(kind=st.sampled_from(["nan", "spike"]), fault=st.integers(12, 19),
       late=st.integers(0, 2))
def test_a_rollback_must_come_before_the_bad_update_is_kept(tmp_path_factory, kind, fault,
                                                           late):
    """The order the run logged in tells when its guard fired: a NaN gradient is seen in
    step S's own gradient norm (step S is never logged before the rollback); a spike first
    in step S+1's loss (step S may be, step S+1 not). Later, the bad update was kept."""
    from tests.harness.check.checks import noticed_in_time

    in_time = fault - 1 if kind == "nan" else fault
    logged = in_time + late
    path = tmp_path_factory.mktemp("m") / "rank-0.jsonl"
    lines: list[dict[str, object]] = [
        {"step": s, "rank": 0, "world_size": 1, "param_norm": 1.0, "optimizer_bytes": 12,
         "loss": 1.0, "grad_norm": 1.0, "step_time_s": 0.0} for s in range(11, logged + 1)]
    lines.append({"event": "rollback", "rank": 0, "step": logged + 1, "to_step": 10,
                  "reason": kind})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    parsed = ParsedRun(out=Path("."), world_size=1)
    parsed.records[0], parsed.events[0], _ = parse_metrics(path, 0)
    run = Run("faulted", 20, 1, Outcome([], ".", 0, False, 0.0), parsed)
    found = noticed_in_time(run, kind, fault)
    assert bool(found) == (late > 0 and logged < 20)
    if found:
        assert found[0].step == logged and "before the rollback" in found[0].message
    at_the_end = Run("faulted", logged, 1, Outcome([], ".", 0, False, 0.0), parsed)
    assert noticed_in_time(at_the_end, kind, fault) == []  # a file written at the end


def test_reductions_per_micro_batch_are_charged_by_their_count_alone():
    """Issue 63, finding 7: a program that reduces every micro-batch's gradient (4 reductions
    in step 1, its step clock moved by each, so only the first is digested) is charged by the
    reduction count; its first reduction's input is no accumulated gradient to compare, so
    the gradient check says nothing. One digested reduction each is compared as ever."""
    from tests.harness.check.exercise_checks import check_accumulated_gradient
    from tests.harness.observe.traces import Call, Observation, ProcessTrace

    def digest(scale: float) -> dict[str, object]:
        return {"n": 4096, "sum": 1.0 * scale, "sq": 4.0 * scale ** 2,
                "sample": [scale * (i + 1) for i in range(16)]}

    def run(reductions: list[tuple[int, float | None]], backwards: list[int]) -> Run:
        ranks = []
        for r in range(2):
            calls = [Call(i, "reduce_scatter_tensor", 8192, 4096, "float32", [0, 1], "m.py:1",
                          t0, t0 + 1, digest=None if s is None else digest(s))
                     for i, (t0, s) in enumerate(reductions)]
            ranks.append(ProcessTrace(pid=10 + r, rank=r, size=2, calls=calls,
                                      backwards=backwards))
        parsed = ParsedRun(out=Path("."), world_size=2)
        return Run("r", 2, 2, Outcome([], ".", 0, False, 0.0), parsed,
                   Observation(Path("."), ranks))

    one = run([(5, 1.0), (15, 1.0)], [0, 10])
    each = run([(5, 1.84), (15, None), (25, None), (35, None), (45, None)],
               [0, 10, 20, 30, 40, 50, 60, 70])
    assert check_accumulated_gradient(one, each, 4) == []
    once = run([(35, 1.84), (75, 1.0)], [0, 10, 20, 30, 40, 50, 60, 70])
    found = check_accumulated_gradient(one, once, 4)
    assert [v.rank for v in found] == [0, 1] and all("norm ratio 1.84" in v.message
                                                     for v in found)


def test_p_local_is_what_the_rank_holds_not_one_layout():
    """Issue 63, finding 6: a tensor-parallel rank that holds the output projection's bias on
    group rank 0 only has its own P_local; the optimizer_bytes of the parameters its backward
    differentiates is right, as the lesson's layout's is; neither is charged."""
    from tests.harness.check.composed_checks import check_composed_counts, local_params
    from tests.harness.observe.traces import Observation, ProcessTrace

    P, t, n = 30_080, 2, 4
    layout = local_params(P, t)
    held = {0: layout, 1: layout - 64, 2: layout, 3: layout - 64}  # bias (C = 32) x 2 blocks

    def run(bytes_of: dict[int, int], observed: bool = True) -> Run:
        parsed = ParsedRun(out=Path("."), world_size=n, summary={"n_params": P})
        parsed.records = {r: {1: {"step": 1, "optimizer_bytes": b}} for r, b in bytes_of.items()}
        traces = [ProcessTrace(pid=10 + r, rank=r, size=n, leaf_elements=[held[r]])
                  for r in range(n)]
        return Run("tp", 1, n, Outcome([], ".", 0, False, 0.0), parsed,
                   Observation(Path("."), traces) if observed else None)

    single = run({0: 12 * P})
    single.parsed.summary = {"n_params": P}
    own = {r: 12 * math.ceil(held[r] / (n // t)) for r in range(n)}
    assert check_composed_counts(run(own), single, t) == []
    assert check_composed_counts(run({r: 12 * math.ceil(layout / 2) for r in range(n)}),
                                 single, t) == []
    [v] = check_composed_counts(run({**own, 3: own[3] + 12}), single, t)
    assert v.rank == 3 and "as its backward differentiates them" in v.expected
    blind = check_composed_counts(run(own, observed=False), single, t)  # --no-observe: the
    assert [v.rank for v in blind] == [1, 3]                              # layout alone
    assert all("as its backward" not in v.expected for v in blind)

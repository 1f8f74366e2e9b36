"""Exercise 1's all-reduces are counted by the data they reduce over the tensor-parallel
group, whatever calls carry them: one all-reduce written as a library call, a reduce then a
broadcast, an all-to-all or an all-gather and a sum, an exchange of sends with each peer
(one at a time or batched) or a ring of chunks weighs exactly one; calls of another size,
or to ranks outside the group, weigh nothing."""

from __future__ import annotations

from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

from tests.harness.check.tp_checks import _reduction_share
from tests.harness.observe.traces import Call

WAYS = ("all_reduce", "reduce_broadcast", "all_to_all", "all_gather", "exchange_sends",
        "exchange_group_dst", "exchange_batched", "ring")


def _call(op: str, n: int, group: list[int], peer: str = "") -> Call:
    return Call(0, op, n, n, "float32", group, "site", 0, peer=peer)


def one_all_reduce(way: str, act: int, group: list[int], me: int) -> list[Call]:
    """The calls rank `me` of `group` makes for one all-reduce of `act` elements, `way`."""
    t, peers = len(group), [r for r in group if r != me]
    if way in ("all_reduce", "all_to_all", "all_gather"):
        return [_call(way, act, group)]
    if way == "reduce_broadcast":
        return [_call("reduce", act, group, f"dst={group[0]}"), _call("broadcast", 0, group)]
    if way == "exchange_sends":
        return [c for r in peers for c in (_call("isend", act, group, f"dst={r}"),
                                          _call("recv", 0, group, f"src={r}"))]
    if way == "exchange_group_dst":
        return [_call("send", act, group, f"group_dst={group.index(r)}") for r in peers]
    if way == "exchange_batched":
        return [_call("batch_isend_irecv", act * (t - 1), group)]
    right = group[(group.index(me) + 1) % t]  # a ring: reduce-scatter, then all-gather hops
    return [_call("isend", act // t, group, f"dst={right}") for _ in range(2 * (t - 1))]


@given(way=st.sampled_from(WAYS), t=st.sampled_from([2, 4]), first=st.integers(0, 4),
       rows=st.integers(1, 8), me_at=st.integers(0, 3))
@example(way="exchange_sends", t=2, first=0, rows=16, me_at=0)  # the program
def test_one_all_reduce_weighs_one_however_it_is_written(way, t, first, rows, me_at):
    group = list(range(first, first + t))
    act = rows * 16 * 32
    calls = one_all_reduce(way, act, group, group[me_at % t])
    assert abs(sum(_reduction_share(c, group, act) for c in calls) - 1) < 1e-9, calls


@given(way=st.sampled_from(WAYS), t=st.sampled_from([2, 4]), rows=st.integers(1, 8),
       other=st.sampled_from(["size", "group"]))
def test_another_size_or_group_weighs_nothing(way, t, rows, other):
    """The ZeRO-1 gradient's reduce-scatter or a ring over other ranks is not the heads'."""
    group, act = list(range(t)), rows * 16 * 32
    if other == "size":
        calls = one_all_reduce(way, 30_080 + 7, group, 0)
    else:
        calls = one_all_reduce(way, act, [r + t for r in group], t)
    assert sum(_reduction_share(c, group, act) for c in calls) == 0, calls


@given(steps=st.integers(1, 20), per=st.integers(1, 4), flag=st.integers(1, 4),
       short=st.integers(0, 3))
@example(steps=6, per=1, flag=4, short=0)  # --micro-batches 4 accepted, ignored
def test_one_step_clock_counts_the_passes_a_step_took(steps, per, flag, short):
    """A step's backward passes are what the run took per step (a program that ignores
    --micro-batches takes one), else the flag where a run stopped part-way."""
    from tests.harness.observe.traces import ProcessTrace

    n = max(0, steps * per - short)
    p = ProcessTrace(pid=1, backwards=list(range(n)))
    want = per if short == 0 else (n // steps if n and n % steps == 0 else flag)
    assert p.backwards_per_step(steps, flag) == want


def _tp_run(per: int, loss_first: bool, forward: int, backward: int, steps: int = 6):
    """A T = 2 run of two ranks, `per` micro-batches a step, each micro-batch's forward and
    backward making `forward` and `backward` all-reduces of its activation over the group
    (2 and 2 are the lesson's, one per block); with `loss_first` a step runs every
    micro-batch's forward before any backward (a guard that reads the losses first)."""
    from tests.harness.check.checks import Run
    from tests.harness.observe.parse import ParsedRun
    from tests.harness.observe.traces import Observation, ProcessTrace
    from tests.harness.run.runner import Outcome

    act = 16 * 16 * 32 // per  # B = 16 rows, as micro-batches
    step = ["f", "b"] * per if not loss_first else ["f"] * per + ["b"] * per
    calls: list[Call] = []
    backwards: list[int] = []
    for clock, event in enumerate(step * steps):
        t0 = 100 * clock
        if event == "b":
            backwards.append(t0)
        for i in range(forward if event == "f" else backward):
            calls.append(Call(len(calls), "all_reduce", act, act, "float32", [0, 1], "m.py:1",
                              t0 + 1 + i, t0 + 2 + i))
    ranks = [ProcessTrace(pid=10 + r, rank=r, size=2, calls=list(calls),
                          backwards=list(backwards)) for r in range(2)]
    return Run("tp", steps, 2, Outcome([], ".", 0, False, 0.0),
               ParsedRun(out=Path("."), world_size=2), Observation(Path("."), ranks))


@given(per=st.sampled_from([1, 2, 4]), loss_first=st.booleans(),  # B = 16 splits evenly
       mistake=st.sampled_from(["none", "no_forward", "no_backward", "twice_forward",
                                "one_more_forward"]))
# Found by a draw of the style space (micro=2, guard=loss_first): both micro-batches'
# forwards ran before the first backward, read as 4 reductions in step 1's forward
@example(per=2, loss_first=True, mistake="none")
def test_the_heads_all_reduces_are_counted_whatever_order_the_micro_batches_run(
        per, loss_first, mistake):
    """One all-reduce per block in forward and one in backward, per micro-batch, whether
    each micro-batch's backward follows its forward or every forward of a step comes first;
    a missing or an extra reduction is told as such."""
    from tests.harness.check.tp_checks import check_tp_traffic

    forward = {"no_forward": 0, "twice_forward": 4, "one_more_forward": 3}.get(mistake, 2)
    backward = 0 if mistake == "no_backward" else 2
    found = check_tp_traffic(_tp_run(per, loss_first, forward, backward), 2, 16)
    why = {v.message.split(":")[0].split(" (")[0] for v in found}
    assert why == {"none": set(),
                   "no_forward": {"the attention output is not all-reduced over the "
                                  "tensor-parallel group"},
                   "no_backward": {"the input's gradient is not all-reduced in backward"},
                   "twice_forward": {"more reductions of the activation's size"},
                   "one_more_forward": {"more reductions of the activation's size"}}[mistake], \
        [v.message for v in found]

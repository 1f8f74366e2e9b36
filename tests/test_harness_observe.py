"""The observed checks on synthetic traces: ways of writing ZeRO-1 that the lesson allows pass
(whatever the collective API, world size or model size), and the compositions it warns about
fail with the call sites that explain them. No runs: pure functions of traces."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.harness.check.checks import Run
from tests.harness.check.observed_checks import (
    check_genuine_ranks,
    check_measured_memory,
    check_same_sequence,
    check_zero_traffic,
    unseen_ranks,
)
from tests.harness.check.work_checks import CONTEXT, check_data_parallel, check_reduced
from tests.harness.observe.parse import ParsedRun
from tests.harness.observe.traces import Call, Observation, ProcessTrace, deadlocked, where_blocked
from tests.harness.run.runner import Outcome

SEC = 10**9


def call(op: str, n_in: int, n_out: int = 0, site: str = "main.py:10", t0: int = 0,
         done: bool = True, peer: str = "", group: int | list[int] = 4) -> Call:
    """A call on `group`: its ranks, or N for ranks 0..N-1."""
    ranks = list(range(group)) if isinstance(group, int) else group
    return Call(0, op, n_in, n_out, "float32", ranks, site, t0, t0 + 1 if done else None,
                peer=peer)


def rank_trace(rank: int, size: int, calls: list[Call], backward_at: int = 0,
               fr: list[dict[str, object]] | None = None, P: int = 0) -> ProcessTrace:
    p = ProcessTrace(pid=100 + rank, rank=rank, size=size, calls=calls, flight_recorder=fr,
                     backwards=[backward_at])
    if P:
        p.leaf_elements = [P]
    return p


def observed_run(processes: list[ProcessTrace], size: int, steps: int = 1,
                 P: int | None = None) -> Run:
    parsed = ParsedRun(out=Path("."), world_size=size,
                       summary={"n_params": P} if P else None)
    for p in processes:  # one backward call per step (the calls are counted from the first)
        if p.backwards and len(p.backwards) < steps:
            p.backwards = p.backwards * steps
    return Run("synthetic", steps, size, Outcome([], ".", 0, False, 0.0), parsed,
               Observation(Path("."), processes))


def zero_step(size: int, P: int, t: int, api: str) -> list[Call]:
    """One ZeRO-1 step as a student may write it: the gradients' reduce-scatter, a scalar
    all-reduce for the loss, the parameters' all-gather."""
    shard = -(-P // size)
    if api == "tensor":
        return [call("reduce_scatter_tensor", shard * size, shard, t0=t),
                call("all_reduce", 1, t0=t + 2),
                call("all_gather_into_tensor", shard, shard * size, t0=t + 4)]
    if api == "lists":
        return [call("reduce_scatter", shard * size, shard, t0=t),
                call("all_reduce", 1, t0=t + 2),
                call("all_gather", shard, shard * size, t0=t + 4)]
    return [call("all_to_all_single", shard * size, shard * size, t0=t),  # the reference's
            call("all_reduce", 2, t0=t + 2),
            call("all_to_all_single", shard * size, shard * size, t0=t + 4)]


@given(size=st.integers(2, 8), P=st.integers(1_000, 10_000_000), steps=st.integers(1, 5),
       api=st.sampled_from(["tensor", "lists", "all_to_all"]))
def test_zero1_written_any_way_moves_one_allreduce_per_step(size, P, steps, api):
    procs = [rank_trace(r, size, [c for s in range(steps) for c in zero_step(size, P, 10 * s, api)],
                        P=P) for r in range(size)]
    run = observed_run(procs, size, steps, P)
    assert check_zero_traffic(run) == []
    assert check_same_sequence(run) == []
    assert check_genuine_ranks(run) == []


@given(size=st.integers(2, 8), P=st.integers(1_000, 10_000_000),
       api=st.sampled_from(["tensor", "lists", "all_to_all"]))
def test_an_extra_gradient_allreduce_is_named_with_both_call_sites(size, P, api):
    shard = -(-P // size)
    step = [call("all_reduce", shard * size, site="main.py:150", t0=0),
            *zero_step(size, P, 1, api)]
    step[1].site = "main.py:158"
    run = observed_run([rank_trace(r, size, list(step), P=P) for r in range(size)], size, 1, P)
    found = check_zero_traffic(run)
    assert len(found) == size
    assert "the gradient is reduced twice" in found[0].message
    assert "all_reduce at main.py:150" in found[0].message
    assert "main.py:158" in found[0].message



@given(size=st.integers(2, 8), P=st.integers(1_000, 200_000), micro=st.integers(2, 4))
def test_a_reduction_per_micro_batch_is_named_as_reduced_that_many_times(size, P, micro):
    """One call site reducing the whole gradient after every micro-batch's backward: the
    trace says how many times per step, at which site (not 'more data than ZeRO-1')."""
    shard = -(-P // size)
    step = [call("reduce_scatter_tensor", shard * size, shard, site="main.py:80", t0=k)
            for k in range(micro)]
    step.append(call("all_gather_into_tensor", shard, shard * size, site="main.py:90",
                     t0=micro))
    run = observed_run([rank_trace(r, size, list(step), P=P) for r in range(size)], size, 1, P)
    found = check_zero_traffic(run)
    assert len(found) == size
    assert found[0].message.startswith(f"the gradient is reduced {micro} times per step at "
                                       "one call site: reduce_scatter_tensor at main.py:80")

def test_ddp_reducer_traffic_seen_only_by_the_flight_recorder_counts():
    """DDP's all-reduce has no Python call: the Flight Recorder's entry is what is counted."""
    P, size = 40_000, 4
    fr = [{"profiling_name": "gloo:all_reduce", "input_sizes": [[P]], "output_sizes": [[P]],
           "input_dtypes": ["Float"], "time_created_ns": 5, "is_p2p": False}]
    plain_ddp = observed_run([rank_trace(r, size, [], fr=fr, P=P) for r in range(size)],
                             size, 1, P)
    assert check_zero_traffic(plain_ddp) == []  # one all-reduce: the bound exactly
    both = observed_run([rank_trace(r, size, zero_step(size, P, 10, "tensor"), fr=fr, P=P)
                         for r in range(size)], size, 1, P)
    found = check_zero_traffic(both)
    assert found and "torch C++ (no Python call)" in found[0].message


def test_a_python_call_is_not_counted_again_through_its_flight_recorder_entry():
    P, size = 40_000, 4
    step = zero_step(size, P, 10, "tensor")
    fr = [{"profiling_name": "gloo:all_reduce", "input_sizes": [[P]], "time_created_ns": 10}]
    run = observed_run([rank_trace(r, size, step, fr=fr, P=P) for r in range(size)], size, 1, P)
    assert check_zero_traffic(run) == []  # gloo's record of the reduce-scatter, inside its call


def test_different_shapes_on_one_rank_name_the_first_difference_and_both_sites():
    a = [call("all_reduce", 10, site="main.py:20"), call("all_reduce", 99, site="main.py:30")]
    b = [call("all_reduce", 10, site="main.py:20"), call("all_reduce", 98, site="main.py:31")]
    run = observed_run([rank_trace(0, 2, a), rank_trace(1, 2, b)], 2)
    [v] = check_same_sequence(run)
    assert "#2" in v.expected and "main.py:30" in v.message and "main.py:31" in v.message


def test_point_to_point_calls_are_not_part_of_the_collective_sequence():
    run = observed_run([rank_trace(0, 2, [call("send", 4, peer="dst=1"),
                                          call("barrier", 0)]),
                        rank_trace(1, 2, [call("recv", 4, peer="src=0"),
                                          call("barrier", 0)])], 2)
    assert check_same_sequence(run) == []



def test_a_rooted_collective_agrees_by_what_every_rank_passes():
    """Only the root of a gather passes its gather_list, only the root of a scatter its
    scatter_list: what must agree is what every rank passes (a loss gathered to rank 0 for
    logging is no mismatch, nor a deadlock while the ranks sit in it); a rank contributing
    another size still is."""
    def ranks(rooted: str, sizes: tuple[int, int]) -> list[ProcessTrace]:
        part, whole = ("numel_in", "numel_out") if rooted == "gather" else \
            ("numel_out", "numel_in")
        out = []
        for r, k in enumerate(sizes):
            c = call(rooted, 0, t0=98 * SEC, done=False, group=2)
            setattr(c, part, k)
            setattr(c, whole, 2 * k if r == 0 else 0)  # the list lives on the root alone
            out.append(rank_trace(r, 2, [c]))
        return out

    for rooted in ("gather", "scatter"):
        assert check_same_sequence(observed_run(ranks(rooted, (3, 3)), 2)) == []
        assert deadlocked(Observation(Path("."), ranks(rooted, (3, 3))), 99 * SEC, 5) is None
        [v] = check_same_sequence(observed_run(ranks(rooted, (3, 4)), 2))
        assert v.rank == 1 and "different calls" in v.found

def test_one_process_claiming_four_ranks_and_no_observer_at_all():
    """Charged only on evidence (issue 61): a process seen training alone did the ranks' work;
    a run that ended well where the observer saw no rank join and no backward (a launcher
    only, or nothing at all) is not graded, never charged; a run that failed is told how."""
    alone = observed_run([ProcessTrace(pid=7, backwards=[1])], 4)
    alone.parsed.records[3] = {1: {"step": 1}}  # it wrote rank 3's file, and exited 0
    [v] = check_genuine_ranks(alone)
    assert "never started" in v.message and "pid 7 ran 1 backward" in v.message
    assert unseen_ranks(alone) is None
    crashed = observed_run([ProcessTrace(pid=7)], 4)
    crashed.outcome.returncode = 1
    [v] = check_genuine_ranks(crashed)
    assert "before the run ended: exit code 1" in v.message and unseen_ranks(crashed) is None
    for hidden in (observed_run([ProcessTrace(pid=7, argv=["python", "main.py"])], 4),
                   observed_run([], 4)):  # it exec'd (no bye), or nothing loaded the observer
        why = unseen_ranks(hidden)
        assert why is not None and why.startswith("the suite could not see the ranks")
        assert check_genuine_ranks(hidden) == [] and check_zero_traffic(hidden) == []
    assert "main.py" in str(unseen_ranks(observed_run([ProcessTrace(pid=7, argv=["python",
                                                                                "main.py"])], 4)))
    # seen to its end without training: the evidence that no rank trained, charged
    idle = observed_run([ProcessTrace(pid=7, ended=True)], 4)
    assert unseen_ranks(idle) is None
    [v] = check_genuine_ranks(idle)
    assert "none called init_process_group" in v.message
    assert check_genuine_ranks(observed_run([rank_trace(0, 4, [])], 4))  # ranks 1-3 missing


def test_a_rank_that_got_no_parameters_before_its_first_backward_is_unsynced():
    """The evidence of a missing initial broadcast: ranks that received fewer than P
    elements by collectives before their first backward (one call, or one per tensor)."""
    from tests.harness.check.checks import unsynced_ranks

    def ranks(sent: list[list[int]]) -> list[ProcessTrace]:
        return [rank_trace(r, len(sent), [call("broadcast", k, t0=i) for i, k in
                                          enumerate(sizes)], backward_at=50)
                for r, sizes in enumerate(sent)]
    assert unsynced_ranks(observed_run(ranks([[100], [60, 40], [100], [100]]), 4, P=100)) == []
    late = ranks([[100]] * 4)
    late[3].calls[0].t0 = 60  # after its first backward: no start of its own
    assert unsynced_ranks(observed_run(late, 4, P=100)) == [3]
    run = observed_run(ranks([[100], [], [10], [100]]), 4, P=100)
    assert unsynced_ranks(run) == [1, 2]
    run.observed = None
    assert unsynced_ranks(run) is None


def _memory_runs(P: int, persistent: dict[int, int],
                 same_storage: dict[int, int] | None = None) -> dict[int, Run]:
    runs = {}
    for n, b in persistent.items():
        p = rank_trace(0, n, [], P=P)
        p.memory.append({"persistent_bytes": b,
                         "same_storage_bytes": (same_storage or persistent)[n]})
        runs[n] = observed_run([p], n, 6, P)
    return runs


@given(P=st.integers(1_000, 10_000_000), fixed=st.integers(0, 10**8))
def test_measured_memory_needs_12P_sharded(P, fixed):
    def shrinking(sharded: float) -> dict[int, int]:
        return {n: fixed + round(sharded * P / n) for n in (1, 2, 4)}
    assert check_measured_memory(_memory_runs(P, shrinking(16))) == []  # the reference
    assert check_measured_memory(_memory_runs(P, shrinking(12))) == []  # master + moments
    assert check_measured_memory(_memory_runs(P, shrinking(8)))  # moments kept whole
    assert check_measured_memory(_memory_runs(P, shrinking(0)))  # nothing sharded


@given(P=st.integers(1_000, 10_000_000), fixed=st.integers(0, 10**8))
def test_measured_memory_takes_the_measure_that_sees_the_sharded_state(P, fixed):
    """Each measure errs only low: the storages alive at both snapshots miss state updated
    out of place; held storages (those and the ones replaced by the same size) may take in
    a collective's buffer at N >= 2. Either one showing 12P sharded is enough; neither
    turns state kept whole into sharded state."""
    def shrinking(sharded: float, buffer_at_2: int = 0) -> dict[int, int]:
        return {n: fixed + round(sharded * P / n) + (buffer_at_2 if n == 2 else 0)
                for n in (1, 2, 4)}
    out_of_place = _memory_runs(P, shrinking(12), same_storage=shrinking(0))
    assert check_measured_memory(out_of_place) == []
    a_buffer_held = _memory_runs(P, shrinking(16, buffer_at_2=4 * P), shrinking(16))
    assert check_measured_memory(a_buffer_held) == []
    assert check_measured_memory(_memory_runs(P, shrinking(8), shrinking(8)))  # kept whole
    assert check_measured_memory(_memory_runs(P, shrinking(8, 4 * P), shrinking(4)))


def test_deadlock_needs_every_rank_joined_and_blocked_for_K_seconds():
    def ranks(*blocked_since: int | None, size: int = 3) -> Observation:
        procs = []
        for r, t in enumerate(blocked_since):
            calls = [call("all_reduce", 8, t0=t or 0, done=t is None)]
            procs.append(rank_trace(r, size, calls))
        return Observation(Path("."), procs)
    now = 100 * SEC
    assert deadlocked(ranks(90 * SEC, 90 * SEC, 90 * SEC), now, 5) is not None
    assert deadlocked(ranks(90 * SEC, 90 * SEC, 97 * SEC), now, 5) is None  # one only just came
    assert deadlocked(ranks(90 * SEC, 90 * SEC, None), now, 5) is None  # one is computing
    assert deadlocked(ranks(90 * SEC, 90 * SEC), now, 5) is None  # rank 2 still importing torch


def test_calls_that_can_never_match_are_a_deadlock_after_half_a_second():
    now = 100 * SEC
    recv = rank_trace(0, 3, [call("recv", 1, t0=98 * SEC, done=False, peer="src=1")])
    into = [rank_trace(r, 3, [call("all_reduce", 8, t0=98 * SEC, done=False)]) for r in (1, 2)]
    # rank 1 can never send: it is inside the all_reduce
    assert deadlocked(Observation(Path("."), [recv, *into]), now, 5) is not None
    assert deadlocked(Observation(Path("."), [recv, *into]), 98 * SEC + SEC // 4, 5) is None
    shapes = [rank_trace(r, 2, [call("all_reduce", 8 + r, t0=98 * SEC, done=False)])
              for r in (0, 1)]
    assert deadlocked(Observation(Path("."), shapes), now, 5) is not None
    pair = [rank_trace(0, 2, [call("send", 8, t0=98 * SEC, done=False, peer="dst=1")]),
            rank_trace(1, 2, [call("recv", 8, t0=98 * SEC, done=False, peer="src=0")])]
    assert deadlocked(Observation(Path("."), pair), now, 5) is None  # a matched pair in flight
    alone = [rank_trace(0, 1, [call("recv", 1, t0=98 * SEC, done=False, peer="src=1",
                                    group=1)])]  # the one-rank run: there is no rank 1
    assert deadlocked(Observation(Path("."), alone), now, 5) is not None
    assert where_blocked(Observation(Path("."), alone)) == \
        "rank 0 blocked in recv(src=1) at main.py:10 (there is no rank 1 in a run of 1)"
    assert "no rank" not in where_blocked(Observation(Path("."), [recv, *into]))


def test_ranks_waiting_on_each_other_across_two_groups_are_a_deadlock_after_half_a_second():
    """Exercise 1's groups: ranks 0,2 in a barrier of all four that ranks 1,3 have not
    reached, ranks 1,3 in an all-reduce of their tensor-parallel pair that ranks 0,2 have
    not reached: a ring of waits, stopped at the mismatch bound, not the 5 s hang watch. A
    rank merely behind (it has issued the call the others wait in) is no proof, nor are
    two groups at the same place of their own sequences with different sizes."""
    now, since = 100 * SEC, 98 * SEC
    world, tp = [0, 1, 2, 3], {0: [0, 1], 1: [0, 1], 2: [2, 3], 3: [2, 3]}

    def c(op: str, group: list[int], done: bool = True, n: int = 8) -> Call:
        return call(op, n, t0=since, done=done, group=group)

    def observe(calls: dict[int, list[Call]]) -> Observation:
        return Observation(Path("."), [rank_trace(r, 4, cs) for r, cs in calls.items()])

    ring = observe({r: [c("all_reduce", world), c("all_reduce", tp[r])]
                    + ([c("barrier", world, done=False)] if r in (0, 2)
                       else [c("all_reduce", tp[r]), c("all_reduce", tp[r], done=False)])
                    for r in world})
    assert deadlocked(ring, now, 5) is not None
    assert deadlocked(ring, since + SEC // 4, 5) is None  # watched for half a second first
    assert "barrier" in where_blocked(ring) and "all_reduce" in where_blocked(ring)
    behind = observe({r: [c("all_reduce", world), c("barrier", world, done=r != 0)]
                      + ([] if r == 0 else [c("all_reduce", tp[r], done=False)])
                      for r in world})  # rank 0 still leaving the barrier the rest left
    assert deadlocked(behind, now, 5) is None
    assert deadlocked(behind, now + 4 * SEC, 5) is not None  # the hang watch still holds
    two_groups = observe({r: [c("all_reduce", tp[r], done=False, n=8 + r // 2)]
                          for r in world})
    assert deadlocked(two_groups, now, 5) is None  # each pair agrees within itself



def test_the_reported_parameter_count_is_compared_with_the_backward_not_trusted():
    """P is what the ranks' backward passes differentiate; a summary.json that says otherwise
    (a flat shard counted with the model) is a violation that names both."""
    P = 30_080
    calls = zero_step(4, P, 10, "tensor")
    honest = observed_run([rank_trace(r, 4, calls, P=P) for r in range(4)], 4, P=P)
    assert check_reduced(honest) == []
    lying = observed_run([rank_trace(r, 4, calls, P=P) for r in range(4)], 4, P=P + 7_520)
    [v] = check_reduced(lying)
    assert v.found == P + 7_520 and f"{P:,}" in str(v.expected) and "backward" in v.message


def test_a_rank_one_collective_behind_is_slow_not_mismatched():
    """Gradescope's throttled box: rank 0 is still inside all_gather #2 (its Python has not
    returned) while ranks 1-3 are in reduce_scatter #3, which they could enter only once
    rank 0 had given them its part of #2: no mismatch, so only the full --hang-after makes
    it a deadlock. At the same place in the sequence, different calls still are one."""
    now = 100 * SEC
    done = [call("reduce_scatter_tensor", 8, 2, t0=90 * SEC)]
    behind = rank_trace(0, 4, [*done, call("all_gather_into_tensor", 2, 8, t0=98 * SEC,
                                           done=False)])
    ahead = [rank_trace(r, 4, [*done, call("all_gather_into_tensor", 2, 8, t0=91 * SEC),
                               call("reduce_scatter_tensor", 8, 2, t0=98 * SEC, done=False)])
             for r in (1, 2, 3)]
    assert deadlocked(Observation(Path("."), [behind, *ahead]), now, 5) is None
    assert deadlocked(Observation(Path("."), [behind, *ahead]), now + 4 * SEC, 5) is not None
    skipped = rank_trace(0, 4, [*done, call("reduce_scatter_tensor", 8, 2, t0=98 * SEC,
                                            done=False)])  # rank 0 skipped the all-gather
    others = [rank_trace(r, 4, [*done, call("all_gather_into_tensor", 2, 8, t0=98 * SEC,
                                            done=False)]) for r in (1, 2, 3)]
    assert deadlocked(Observation(Path("."), [skipped, *others]), now, 5) is not None


def test_a_receive_whose_message_is_on_its_way_is_no_mismatch():
    """A ring's last hop: rank 1 posted its isend to rank 0 and went on into the all-reduce
    while rank 0 still waits in recv(src=1) for those bytes (on a throttled box, for a
    while): the receive is matched, so only the full --hang-after makes it a deadlock. A
    receive from a rank that sent fewer messages than asked for stays provably unmatched."""
    now = 100 * SEC
    def ring(sends: int) -> list[ProcessTrace]:
        recv = rank_trace(0, 2, [call("recv", 4, t0=98 * SEC, done=False, peer="src=1")])
        sent = [call("isend", 4, t0=97 * SEC, peer="dst=0") for _ in range(sends)]
        for c in sent:
            c.is_async = True
        into = rank_trace(1, 2, [*sent, call("all_reduce", 2, t0=98 * SEC, done=False)])
        return [recv, into]
    assert deadlocked(Observation(Path("."), ring(sends=1)), now, 5) is None
    assert deadlocked(Observation(Path("."), ring(sends=1)), 104 * SEC, 5) is not None
    assert deadlocked(Observation(Path("."), ring(sends=0)), now, 5) is not None

def test_where_blocked_groups_ranks_by_the_call_they_wait_in():
    procs = [rank_trace(0, 4, [call("recv", 1, site="main.py:153", t0=1, done=False,
                                    peer="src=1")])]
    for r in range(1, 4):
        procs.append(rank_trace(r, 4, [call("all_reduce", 8, site="main.py:160", t0=1,
                                            done=False)]))
    text = where_blocked(Observation(Path("."), procs))
    assert text == ("rank 0 blocked in recv(src=1) at main.py:153; "
                    "ranks 1-3 in all_reduce #1 at main.py:160")


def with_fresh(calls: list[Call], size: int, P: int) -> list[Call]:
    """What the observer records for all-to-alls: a reduce-scatter by hand sends N-1 distinct
    chunks; a gather by hand sends its one slice to everyone (counted once)."""
    shard = -(-P // size)
    for i, c in enumerate(c for c in calls if c.op == "all_to_all_single"):
        c.fresh = (size - 1) * shard if i % 2 == 0 else shard
    return calls


def ring(size: int, P: int, t: int) -> list[Call]:
    """ZeRO-1 as rings of sends: N-1 sends of fresh partial sums, then the own slice once and
    N-2 forwards of slices received."""
    shard = -(-P // size)
    out = []
    for k in range(size - 1):
        out += [call("isend", shard, t0=t + k, peer="dst=1"), call("recv", shard, t0=t + k)]
        out[-2].fresh = shard
    for k in range(size - 1):
        out += [call("isend", shard, t0=t + size + k, peer="dst=1"),
                call("recv", shard, t0=t + size + k)]
        out[-2].fresh = shard if k == 0 else 0
    return out


@given(size=st.integers(2, 8), P=st.integers(1_000, 1_000_000), steps=st.integers(1, 4),
       api=st.sampled_from(["tensor", "lists", "all_to_all", "ring"]))
def test_gradients_reduced_any_way_pass_and_gathering_alone_fails(size, P, steps, api):
    def one(s: int) -> list[Call]:
        if api == "ring":
            return ring(size, P, 100 * s)
        return with_fresh(zero_step(size, P, 100 * s, api), size, P)
    run = observed_run([rank_trace(r, size, [c for s in range(steps) for c in one(s)], P=P)
                        for r in range(size)], size, steps, P)
    assert check_reduced(run) == []
    if size == 2 and api in ("all_to_all", "ring"):
        return  # at N = 2 a gather by hand sends as much fresh data as a reduction
    gather_only = [[c for c in one(s) if not c.op.startswith("reduce_scatter")
                    and not (c.op == "all_to_all_single" and c.t0 % 100 == 0)
                    and not (api == "ring" and c.t0 % 100 < size)] for s in range(steps)]
    run = observed_run([rank_trace(r, size, [c for cs in gather_only for c in cs], P=P)
                        for r in range(size)], size, steps, P)
    found = check_reduced(run)
    assert len(found) == size and "never reduced" in found[0].message, found


def test_an_allreduce_then_a_gather_is_named_for_what_it_is():
    size, P = 4, 40_000
    step = [call("all_reduce", P, site="main.py:40"), call("all_reduce", 2, site="main.py:44"),
            call("all_gather_into_tensor", P // size, P, site="main.py:52")]
    run = observed_run([rank_trace(r, size, list(step), P=P) for r in range(size)], size, 1, P)
    [first, *_] = check_zero_traffic(run)
    assert first.message.startswith("all-reduce where a reduce-scatter suffices: all_reduce at "
                                    "main.py:40"), first.message
    assert "all_gather_into_tensor at main.py:52" in first.message
    assert check_reduced(run) == []  # it does reduce every gradient: too much, not too little


@given(size=st.integers(2, 8), B=st.integers(1, 8), micro=st.sampled_from([1, 2]))
def test_each_rank_must_compute_on_its_share_and_the_whole_batch_is_named(size, B, micro):
    def trace(r: int, rows: int) -> ProcessTrace:
        p = rank_trace(r, size, [])
        p.work = [{"tokens": rows * CONTEXT // micro}] * (3 * micro)
        return p
    share = observed_run([trace(r, B) for r in range(size)], size, 3)
    assert check_data_parallel(share, B) == []
    whole = observed_run([trace(r, size * B) for r in range(size)], size, 3)
    found = check_data_parallel(whole, B)
    assert len(found) == size and found[0].step == 1
    assert f"whole global batch of {size * B} rows" in found[0].message
    unseen = observed_run([rank_trace(r, size, []) for r in range(size)], size, 3)
    assert check_data_parallel(unseen, B) == []  # no token count seen: not charged
    if B % size == 0:  # --batch-size taken for the global batch, split over the ranks
        split = observed_run([trace(r, B // size) for r in range(size)], size, 3)
        found = check_data_parallel(split, B)
        assert len(found) == size and "--batch-size is per rank" in found[0].message

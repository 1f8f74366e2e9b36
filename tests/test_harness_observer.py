"""The observer and the containment, on real runs: the observer changes no result, a deadlock
is stopped early and located, and a run cannot outlive, escape or edit the suite."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType

import pytest

from tests.harness.check.checks import check_clean_exit, check_monotonic_loss
from tests.harness.check.observed_checks import check_genuine_ranks, persistent_bytes, unseen_ranks
from tests.harness.check.state_checks import located
from tests.harness.check.work_checks import check_data_parallel, check_reduced
from tests.harness.run import acl, contain
from tests.harness.run.runner import Watch, run_command
from tests.harness.run.runs import (
    BASE,
    MEM1,
    MICRO,
    N2,
    N3,
    RESUMED,
    SINGLE,
    TP2,
    TP2DP2,
    TP2DP2_RESUMED,
    RunCache,
    RunSpec,
    faulted,
    nemesis_nan,
)

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = ROOT / "tests" / "hostile"
OBSERVER_DIR = ROOT / "tests" / "observer"


def observer_module(name: str) -> ModuleType:
    """One of the observer's modules (tests/observer/NAME.py), loaded into this process with
    its folder on sys.path, as a run has it, for the siblings it imports."""
    if str(OBSERVER_DIR) not in sys.path:
        sys.path.append(str(OBSERVER_DIR))
    spec = importlib.util.spec_from_file_location(name, OBSERVER_DIR / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def hostile(name: str) -> tuple[str, ...]:
    path = HOSTILE / name
    return (str(path),) if name.endswith(".sh") else (sys.executable, str(path))


def cache(tmp_path: Path, bound: float, hang_after_s: float = 5.0,
          grace_s: float = contain.GRACE_S) -> RunCache:
    return RunCache(tmp_path, bound, ROOT, 4096 * 2**20, 64 * 2**20,
                    Watch(observe=True, hang_after_s=hang_after_s, contain=True,
                          grace_s=grace_s))


SURE_SURVIVOR_GRACE_S = 0.5  # a helper that sleeps for ever: no need to wait 3 s to know


def _files(out: Path) -> dict[str, str]:
    """Every file a run wrote, by sha256; metrics without the wall-clock step time."""
    import json

    found = {}
    for path in sorted(out.rglob("*")):
        if not path.is_file():
            continue
        data = path.read_bytes()
        if path.suffix == ".jsonl":
            recs = [json.loads(ln) for ln in data.decode().splitlines() if ln.strip()]
            data = json.dumps([{k: v for k, v in r.items() if k != "step_time_s"}
                               for r in recs]).encode()
        found[str(path.relative_to(out))] = hashlib.sha256(data).hexdigest()
    return found


def test_observer_leaves_the_reference_results_byte_identical(reference_only, run, tmp_path):
    observed = run(BASE)
    assert observed.observed is not None and observed.observed.ranks()
    # every record the observer wrote is of its form: the boundary refuses none of them
    assert observed.observed.problems == [] and observed.parsed.problems == []
    plain = RunCache(tmp_path, 60, ROOT, None, None, Watch(observe=False, contain=True)
                     ).get((sys.executable, "-m", "capstone"), BASE)
    assert plain.observed is None and plain.outcome.returncode == 0
    a, b = _files(observed.parsed.out), _files(plain.parsed.out)
    assert a == b and any(k.endswith("rank-3.pt") for k in a)


@pytest.mark.slow
def test_a_deadlock_is_stopped_early_and_located(deadlocked):
    r = deadlocked
    o = r.outcome
    assert o.deadlock_s is not None and not o.timed_out and o.wall_s < 30, o.reason()
    assert o.blocked.startswith("rank 0 blocked in recv(src=1) at hostile/deadlock.py:"), o.blocked
    assert "ranks 1-3 in all_reduce #5 at hostile/deadlock.py:" in o.blocked, o.blocked
    assert "deadlock.py" in o.stacks and "rank_main" in o.stacks  # faulthandler's dumps
    first = check_clean_exit(r)[0]
    assert "deadlock" in str(first) and "recv(src=1)" in str(first)
    assert o.alive_at_bound and not o.survivors


def test_a_helper_with_a_clean_environment_is_ended_and_reported(contained, tmp_path):
    c = cache(tmp_path, bound=5, grace_s=SURE_SURVIVOR_GRACE_S)
    r = c.get(hostile("escape_clean.py"), BASE)
    assert r.outcome.containment == contained
    assert r.outcome.returncode == 0 and len(r.outcome.survivors) == 1
    assert any("no process left" in str(v) for v in check_clean_exit(r))
    leftover = subprocess.run(["pgrep", "-f", "sleep 3599.25"], capture_output=True, text=True)
    assert leftover.stdout == "", "the helper outlived its run"


def test_a_helper_still_exiting_when_the_run_ends_is_no_survivor(contained, tmp_path):
    r = cache(tmp_path, bound=10).get(hostile("slow_exit.py"), BASE)
    assert r.outcome.containment == contained
    assert r.outcome.returncode == 0 and r.outcome.survivors == [], r.outcome.survivors
    assert not any("no process left" in str(v) for v in check_clean_exit(r))


def test_a_run_cannot_edit_the_suite_or_the_results_file_or_signal_the_suite(
        contained, tmp_path, monkeypatch):
    checks = ROOT / "tests" / "harness" / "check" / "checks.py"
    results = tmp_path / "results" / "results.json"  # as the session's, written by the suite
    results.parent.mkdir()
    results.write_text("{}\n")
    before = checks.read_bytes()
    monkeypatch.setenv("CAPSTONE_TAMPER_TARGETS", str(results))
    monkeypatch.setenv("CAPSTONE_TAMPER_PIDS", f"{os.getpid()}:{os.getppid()}")
    r = cache(tmp_path / "runs", bound=10).get(hostile("tamper.py"), BASE)
    import json

    done = json.loads((r.parsed.out / "tamper.json").read_text())
    # refused, or (for a suite that lies in /tmp) written to the run's private /tmp overlay:
    # either way the suite's files and the results file are unchanged for the session
    assert checks.read_bytes() == before and not (ROOT / "tampered.txt").exists(), done
    assert results.read_text() == "{}\n", done
    assert len(done["signals"]) == 2 and "allowed" not in done["signals"].values(), done
    assert r.outcome.returncode == 0 and not r.outcome.survivors, r.outcome.reason()


def test_a_run_cannot_undo_its_sandbox(contained, tmp_path, monkeypatch):
    """Issue 62: tests/hostile/undo.py remounts / writable, unmounts the mounts that hide a
    class, bind-mounts /, joins the root cgroup and makes one, writes /proc/sys, ptraces
    PID 1, takes uid 0 and writes into the suite's checkout: every attempt is refused, as the
    program holds no privilege (nsinit's drop to an unprivileged user, or the run user's)."""
    import json

    planted = ROOT / "tests" / "undo-was-here.txt"
    monkeypatch.setenv("CAPSTONE_TAMPER_TARGETS", str(planted))
    try:
        r = cache(tmp_path / "runs", bound=10).get(hostile("undo.py"), BASE)
        done = json.loads((r.parsed.out / "undo.json").read_text())
    finally:
        written = planted.exists()
        planted.unlink(missing_ok=True)
    assert not written, done
    assert len(done) == 9 and all(v.startswith("refused") for v in done.values()), done
    assert r.outcome.sandbox.get("privileges", "none").startswith("none"), r.outcome.sandbox


def test_links_a_run_plants_are_never_followed_by_the_suite(contained, tmp_path,
                                                            monkeypatch):
    """The suite (root) opens a run's files to the next run's user: never through a link."""
    secret = tmp_path / "secret"
    secret.mkdir(mode=0o700)
    (secret / "key").write_text("k")
    (secret / "key").chmod(0o600)
    monkeypatch.setenv("CAPSTONE_TAMPER_TARGETS", f"{secret}:{secret / 'key'}")
    r = cache(tmp_path / "runs", bound=10).get(hostile("links.py"), BASE)
    assert (r.parsed.out / "link0").is_symlink(), r.outcome.reason()
    assert oct(secret.stat().st_mode & 0o777) == oct(0o700)
    assert oct((secret / "key").stat().st_mode & 0o777) == oct(0o600)


def test_a_submission_that_is_not_python_is_not_graded_on_what_its_ranks_did(tmp_path):
    """Nothing loaded the observer (issue 61): no evidence either way, so the observed checks
    charge nothing and say in one line what the suite could not see."""
    r = cache(tmp_path, bound=10).get(hostile("shell.sh"), BASE)
    why = unseen_ranks(r)
    assert why is not None and "no process of the run loaded its observer" in why
    assert "\n" not in why and check_genuine_ranks(r) == []


@pytest.mark.long
@pytest.mark.slow
def test_tutorial_style_ranks_on_a_fixed_port_run_side_by_side(contained, tmp_path):
    """Two runs of a submission that uses MASTER_PORT=12355 at once, each in its own network
    namespace: neither joins the other's store; a 1 s deadlock threshold never fires while
    spawned ranks are still importing torch."""
    c = cache(tmp_path, bound=90, hang_after_s=1)
    specs = [RunSpec("tutorial-a", world_size=2, batch_size=8, steps=6, checkpoint_every=3),
             RunSpec("tutorial-b", world_size=2, batch_size=8, steps=6, checkpoint_every=3,
                     seed=1)]
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda s: c.get(hostile("tutorial.py"), s), specs))
    for r in runs:
        assert r.outcome.deadlock_s is None, r.outcome.reason()
        assert check_clean_exit(r) == [] and check_genuine_ranks(r) == []
        assert check_monotonic_loss(r) == []
        assert check_data_parallel(r, 8) == [] and check_reduced(r) == []


def test_without_namespaces_runs_fall_back_to_the_marker_scan_one_at_a_time(tmp_path):
    """The rule lives in the runner (contain.admitted), so every caller of `run_command` gets
    it, not only the run cache: two runs started at once under the marker scan never
    overlap; the marker scan still finds a marked helper."""
    env = dict(os.environ, **{contain.FORCE_VAR: contain.MARKER_SCAN})
    mode = subprocess.run([sys.executable, "-c", "from tests.harness.run import contain; "
                           "print(contain.mode())"], cwd=ROOT, env=env, capture_output=True,
                          text=True, check=True).stdout.strip()
    assert mode == contain.MARKER_SCAN
    stamp = ("import sys, time; from pathlib import Path; t0 = time.time(); time.sleep(0.4); "
             "Path(sys.argv[1]).write_text(f'{t0} {time.time()}')")
    watch = Watch(observe=False, contain=False)
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda i: run_command(
            [sys.executable, "-c", stamp, str(tmp_path / f"span{i}")], tmp_path / f"r{i}" / "out",
            30, watch=watch), range(2)))
    (a0, a1), (b0, b1) = (map(float, (tmp_path / f"span{i}").read_text().split())
                          for i in range(2))
    assert a1 <= b0 or b1 <= a0, "two runs overlapped without namespaces"
    c = cache(tmp_path, bound=2, grace_s=SURE_SURVIVOR_GRACE_S)
    c.watch = Watch(observe=True, contain=False, grace_s=SURE_SURVIVOR_GRACE_S)
    r = c.get(hostile("escape.py"), BASE)
    assert r.outcome.containment == contain.MARKER_SCAN and len(r.outcome.survivors) == 1


def test_the_run_user_alone_is_let_through_a_closed_home(tmp_path):
    """An interpreter under a home of mode 0700 (a pyenv or conda in /root) is out of the run
    user's reach; the suite grants that user, and no one else, passage through the closed
    directory (an ACL entry): it can then start what lies below, still cannot list the
    home, and another user is still refused."""
    user = contain.run_user()
    if user is None:
        pytest.skip(f"needs root: {contain.why_not_user()}")
    home = tmp_path / "home"
    (home / "env").mkdir(parents=True)
    tool = home / "env" / "tool.sh"
    tool.write_text("#!/bin/sh\necho ok\n")
    tool.chmod(0o755)
    home.chmod(0o700)

    def as_user(ids: tuple[int, int], *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, preexec_fn=contain.become(ids), cwd="/", text=True,
                              capture_output=True)

    with pytest.raises(PermissionError):
        as_user(user, str(tool))
    closed = contain.closed_dirs([tool])
    assert home in closed and tool.parent not in closed
    assert contain.grant_passage(user[0], closed) == closed
    assert as_user(user, str(tool)).stdout == "ok\n"
    assert as_user(user, "ls", str(home)).returncode != 0  # passage, not a listing
    entries = acl.read(home)  # what the kernel stores (getfacl prints the same)
    assert (acl.GROUP_OBJ, 0, acl.UNDEFINED_ID) in entries  # the group's and others' are
    assert (acl.OTHER, 0, acl.UNDEFINED_ID) in entries       # as before
    assert (acl.USER, 1, user[0]) in entries and (acl.MASK, 1, acl.UNDEFINED_ID) in entries
    with pytest.raises(PermissionError):
        as_user((contain.FALLBACK_UID + 1, contain.FALLBACK_UID + 1), str(tool))


def test_traces_survive_a_sigkilled_rank_and_ranks_ending_with_os_exit(reference_only, run):
    """Rank 1 is SIGKILLed at step 5: its calls up to then are on disk; its peers end through
    os._exit after the failure, and their Flight Recorder dumps are there too."""
    r = run(RunSpec("kill5", inject="kill@5"))
    assert r.outcome.returncode not in (0, None)
    ranks = r.observed.ranks() if r.observed else {}
    assert sorted(ranks) == [0, 1, 2, 3]
    assert len(ranks[1].backwards) == 4 and ranks[1].calls  # killed before step 5's backward
    assert ranks[1].flight_recorder is None
    assert all(ranks[k].flight_recorder for k in (0, 2, 3))


@pytest.mark.parametrize("program_pauses_gc", [False, True])
def test_the_memory_snapshot_walks_only_what_the_program_made(tmp_path, program_pauses_gc):
    """Once torch is imported, the observer moves torch's own objects out of gc's reach, so
    the snapshot's walk (and the copy-on-write it caused in forked ranks) skips them; a
    tensor the program makes afterwards is still walked. The collector, paused while torch
    imports, runs again for the program, unless the program had paused it itself."""
    probe = ("import gc; gc.disable() if int(__import__('sys').argv[1]) else None; "
             "import torch; t = torch.zeros(3); "
             "print(gc.get_freeze_count(), any(o is t for o in gc.get_objects()), "
             "gc.isenabled())")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tests" / "observer"),
               CAPSTONE_OBSERVE_DIR=str(tmp_path))
    frozen, seen, collecting = subprocess.run(
        [sys.executable, "-c", probe, str(int(program_pauses_gc))], env=env, check=True,
        capture_output=True, text=True).stdout.split()
    assert int(frozen) > 10_000 and seen == "True"
    assert collecting == str(not program_pauses_gc)


def test_state_the_program_froze_itself_is_still_walked(tmp_path):
    """gc.freeze() before forking ranks is Python's advice, and it takes what it freezes out
    of gc.get_objects(): optimizer state frozen so (a replicated Adam's moments, say) is
    still what the rank holds, and the snapshot counts it."""
    program = (
        "import gc, torch\n"
        "w = torch.randn(4, requires_grad=True)\n"
        "moments = [torch.zeros(50_000), torch.zeros(50_000)]  # 400 kB, frozen below\n"
        "gc.freeze()\n"
        "for _ in range(2):\n"
        "    (w * 2).sum().backward()\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tests" / "observer"),
               CAPSTONE_OBSERVE_DIR=str(tmp_path), CAPSTONE_OBSERVE_MEM="1,2")
    subprocess.run([sys.executable, "-c", program], env=env, check=True, capture_output=True,
                   timeout=60)
    from tests.harness.observe.traces import load_observation

    [p] = load_observation(tmp_path).processes
    [held] = [m for m in p.memory if "persistent_bytes" in m]
    assert held["same_storage_bytes"] >= 2 * 50_000 * 4, held


def test_what_the_observer_reads_stays_resizable_by_the_program(tmp_path):
    """The observer reads the tokens and the leaves of the first backward, a gradient a
    reduction sends at step 1, and the state of the first checkpoint and every buffer
    holding it. A program may then free any of them by resizing its storage to 0, as FSDP
    frees a gathered parameter; under the observer as without it (Tensor.numpy() would have
    marked each storage it read as not resizable, for good)."""
    program = (
        "import torch, torch.distributed as dist\n"
        f"dist.init_process_group('gloo', init_method='file://{tmp_path / 'rdv'}', rank=0, "
        "world_size=1)\n"
        "emb = torch.randn(8, 4, requires_grad=True)\n"
        "idx = torch.tensor([[1, 2, 3], [4, 5, 6]])\n"
        "emb[idx].sum().backward()\n"
        "grad = torch.randn(4096)\n"
        "dist.all_reduce(grad)\n"
        "state = {'master': torch.randn(4096), 'exp_avg': torch.randn(4096),\n"
        "         'exp_avg_sq': torch.rand(4096), 'step': 1}\n"
        f"torch.save(state, {str(tmp_path / 'shard.pt')!r})\n"
        "for t in (emb, emb.grad, idx, grad, state['master'], state['exp_avg']):\n"
        "    t.untyped_storage().resize_(0)\n"
        "print('resized')\n")
    (tmp_path / "obs").mkdir()
    env = dict(os.environ, PYTHONPATH=str(OBSERVER_DIR), CAPSTONE_OBSERVE_DIR=str(tmp_path / "obs"),
               CAPSTONE_OBSERVE_MEM="1,2")
    done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "resized" in done.stdout, done.stderr[-600:]
    from tests.harness.observe.traces import load_observation

    [p] = load_observation(tmp_path / "obs").processes  # and the observer did read them:
    assert p.work[0]["tokens"] == 6 and p.leaves, (p.work, p.leaves)
    assert p.state and p.state["tensors"]["master"]["holders"], p.state


def test_the_observer_reads_bytes_in_place_only_from_cpu_memory():
    """Bytes are read at a tensor's address only where that address is this process's
    memory: a device tensor (CUDA, meta) is refused as `Tensor.numpy()` refuses it, an error
    the observer records, rather than read from an address that is not memory here."""
    import torch

    calls = observer_module("_observer_calls")
    t = torch.arange(6, dtype=torch.int64).view(2, 3).t()  # not contiguous: read from a copy
    assert calls.crc(t) == zlib.crc32(t.contiguous().numpy().tobytes())
    with pytest.raises(TypeError):
        calls.crc(torch.empty(4, device="meta"))


def test_a_nan_in_the_gradients_is_read_from_the_leaves_the_pass_reached(monkeypatch):
    """Under `--inject nan@S` the observer asks after each backward whether its gradients
    are finite: from the leaves the pass reached (a plain tensor a functional model keeps
    counts as much as an nn.Parameter), without walking every object Python holds (~20-50
    ms a pass with torch loaded, 80 passes a run); the walk is left for a pass whose graph
    could not be read."""
    import gc

    import torch

    backward = observer_module("_observer_backward")
    weight, plain = torch.nn.Parameter(torch.ones(3)), torch.ones(3, requires_grad=True)
    for scale, finite in ((1.0, True), (float("nan"), False)):
        weight.grad = plain.grad = None
        loss = (weight * 2).sum() + (plain * scale).sum()
        reached: dict[int, object] = {}
        backward.work(loss, reached=reached)
        assert {id(weight), id(plain)} <= set(reached)
        loss.backward()
        with monkeypatch.context() as m:
            m.setattr(gc, "get_objects", lambda *a: pytest.fail("walked every object"))
            assert backward.finite_grads(None, reached) is finite
    assert backward.finite_grads(None, None) is True  # the walk: `weight`'s grad is finite
    weight.grad = torch.full((3,), float("nan"))
    assert backward.finite_grads(None, None) is False


SMALL_PROGRAM = """
import torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="file://{rdv}", rank=0, world_size=1)
emb = torch.randn(8, 4, requires_grad=True)
w = torch.randn(4, requires_grad=True)
w.register_hook(lambda g: dist.all_reduce(g) or g)  # communication overlapped with backward
idx = torch.tensor([[1, 2, 3], [4, 5, 6]])
state, gone = torch.zeros(1237), torch.zeros(1111)  # the memory snapshots are at these passes
torch.autograd.grad((emb[idx] @ w).sum(), [emb, w])  # the functional way
state = 0.9 * state + 1  # state updated out of place: a new tensor of the same size
del gone  # a tensor that dies and is not replaced
(emb[idx] @ w).sum().backward()
x = torch.zeros(6)
dist.all_gather([torch.empty(6)], x)  # each collective's output by its argument's role
dist.all_gather_into_tensor(torch.empty(6), x)
dist.gather(x, [torch.empty(6)], dst=0)
dist.scatter(x, [torch.ones(6)], src=0)
dist.reduce_scatter_tensor(torch.empty(6), x)
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def small_program(tmp_path_factory):
    """One process in a world of 1, observed: two backward passes (the memory snapshots)
    and a few collectives."""
    from tests.harness.observe.traces import load_observation

    tmp = tmp_path_factory.mktemp("small")
    (tmp / "obs").mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tests" / "observer"),
               CAPSTONE_OBSERVE_DIR=str(tmp / "obs"), CAPSTONE_OBSERVE_MEM="1,2")
    subprocess.run([sys.executable, "-c", SMALL_PROGRAM.format(rdv=tmp / "rdv")],
                   env=env, check=True, capture_output=True, timeout=60)
    [p] = load_observation(tmp / "obs").processes
    return p


def test_autograd_grad_is_a_backward_pass_and_hooks_collectives_are_recorded(small_program):
    """A program that takes its gradients with torch.autograd.grad (a functional MiniGPT, or
    torch.func.grad underneath) trains as surely as one calling .backward(): both are the
    observer's training clock and carry the tokens of the batch; a collective a gradient
    hook issues during the pass is recorded like any other."""
    p = small_program
    assert len(p.backwards) == 2
    assert [{k: w[k] for k in ("tokens", "rows")} for w in p.work] == [
        {"tokens": 6, "rows": 2}] * 2
    assert all(isinstance(w["token_crc"], int) for w in p.work)  # which rows: a checksum
    assert [c.op for c in p.calls[:2]] == ["all_reduce", "all_reduce"]
    assert all(p.backwards[k] < p.calls[k].t0 for k in range(2))


def test_each_collective_counts_what_it_sends_and_what_it_receives(small_program):
    """Inputs and outputs by the argument's role, whatever its name: all_gather's list and
    scatter's tensor are what the call fills (the list form was charged as sent, N+1 times
    the gather)."""
    found = {c.op: (c.numel_in, c.numel_out) for c in small_program.calls[2:]}
    assert found == {"all_gather": (6, 6), "all_gather_into_tensor": (6, 6),
                     "gather": (6, 6), "scatter": (6, 6), "reduce_scatter_tensor": (6, 6)}


def test_state_replaced_every_step_is_held_and_a_dead_tensor_is_not(small_program):
    """What a rank holds from one snapshot to the next: storages alive at both, and those
    replaced by a storage of the same size (a hand-written Adam's `m = b1 * m + ...` is a
    new tensor every step, yet the rank always holds it); a tensor that died unreplaced is
    not held."""
    [held] = [m for m in small_program.memory if "persistent_bytes" in m]
    replaced = held["persistent_bytes"] - held["same_storage_bytes"]
    assert 1237 * 4 <= replaced < 1237 * 4 + 1111 * 4


def test_a_leaf_s_row_and_column_checksums_are_those_of_its_rows_and_columns():
    """The heads check finds a rank's slice of a weight by the checksums of its rows and
    columns (the observer's `slices`, computed from one numpy view of the leaf): they must
    be the checksums of each row's and each column's bytes, in every float dtype, or no
    slice is ever found and the reference's tensor parallelism fails."""
    probe = """
import sys, zlib
import torch
sys.path.insert(0, sys.argv[1])  # the observer's folder, as a run's PYTHONPATH has it
import _observer_backward as backward
def crc(t):
    return zlib.crc32(t.contiguous().view(torch.uint8).numpy().tobytes())
for dtype in (torch.float32, torch.bfloat16, torch.float16):
    leaf = torch.randn(5, 3).to(dtype)
    [got] = backward.slices([leaf, torch.randn(4)])
    assert got == {"shape": [5, 3], "rows": [crc(r) for r in leaf],
                   "cols": [crc(c) for c in leaf.t()]}, (dtype, got)
print("ok")
"""
    env = {k: v for k, v in os.environ.items() if k != "CAPSTONE_OBSERVE_DIR"}
    out = subprocess.run([sys.executable, "-c", probe, str(ROOT / "tests" / "observer")],
                         capture_output=True, text=True, env=env, cwd=ROOT)
    assert out.stdout.strip() == "ok", out.stderr


def test_a_tensor_is_finite_exactly_where_each_of_its_elements_is():
    """What a rank puts into a collective is told non-finite (the rollback checks read it)
    from its sum, and element by element only where the sum is not finite: a NaN or an
    infinity anywhere is found, and values whose sum overflows are still finite."""
    import torch

    calls = observer_module("_observer_calls")
    big = torch.finfo(torch.float32).max
    cases = [torch.randn(1000), torch.full((4,), big), torch.zeros(0),
             torch.tensor([6e4, 6e4], dtype=torch.float16), torch.randn(8, 8).bfloat16(),
             torch.nn.Parameter(torch.ones(3))]
    for bad in (float("nan"), float("inf"), -float("inf")):
        t = torch.randn(1000)
        t[517] = bad
        cases += [t, t.view(10, 100).t(), torch.tensor([big, big, bad])]
    cases.append(torch.tensor([float("inf"), -float("inf")]))
    for t in cases:
        assert calls.finite(t) == bool(torch.isfinite(t).all()), t


def test_memory_is_walked_and_the_state_searched_only_where_a_check_reads_them(
        reference_only, run):
    """The memory walks and the search for the optimizer state cost each rank 0.1-0.3 s:
    the runs zero1_memory and the composed tensor-parallel check read have them (MEM1 here),
    the others (the one-rank parity run, the resumes, the faults, accumulation) do not."""
    on, off = run(MEM1), run(SINGLE)
    assert persistent_bytes(on) is not None and located(on), "MEM1: walked and searched"
    assert persistent_bytes(off) is None and not located(off), "SINGLE: neither"
    assert all(not s.measure_memory for s in (SINGLE, RESUMED, TP2DP2_RESUMED, MICRO,
                                              faulted("nan", 12), nemesis_nan(0)))
    assert all(s.measure_memory for s in (BASE, N2, N3, MEM1, TP2, TP2DP2))

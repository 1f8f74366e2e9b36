"""The suite inside graders' boxes (cgroups of a grader's size, tests/harness/run/cgbox.py): it
reads the box it is in (README's test command); and, marked `box` (minutes: `pytest -m box`,
the box tier of `.ci/run`): a run the box killed is rerun alone and never charged, a run the
box kills twice is not graded (and says why), a submission that allocates without bound or
sleeps in a throttled box is still charged, and the Gradescope autograder in Gradescope's
default box grades as on a big machine, with and without namespaces.

Each test is skipped, with the reason, where no cgroup box can be made (not root, or a
read-only cgroup file system, as in most Docker graders themselves)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.autograder import rehearse
from tests.harness.run import box as box_mod
from tests.harness.run import cgbox, contain

ROOT = Path(__file__).resolve().parents[1]
WHY_NOT = cgbox.usable()
needs_box = pytest.mark.skipif(bool(WHY_NOT), reason=WHY_NOT or "ok")
pytestmark = needs_box
REFERENCE = [sys.executable, "-m", "capstone"]
HOSTILE = ROOT / "tests" / "hostile"
MEMHOG = [sys.executable, str(HOSTILE / "memhog.py")]

# A grading process in the box: one run through the run cache, its outcome on stdout.
GRADER = textwrap.dedent("""
    import json, sys
    from dataclasses import asdict
    from pathlib import Path
    from tests.harness.run import box
    from tests.harness.run.runner import Watch
    from tests.harness.run.runs import RunCache, RunSpec
    box.protect_self()
    root, argv = Path(sys.argv[1]), json.loads(sys.argv[2])
    mem = box.process_cap_mb(box.read_box()) * 2**20
    bound = float(sys.argv[3]) if len(sys.argv) > 3 else 60.0
    nemesis = sys.argv[4] if len(sys.argv) > 4 else None  # the suite's own fault, KIND@S:R
    cache = RunCache(root, bound, Path.cwd(), mem, 64 * 2**20, Watch(observe=True, contain=True))
    spec = RunSpec("box", world_size=2, batch_size=8, steps=6, checkpoint_every=3,
                   nemesis=nemesis)
    if argv:  # none: only the session's start (the probe of how torch starts in the box)
        run = cache.get(tuple(argv), spec)
        said = {}
        if nemesis:
            from tests.harness.check.fault_checks import check_nemesis
            from tests.harness.run.runs import nemesis_of
            _, step, rank = nemesis_of(spec)
            said["nemesis"] = [asdict(v) for v in check_nemesis(run, step, rank)]
        print(json.dumps({**asdict(run.outcome), "cap_mb": cache.mem_bytes / 2**20, **said},
                         default=str))
""")
# Another tenant of the box (a run of another test, the grader's own growth): it holds
# `hold` MB until the kernel's OOM killer has struck in the box once, then lets go.
NEIGHBOUR = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    open("/proc/self/oom_score_adj", "w").write("-1000")  # never the one killed
    oom = Path(sys.argv[1]) / "memory.oom_control"
    if not oom.exists():
        oom = Path(sys.argv[1]) / "memory.events"
    def kills():
        return int([l for l in oom.read_text().splitlines() if l.startswith("oom_kill ")][0]
                   .split()[1])
    hold = bytearray(int(sys.argv[2]) * 2**20)
    for i in range(0, len(hold), 4096):
        hold[i] = 1
    Path(sys.argv[3]).write_text("holding")
    start, deadline = kills(), time.monotonic() + 120
    while kills() == start and time.monotonic() < deadline:
        time.sleep(0.01)
""")


def grade_one_run(box: cgbox.CgBox, tmp_path: Path, argv: list[str],
                  bound_s: float = 60.0, nemesis: str = "") -> dict:
    proc = subprocess.run([sys.executable, "-c", GRADER, str(tmp_path / "runs"),
                           json.dumps(argv), str(bound_s), *([nemesis] if nemesis else [])],
                          cwd=ROOT, capture_output=True, text=True, timeout=900,
                          preexec_fn=box.enter)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads(proc.stdout.splitlines()[-1]))


def test_the_suite_reads_the_box_it_is_in_and_plans_for_it():
    probe = ("import json; from tests.harness.run import box; b = box.read_box(); "
             "print(json.dumps([b.memory_limit_mb, b.cpu_quota, box.plan(b).runs, "
             "box.process_cap_mb(b)]))")
    seen = {}
    for mb, cpus in ((768, 0.5), (3072, 2.0)):
        with cgbox.CgBox(mb, cpus) as b:
            out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                                 text=True, check=True, preexec_fn=b.enter).stdout
        seen[mb] = json.loads(out)
    assert seen[768][:3] == [768, 0.5, 1]  # Gradescope's default: one run at a time
    assert seen[3072][:3] == [3072, 2.0, 2]
    assert 320 <= seen[768][3] < 768 - 250  # a process's cap leaves room for the session


@pytest.mark.box  # seconds each, in a box of its own: the box tier
def test_a_run_the_box_killed_is_rerun_alone_and_not_charged(tmp_path):
    """The first attempt meets a neighbour that fills the box: the kernel OOM-kills a rank
    (runs ask to be its first choice). The rerun, alone, passes and is what counts."""
    ready = tmp_path / "ready"
    with cgbox.CgBox(1000) as box:
        # The session starts before the neighbour fills the box, as a grading session does:
        # its probe of torch's start (PyPI's CUDA build needs its cap raised) meets no thrash.
        subprocess.run([sys.executable, "-c", GRADER, str(tmp_path / "runs"), "[]"], cwd=ROOT,
                       check=True, capture_output=True, timeout=600, preexec_fn=box.enter)
        neighbour = subprocess.Popen([sys.executable, "-c", NEIGHBOUR, str(box.dirs[0]), "820",
                                      str(ready)], preexec_fn=box.enter)
        while not ready.exists():
            assert neighbour.poll() is None, "the neighbour could not fill the box"
        try:
            outcome = grade_one_run(box, tmp_path, REFERENCE)
        finally:
            neighbour.kill()  # it lets go once the kernel struck; if it never did, now
            neighbour.wait(timeout=30)
    if outcome["returncode"] == 0 and not outcome["earlier"] and not outcome["oom_kills"]:
        pytest.skip("the kernel never had to kill: the run fitted beside the neighbour "
                    f"(its peak {outcome.get('peak_mb', 0):.0f} MB in a 1000 MB box holding "
                    "820 MB), so there was no kill to rerun after")
    assert outcome["earlier"] and "OOM killer" in outcome["earlier"][0], outcome
    assert outcome["returncode"] == 0 and not outcome["not_graded"], outcome


@pytest.mark.box  # seconds each, in a box of its own: the box tier
def test_a_run_the_box_kills_twice_is_not_graded_and_says_why(tmp_path):
    with cgbox.CgBox(120) as box:
        outcome = grade_one_run(box, tmp_path, REFERENCE)
    assert outcome["oom_kills"] > 0 and len(outcome["earlier"]) == 1, outcome
    why = outcome["not_graded"]
    assert "ran out of memory" in why and "limit 120 MB" in why, why
    assert "choose a larger autograder machine" in why


COUNT_OOM_KILLS = "from tests.harness.run import box; print(box.oom_kills())"


def test_a_kill_in_a_box_beside_this_one_is_not_counted_here():
    """Two gradings side by side, each in its box: the kernel kills in one, and the other's
    runs, failed or not, are not excused by it (the machine's counter moves; the box's not)."""
    with cgbox.CgBox(600) as here, cgbox.CgBox(80) as beside:
        def count() -> int:
            return int(subprocess.run([sys.executable, "-c", COUNT_OOM_KILLS], cwd=ROOT,
                                      check=True, capture_output=True, text=True,
                                      preexec_fn=here.enter).stdout)
        before = count()
        hog = subprocess.run([sys.executable, "-c", "b = bytearray(200 * 2**20)"],
                             preexec_fn=beside.enter, capture_output=True)
        assert hog.returncode == -9 and beside.oom_kills() > 0, hog  # the kernel struck there
        assert count() == before


@pytest.mark.box  # seconds each, in a box of its own: the box tier
def test_a_submission_that_allocates_without_bound_is_charged(tmp_path):
    """Its processes are capped below what the box holds: it fails on its own cap
    (MemoryError), the OOM killer never strikes, and nothing is excused or rerun. Where the
    torch installed cannot import under such a cap (PyPI's CUDA build, which every Python
    but 3.11 gets here), the box kills it instead: never a pass, and never blamed on the box
    alone."""
    with cgbox.CgBox(768, 0.5) as box:
        outcome = grade_one_run(box, tmp_path, MEMHOG)
    assert outcome["returncode"] not in (0, None), outcome
    if outcome["not_graded"]:  # the box struck first: only where the cap had to be raised
        assert outcome["cap_mb"] >= 768 * box_mod.HEADROOM - box_mod.SUITE_MB, outcome
        why = outcome["not_graded"]
        assert "cannot be told from a box too small" in why and "not your program's" not in why
        assert f"needs {outcome['cap_mb']:.0f} MB" in why, why
        return
    assert outcome["oom_kills"] == 0, outcome
    assert "MemoryError" in outcome["stderr_tail"], outcome["stderr_tail"][-500:]
    assert outcome["earlier"] == [] and outcome["not_graded"] == ""


@pytest.mark.box  # seconds each, in a box of its own: the box tier
@pytest.mark.long
def test_a_program_that_sleeps_in_a_throttled_box_is_still_charged(tmp_path):
    """Half a CPU throttles everything, but a program that waits forever uses none of it:
    its hang is its own (charged at the bound), not the box's, and is not rerun."""
    with cgbox.CgBox(1500, 0.5) as box:
        outcome = grade_one_run(box, tmp_path, [sys.executable, str(HOSTILE / "hang.py")],
                                bound_s=4.0)
    assert outcome["timed_out"] and outcome["returncode"] is None, outcome
    assert outcome["earlier"] == [] and outcome["not_graded"] == "", outcome


def _contained(monkeypatch: pytest.MonkeyPatch, containment: str) -> None:
    """Grade the box's runs under `containment` ("run-user": as if unshare were refused),
    or skip where this machine cannot."""
    if containment == "run-user":
        monkeypatch.setenv(contain.FORCE_VAR, contain.USER)
        if contain.run_user() is None:
            pytest.skip(f"no run user here: {contain.why_not_user()}")
    elif contain.mode() != contain.NAMESPACES:
        pytest.skip("no namespaces here")


@pytest.mark.box
@pytest.mark.parametrize("containment", ["namespaces", "run-user"])
def test_a_run_in_the_box_cannot_leave_it_or_undo_its_sandbox(tmp_path, monkeypatch,
                                                               containment):
    """Issue 62 in Gradescope's box (768 MB, half a CPU): tests/hostile/undo.py writes its pid
    into the root cgroup (out of the box and its memory limit), makes a cgroup, remounts,
    unmounts, bind-mounts, writes /proc/sys, ptraces, takes uid 0: every attempt refused,
    under namespaces and as the run user (unshare refused)."""
    _contained(monkeypatch, containment)
    with cgbox.CgBox(768, 0.5) as box:
        outcome = grade_one_run(box, tmp_path, [sys.executable, str(HOSTILE / "undo.py")],
                                bound_s=30.0)
    assert outcome["containment"] == {"namespaces": contain.NAMESPACES,
                                      "run-user": contain.USER}[containment], outcome
    written = Path(outcome["out"]) / "undo.json"
    assert written.is_file(), outcome
    done = json.loads(written.read_text())
    assert all(v.startswith("refused") for v in done.values()), done


@pytest.mark.box
@pytest.mark.parametrize("prober,containment", [("plan_prober", "namespaces"),
                                                ("plan_prober_libc", "run-user")])
def test_a_process_that_asks_the_plan_in_the_box_takes_the_fault_and_is_told(
        tmp_path, monkeypatch, prober, containment):
    """Issue 62 in Gradescope's box: a child forked from the launcher (by os.fork, or by
    libc's fork that skips Python's at-fork hooks) asks the fault plan every question a rank
    could ask. The plan answers the fault's own moment only, once: the prober learns it by
    taking it, the rank meets no fault, and the suite says so with the hint."""
    from tests.harness.check.fault_checks import PLAN_HINT

    _contained(monkeypatch, containment)
    with cgbox.CgBox(768, 0.5) as box:
        outcome = grade_one_run(box, tmp_path, [sys.executable, str(HOSTILE / f"{prober}.py")],
                                bound_s=60.0, nemesis="nan@5:1")
    probe = json.loads((Path(outcome["out"]) / "probe.json").read_text())
    assert probe["found"] == ["backward 5 1: nan@5:1"], probe
    [v] = outcome["nemesis"]
    assert v["found"] == "taken" and v["message"].endswith(PLAN_HINT), v


# A tenant that holds `hold` MB of the box for as long as it lives (never the one killed):
# what is left makes the run's ranks page torch's libraries in and out (thrashing), or the
# kernel kills one of them; which one it does is the kernel's choice.
HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    open("/proc/self/oom_score_adj", "w").write("-1000")
    hold = bytearray(int(sys.argv[1]) * 2**20)
    for i in range(0, len(hold), 4096):
        hold[i] = 1
    Path(sys.argv[2]).write_text("holding")
    time.sleep(3600)
""")


@pytest.mark.box
@pytest.mark.timeout(900)
def test_a_correct_run_in_a_thrashing_box_is_never_charged(tmp_path):
    """The box sits at its limit through both attempts: the run passes (slowly), or it is
    NOT GRADED with what the box did (thrashing or OOM kills); it never fails."""
    ready = tmp_path / "ready"
    with cgbox.CgBox(900, 0.5) as box:
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, "640", str(ready)],
                                  preexec_fn=box.enter)
        try:
            while not ready.exists():
                assert holder.poll() is None, "the holder could not fill the box"
            outcome = grade_one_run(box, tmp_path, [sys.executable,
                                                    str(HOSTILE / "tutorial.py")], 30.0)
        finally:
            holder.kill()
            holder.wait()
    if outcome["returncode"] != 0:
        assert outcome["earlier"], outcome  # rerun alone, longer
        assert outcome["not_graded"].startswith(("the grading machine starved",
                                                  "the grading machine ran out of memory"))


# -- the autograder in Gradescope's default box (minutes each: `pytest -m box`) --------------

SUBMISSIONS = ROOT / "tests" / "submissions"
GRADESCOPE = (768, 0.5)


@pytest.fixture(scope="module")
def autograder_zip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One suite seed for both sides of a comparison: a fresh seed per grading would give a
    wrong submission other verdicts on other data, in a box or not."""
    out = tmp_path_factory.mktemp("ag") / "autograder.zip"
    subprocess.run([sys.executable, "-m", "tests.autograder", "--entry", "python3 main.py",
                    "--suite-seed", "11", "--out", str(out)], cwd=ROOT, check=True,
                   capture_output=True)
    return out


@pytest.fixture
def outside_pytest_tmp() -> Iterator[Path]:
    """A folder for a rehearsal's /autograder outside pytest's temporary root, whose mode every
    new pytest session resets to 0700 (closing it to the run user), as /autograder is."""
    d = Path(tempfile.mkdtemp(prefix="capstone-rehearsal-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _verdicts(results: dict) -> dict[str, str]:
    """module -> passed/failed/not graded, from a results.json."""
    out: dict[str, str] = {}
    for t in results["tests"]:
        module = t["name"].split("::")[0].rsplit("/", 1)[-1]
        status = t.get("status", "not graded")
        if out.get(module) in (None, "passed"):
            out[module] = status
    return out


@pytest.mark.box
@pytest.mark.timeout(900)
@pytest.mark.parametrize("no_unshare", [False, True], ids=["namespaces", "unshare-refused"])
def test_the_reference_grades_100_in_gradescopes_default_box(autograder_zip,
                                                             outside_pytest_tmp, no_unshare):
    if no_unshare and contain.why_not_user():
        pytest.skip(f"no run user here: {contain.why_not_user()}")
    results, wall, _ = rehearse(autograder_zip, SUBMISSIONS / "reference", outside_pytest_tmp,
                                *GRADESCOPE, no_unshare=no_unshare)
    assert results["score"] == 100, [t["output"] for t in results["tests"]
                                     if t.get("status") != "passed"]
    assert results["extra_data"]["not_graded"] == []
    assert results["extra_data"]["containment"] == ("run-user" if no_unshare
                                                    else "namespaces")
    assert wall < 300, f"{wall:.0f}s: over 5 minutes in the 768 MB / 0.5 CPU box"


@pytest.mark.box
@pytest.mark.timeout(900)
def test_a_mistake_is_graded_in_the_box_as_on_a_big_machine(autograder_zip,
                                                            outside_pytest_tmp):
    if contain.why_not_user():
        pytest.skip(f"no run user here: {contain.why_not_user()}")
    big, _, _ = rehearse(autograder_zip, SUBMISSIONS / "no_broadcast", outside_pytest_tmp / "big")
    small, wall, _ = rehearse(autograder_zip, SUBMISSIONS / "no_broadcast",
                              outside_pytest_tmp / "box",
                              *GRADESCOPE, no_unshare=True)
    assert _verdicts(small) == _verdicts(big) and small["score"] == big["score"] < 100
    hints = "\n".join(t["output"] for t in small["tests"])
    assert "initial broadcast is missing" in hints
    assert wall < 300, f"{wall:.0f}s: over 5 minutes in the 768 MB / 0.5 CPU box"


def _weight(group: str) -> int:
    """About how many runs' time a group of the catalogue's tests takes: a mutant whose
    target kills a rank sits out the kill bounds, a tensor-parallel one makes the exercise's
    runs, and the two tests of the whole catalogue read every check's runs."""
    from tests.mutants.catalogue import MUTANTS

    targets = set(MUTANTS[group].targets) if group in MUTANTS else set()
    if "rank_killed" in targets or group in WHOLE_CATALOGUE:
        return 3
    return 2 if "tensor_parallel" in targets else 1


# The catalogue's tests that read every check's runs or kill ranks of the reference.
WHOLE_CATALOGUE = ("test_reference_passes_every_check",
                   "test_a_killed_rank_s_peers_get_as_long_as_the_program_s_speed_warrants")


def _catalogue_share(shard: int, shards: int) -> list[str]:
    """Every test of tests/test_fault_mutants.py (the catalogue's tests among them), as node
    ids, dealt to `shards` boxes: a mutant's tests together (they share its runs), the
    heaviest groups first, each to the box with the least so far: this shard's share
    (collected, so a test added there is dealt)."""
    listed = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-p",
                             "no:cacheprovider", "-m", "fault", "tests/test_fault_mutants.py"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    ids = [ln for ln in listed.stdout.splitlines() if ln.startswith("tests/test_fault_mutants")]
    assert ids, listed.stdout[-2000:] + listed.stderr[-2000:]
    groups: dict[str, list[str]] = {}
    for node in ids:  # test[mutant] -> mutant; a test without parameters is its own group
        name = node.split("::", 1)[1]
        groups.setdefault(name.split("[", 1)[1].rstrip("]") if "[" in name else name,
                          []).append(node)
    cost = {g: _weight(g) * len(nodes) for g, nodes in groups.items()}
    load: list[int] = [0] * shards
    share: list[list[str]] = [[] for _ in range(shards)]
    for group in sorted(groups, key=lambda g: (-cost[g], g)):
        least = load.index(min(load))
        load[least] += cost[group]
        share[least] += groups[group]
    return share[shard]


CATALOGUE_SHARDS = 6  # six boxes of half a CPU: four at once fill the two cores (-n 4), and
#                       the last two start as the first gradings end


@pytest.mark.box
@pytest.mark.timeout(1800)  # a sixth of the catalogue at half a CPU: ~2 minutes here
@pytest.mark.parametrize("shard", range(CATALOGUE_SHARDS))
def test_every_mutant_is_caught_in_gradescopes_default_box(tmp_path, outside_pytest_tmp, shard):
    """Every mutant of the catalogue caught by its targets with its hint, and the reference
    passing, in Gradescope's default box (each shard in a box of its own)."""
    share = _catalogue_share(shard, CATALOGUE_SHARDS)
    # the inner session's temporary root short: its plan sockets live there, and an AF_UNIX
    # path has 108 bytes (an xdist worker's tmp_path is longer: "AF_UNIX path too long")
    with cgbox.CgBox(*GRADESCOPE) as box, open(tmp_path / "log", "w") as out:
        m = box.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                     "-m", "fault",  # the catalogue's tests too (the seeds tier's, elsewhere)
                     *share, "--basetemp", str(outside_pytest_tmp / "t")], timeout_s=2400,
                    cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    log = (tmp_path / "log").read_text()
    assert m.returncode == 0 and m.oom_kills == 0, log[-3000:]
    assert "MISSING" not in log and f"{len(share)} passed" in log


@pytest.mark.box
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("no_unshare", [False, True], ids=["namespaces", "unshare-refused"])
def test_a_spawn_style_submission_is_never_charged_in_gradescopes_box(autograder_zip,
                                                                      outside_pytest_tmp,
                                                                      no_unshare):
    """The DDP tutorial's mp.spawn: four interpreters import torch each, at half a CPU in
    768 MB. Every test passes, or is NOT GRADED with the reason; none fails."""
    if no_unshare and contain.why_not_user():
        pytest.skip(f"no run user here: {contain.why_not_user()}")
    submission = outside_pytest_tmp / "spawn"
    submission.mkdir()
    shutil.copy(HOSTILE / "tutorial.py", submission / "main.py")
    results, _, _ = rehearse(autograder_zip, submission, outside_pytest_tmp / "root",
                             *GRADESCOPE, no_unshare=no_unshare)
    verdicts = _verdicts(results)
    assert "failed" not in verdicts.values(), [t["output"][:300] for t in results["tests"]
                                                if t.get("status") == "failed"]
    if results["extra_data"]["not_graded"]:
        assert results["output"].startswith("SCORE INCOMPLETE"), results["output"][:300]
    else:
        assert results["score"] == 100


@pytest.mark.box
@pytest.mark.timeout(900)
@pytest.mark.parametrize("no_unshare", [False, True], ids=["namespaces", "unshare-refused"])
def test_a_hostile_submission_in_gradescopes_box_leaks_nothing_and_harms_nobody(
        autograder_zip, outside_pytest_tmp, no_unshare):
    """Issue 72 through the Gradescope autograder, in its default box (768 MB, half a CPU):
    tests/hostile/left_class's runs try every leftover vector (links for the grader to read
    and write through, a traceback naming a root-only file and the suite's own runner.py, a
    forged pid and records, FIFO-free markup, manifests naming files outside, a linked
    checkpoint). After grading: no byte of the root-only file or of the hidden suite's
    source in what the student sees (results/), the file the run names unchanged, the
    process outside the run alive and unsignalled, the submission charged (never 100),
    and no process of the run users left."""
    import contextlib
    import hashlib
    import secrets
    import time

    import psutil

    if no_unshare and contain.why_not_user():
        pytest.skip(f"no run user here: {contain.why_not_user()}")
    sub = outside_pytest_tmp / "hostile"
    sub.mkdir()
    for p in [*HOSTILE.glob("left_*.py"), HOSTILE / "_common.py"]:
        shutil.copy(p, sub / p.name)
    shutil.copy(HOSTILE / "left_class" / "main.py", sub / "main.py")
    secret = f"ROOT-{secrets.token_hex(8)}"
    root_file = Path("/root") / f"capstone-box-canary-{secrets.token_hex(6)}"
    named = outside_pytest_tmp / "named.txt"
    log = outside_pytest_tmp / "canary.log"
    canary = subprocess.Popen([sys.executable, str(HOSTILE / "_canary.py"), str(log)],
                              start_new_session=True)
    try:
        root_file.write_text("".join(f"{secret} line {n}\n" for n in range(1, 8)))
        root_file.chmod(0o600)
        named.write_text(f"{secrets.token_hex(8)}\n")
        named.chmod(0o600)
        before = hashlib.sha256(named.read_bytes()).hexdigest()
        deadline = time.monotonic() + 20
        while not (log.is_file() and "ready" in log.read_text()) and \
                time.monotonic() < deadline:
            time.sleep(0.02)
        (sub / "targets.json").write_text(json.dumps({
            "LEFT_ROOT_CANARY": str(root_file), "LEFT_ROOT_FILE": str(root_file),
            "LEFT_ROOT_CANARY_SHA": hashlib.sha256(root_file.read_bytes()).hexdigest(),
            "LEFT_CANARY": str(named), "LEFT_CLASSMATE": str(root_file),
            "LEFT_CLASSMATE_DIR": str(outside_pytest_tmp), "LEFT_FORGED_DIR":
            str(outside_pytest_tmp), "LEFT_CANARY_PID": str(canary.pid)}))
        root = outside_pytest_tmp / "root"
        results, _, _ = rehearse(autograder_zip, sub, root, *GRADESCOPE, no_unshare=no_unshare)
        suite_lines = [ln for ln in (ROOT / "tests" / "harness" / "run" / "runner.py")
                       .read_text().splitlines()[:5] if len(ln.strip()) > 12]
        leaks = {}
        for top in (root / "results",):
            for p in top.rglob("*"):
                if p.is_file() and not p.is_symlink():
                    data = p.read_bytes()
                    hits = [s for s in [secret, *suite_lines] if s.encode() in data]
                    if hits:
                        leaks[str(p.relative_to(root))] = hits
        assert leaks == {}, leaks
        assert hashlib.sha256(named.read_bytes()).hexdigest() == before
        time.sleep(0.2)
        assert canary.poll() is None and log.read_text().split() == ["ready"], log.read_text()
        assert results["score"] < 100, results["score"]
        left = []  # of this grading (other boxes' runs may be alive beside it: -n 4)
        for p in psutil.process_iter(["username", "cwd", "cmdline"]):
            with contextlib.suppress(psutil.Error, TypeError):
                if p.info["username"] in (contain.RUN_USER, contain.NS_USER) and (
                        str(outside_pytest_tmp) in (p.info["cwd"] or "")
                        or str(outside_pytest_tmp) in " ".join(p.info["cmdline"] or [])):
                    left.append(p.pid)
        assert left == [], f"processes of the run users left: {left}"
    finally:
        canary.kill()
        canary.wait()
        root_file.unlink(missing_ok=True)

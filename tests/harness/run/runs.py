"""Which runs the suite asks for, and a cache that computes each distinct run once per
session, shared by every pytest-xdist worker and helper thread (helpers.py) through a file
lock.

Runs start only when they fit in the box beside the runs under way (tests/harness/run/box.py). A
run that failed while the kernel's OOM killer struck is the box's doing, not the
submission's: it is run again alone, once; if the box kills it again it is not graded, and
says why."""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import shutil
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from filelock import FileLock, Timeout

from tests.harness.observe.boundary import RunFolder
from tests.harness.observe.parse import parse_run
from tests.harness.observe.traces import load_observation
from tests.harness.observe.violations import Violation
from tests.harness.run import box, contain, stress, unsaid
from tests.harness.run.result import Run, checkpoint_dir
from tests.harness.run.runner import Outcome, Watch, run_command
from tests.harness.run.timeline import write_trace

# The suite's own files of a run, beside its folder (RUN/ -> RUN.outcome.json,
# RUN.timeline.json), never in it: the run owns its folder while it runs, and a file of that
# name there is the run's to forge or to make a link
OUTCOME, TIMELINE = ".outcome.json", ".timeline.json"


def own_file(d: Path, suffix: str) -> Path:
    """The suite's file `suffix` (OUTCOME, TIMELINE) of the run in folder `d`."""
    return d.parent / f"{d.name}{suffix}"


@dataclass(frozen=True)
class RunSpec:
    """The contract flags of one run (and, for a resume, the run and step it resumes)."""

    name: str
    world_size: int = 4
    batch_size: int = 4
    steps: int = 20
    checkpoint_every: int = 10
    seed: int = 0
    inject: str | None = None
    resume_from: tuple[RunSpec, int] | None = None
    extra: tuple[str, ...] = ()  # flags beyond the contract (the reference's exercises)
    nemesis: str | None = None  # a fault the suite makes in the run itself (no flag)
    # The observer's memory walks and state search: on only in the runs zero1_memory reads
    # (BASE, N2, N3 and MEM1, and the composed TP2 and TP2DP2); each costs a rank 0.1-0.3 s,
    # so a run no memory check reads,
    # the ones the suite's tests add included, goes without.
    measure_memory: bool = False

    def flags(self, resume_dir: Path | None) -> list[str]:
        f = ["--world-size", str(self.world_size), "--steps", str(self.steps),
             "--seed", str(self.seed), "--batch-size", str(self.batch_size),
             "--checkpoint-every", str(self.checkpoint_every)]
        if self.inject:
            f += ["--inject", self.inject]
        if resume_dir is not None:
            f += ["--resume", str(resume_dir)]
        return f + list(self.extra)

    def key(self, impl: tuple[str, ...], cwd: Path | None = None) -> str:
        """Names the run: the same argv in another folder is another program."""
        blob = json.dumps([list(impl), asdict(self), str(cwd or "")], sort_keys=True,
                          default=str)
        # A run the suite makes a fault in is not named after it: its directory is in the
        # run's --out, and the fault's kind, step and rank are the suite's to know
        name = "run" if self.nemesis else self.name
        return f"{name}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


# The runs the invariants read. Global batch N*B = 16 rows wherever parity is compared.
BASE = RunSpec("base", measure_memory=True)
SINGLE = RunSpec("single", world_size=1, batch_size=16)
# N2 and MEM1 have BASE's 4 rows per rank and 6 steps: with BASE they are the N = 1, 2, 4 of
# the measured memory (the observer's two points are backward calls 3 and 6). SINGLE cannot
# be the N = 1 point: its 16 rows hold 4x the activations, which the second measure (storages
# replaced by one of the same size) takes in, so N = 1 would look larger and the sharded part
# larger than it is: the estimate must only ever err low.
N2 = RunSpec("n2", world_size=2, batch_size=4, steps=6, checkpoint_every=3,
            measure_memory=True)
N3 = RunSpec("n3", world_size=3, batch_size=4, steps=3, checkpoint_every=3,
            measure_memory=True)
MEM1 = RunSpec("mem1", world_size=1, batch_size=4, steps=6, checkpoint_every=3,
              measure_memory=True)
RESUMED = RunSpec("resumed", resume_from=(BASE, 10))
# Exercise 2: N2 (2 ranks, 4 rows each, 6 steps) with each rank's 4 rows as 4 micro-batches
# of 1, compared with N2 itself (the invariants' run): step 1's gradient, the first 3 steps'
# reductions and the 6 steps' trajectory.
MICRO_BATCHES = 4
MICRO = RunSpec(f"micro{MICRO_BATCHES}", world_size=2, batch_size=4, steps=6,
                checkpoint_every=3, extra=("--micro-batches", str(MICRO_BATCHES)))
ONE_BATCH = N2  # the run MICRO is compared with
# Exercise 1: the heads over T = 2 ranks, alone (16 rows, 6 steps) and beside data
# parallelism of 2 (8 rows per group, the 20 steps its resume and rollback need): each the
# one-rank run's 16 rows (SINGLE).
TP = 2
TP2 = RunSpec("tp2", world_size=2, batch_size=16, steps=6, checkpoint_every=3,
              extra=("--tensor-parallel", str(TP)), measure_memory=True)
TP2DP2 = RunSpec("tp2dp2", world_size=4, batch_size=8, extra=("--tensor-parallel", str(TP)),
                 measure_memory=True)  # both: where the composed run's moments live
TP2DP2_RESUMED = RunSpec("tp2dp2-resumed", world_size=4, batch_size=8,
                         extra=TP2DP2.extra, resume_from=(TP2DP2, 10))


def tp_faulted(kind: str, step: int) -> RunSpec:
    """TP2DP2 with a fault the contract announces (its rollback, as a plain run's)."""
    return RunSpec(f"tp2dp2-{kind}{step}", world_size=4, batch_size=8, extra=TP2DP2.extra,
                   inject=f"{kind}@{step}")


def faulted(kind: str, step: int) -> RunSpec:
    return RunSpec(f"{kind}{step}", inject=f"{kind}@{step}")


FAULT_KINDS = ("nan", "spike")
# After the step-10 checkpoint and not right after it (the contract's promise: a program may
# keep a checkpoint pending until the next step proves it healthy); a spike at 19 shows at 20.
FAULT_STEPS = range(12, 20)


def nemesis_nan(seed: int, world_size: int = BASE.world_size) -> RunSpec:
    """The run in which the suite itself makes one rank's gradients of one step NaN, with no
    flag: step and rank drawn from the session's seed (step 13 on rank 2 under seed 0),
    after the first checkpoint and never at step 11. Never rank 0: the flag's NaN is rank
    0's (the contract), so a guard that judged rank 0's own gradient alone would pass both
    wherever this one fell there too."""
    step, rank = (13, min(2, world_size - 1)) if not seed else (  # 2 ranks: rank 1 alone
        random.Random(f"{seed}:nemesis").choice(FAULT_STEPS),
        random.Random(f"{seed}:nemesis-rank").randrange(1, world_size))
    return RunSpec(f"nemesis-nan{step}-rank{rank}", nemesis=f"nan@{step}:{rank}")


def nemesis_kill(seed: int, kind: str, world_size: int = BASE.world_size) -> RunSpec:
    """A run in which the suite SIGKILLs one rank (never rank 0): `kill`, as a step drawn
    after the first checkpoint starts (step 14 on rank 1 under seed 0); `killsave`, while it
    writes its shard of checkpoint 15 (rank 3 under seed 0), checkpointing every 5 steps so
    that steps 5 and 10 are there to fall back on."""
    draw = random.Random(f"{seed}:{kind}")
    rank = draw.randrange(1, world_size) if seed else {"kill": 1, "killsave": 3}[kind]
    if kind == "kill":
        step = draw.choice(FAULT_STEPS) if seed else 14
        return RunSpec(f"nemesis-kill{step}-rank{rank}", nemesis=f"kill@{step}:{rank}")
    return RunSpec(f"nemesis-killsave15-rank{rank}", checkpoint_every=5,
                   nemesis=f"killsave@15:{rank}")


def kills(spec: RunSpec) -> bool:
    """The suite kills a rank of this run (its bound follows the clean run's speed)."""
    return (spec.nemesis or "").startswith("kill")


def killed_by_the_suite(name: str) -> bool:
    """The run named so is one of `nemesis_kill`'s: it is meant not to finish."""
    return name.startswith("nemesis-kill")


# A run whose rank the suite killed must end within this long of the death (the runner stops
# it then): mp.spawn and torchrun end the other ranks at once, gloo fails their pending calls
# at once ("Connection closed by peer"): the corpus's correct programs (fork-style, the
# reference's exercises, a student's own launcher) end 0.06-0.14 s after the kill here.
# The bound follows the program's own speed: PROMPT_RUNS times its clean run (the base run,
# measured in the same box), at least PROMPT_FLOOR_S and at most PROMPT_S (both scaled by the
# box like the run bound). A program whose clean run takes 2 s is not waited for 20 s.
PROMPT_S = 20.0
PROMPT_FLOOR_S = 5.0
PROMPT_RUNS = 5.0


def kill_bound(clean_wall_s: float, factor: float = 1.0) -> float:
    """How long after the suite killed a rank the run may take to end."""
    return min(PROMPT_S * factor, max(PROMPT_FLOOR_S * factor, PROMPT_RUNS * clean_wall_s))


def resumed_after(killed: RunSpec) -> RunSpec:
    """The run that resumes a killed run from its step-10 checkpoint (the latest complete
    one: the kill comes at step 12 or later, a torn write at checkpoint 15)."""
    return RunSpec(f"{killed.name}-resumed", resume_from=(killed, 10))


def linked_checkpoint(checkpoint: Path) -> str:
    """Why the suite does not start a resume from `checkpoint` (a run's
    out/checkpoints/step-N), or "": where it, or a folder on the way to it beneath the run's
    folder, is a link the run made (to a classmate's folder, say), the resumed run would be
    handed that folder."""
    folder = RunFolder(checkpoint.parents[2])
    kind = folder.kind(checkpoint.relative_to(folder.root))
    if kind in ("dir", "missing"):
        return ""  # (a missing one: the resume itself says so, as the contract asks)
    return (f"the suite did not start this resume: the checkpoint it resumes from, "
            f"{checkpoint.relative_to(folder.root)}, is a {kind} in the run's folder: write "
            "your checkpoints, do not link them")


def resumable(source: Outcome, out: Path, step: int) -> bool:
    """A resume from `step` of the run that ended so, in `out`, can succeed: the run finished
    or wrote that checkpoint. (One that cannot would fail as that run's consequence.)"""
    return source.finished() or RunFolder(out.parent).kind(
        checkpoint_dir(Path(out.name), step)) == "dir"  # the run's folder: never a link


def nemesis_of(spec: RunSpec) -> tuple[str, int, int] | None:
    """(kind, step, rank) of a nemesis run's fault."""
    if not spec.nemesis:
        return None
    kind, rest = spec.nemesis.split("@")
    step, rank = rest.split(":")
    return kind, int(step), int(rank)


def fault_step(kind: str, seed: int) -> int:
    """Where a session injects `kind`: nan@12 and spike@15 under seed 0 (CI, the docs), else
    a step drawn from the session's seed, so no answer written for fixed steps can pass."""
    if not seed:
        return {"nan": 12, "spike": 15}[kind]
    return random.Random(f"{seed}:{kind}").choice(FAULT_STEPS)


def longest_first(specs: Iterable[RunSpec]) -> list[RunSpec]:
    """`specs` once each, the longest runs first (ranks x steps; a stable sort): the order in
    which a waiting worker starts them ahead (RunCache.plan), so that no long run is left to
    end a session on one worker while the other has nothing to do."""
    return sorted(dict.fromkeys(specs), key=lambda s: -s.world_size * s.steps)


def unconfined(outcome: Outcome) -> str:
    """Why a run is not graded where its sandbox failed (nsinit then never starts the
    submission: fail closed), else ""."""
    said = str(outcome.sandbox.get("filesystem", ""))
    if not said.startswith("not confined"):
        return ""
    return (f"the run's sandbox could not be set up ({said}), so the submission was not run: "
            "the grader's machine must allow the namespaces' mounts (or force the run-user "
            "containment), then regrade")


class RunCache:
    """`get(impl, spec)`: the finished run, computed by whichever worker asks first. A worker
    that would wait for a run another worker is computing starts one of the session's planned
    runs instead (`plan`), so that neither of a grading's workers stands idle."""

    def __init__(self, root: Path, timeout_s: float, cwd: Path, mem_bytes: int | None,
                 file_bytes: int | None, watch: Watch | None = None, seed: int = 0) -> None:
        watch = watch or Watch()
        mode = contain.mode() if watch.contain else contain.MARKER_SCAN
        if (mode == contain.USER or contain.program_user(mode) is not None) \
                and contain.reset_by_pytest(root):
            root = contain.user_root(root)  # a folder the run user can always reach
        self.root = root
        self.timeout_s = timeout_s
        self.cwd = cwd
        self.mem_bytes = mem_bytes
        self.file_bytes = file_bytes
        self.watch = watch
        self.seed = seed  # added to every run's seed: a grading session's own data and init
        root.mkdir(parents=True, exist_ok=True)
        capacity_mb = box.read_box().memory_mb * box.HEADROOM
        self.budget = box.MemoryBudget(root, capacity_mb)
        # The bound follows the box: half a CPU is not judged by a full CPU's clock.
        found = stress.probe(root, mem_bytes // 2**20 if mem_bytes else None) \
            if stress.in_a_box() else {"startup_s": 0.0}
        self.factor = stress.bound_factor(float(found["startup_s"]))
        if mem_bytes and found.get("cap_mb"):
            self.mem_bytes = int(found["cap_mb"]) * 2**20
        self.timeout_s = timeout_s * self.factor
        self.watch = replace(watch, hang_after_s=watch.hang_after_s * self.factor,
                             after_kill_s=watch.after_kill_s * self.factor,
                             exact_above_mb=capacity_mb * box.CHEAP_SHARE)
        # (impl, spec, whether a test reads it without reading the clean run first)
        self.ahead: list[tuple[tuple[str, ...], RunSpec, bool]] = []
        self._loaded: dict[tuple[Path, RunSpec, int], Run] = {}  # runs read (_load)

    def plan(self, impl: tuple[str, ...], reads: Iterable[Sequence[RunSpec]]) -> None:
        """The runs of `impl` this session's tests will read, each test's in order (their
        `reads` markers): a worker that would wait for another's run starts the first of them
        that is ready instead. A run that every test reads only after the clean run waits
        for that run to finish: after one that does not, the tests start nothing more."""
        reads = [list(r) for r in reads]
        free = {s for r in reads for s in (r[:r.index(BASE)] if BASE in r else r)}
        self.ahead = [(impl, self.seeded(s), s in free or s == BASE)
                      for s in longest_first(s for r in reads for s in r)]

    def _attempt(self, impl: tuple[str, ...], argv: list[str], d: Path,
                 alone: bool = False, nemesis: str | None = None,
                 after_kill_s: float | None = None, memory: bool = True) -> Outcome:
        """One run in a fresh directory, once it fits in the box (`alone`: no other run, and
        RERUN_SCALE times the bound and the hang watch)."""
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        scale = stress.RERUN_SCALE if alone else 1.0
        watch = replace(self.watch, hang_after_s=self.watch.hang_after_s * scale,
                        nemesis=nemesis or "", memory=memory,
                        after_kill_s=(after_kill_s or self.watch.after_kill_s) * scale)
        with self.budget.reserve(d.name, exclusive=alone):
            outcome = run_command(argv, d / "out", self.timeout_s * scale, self.cwd,
                                  self.mem_bytes, self.file_bytes, watch)
        self.budget.measured(outcome.peak_mb)
        return outcome

    def seeded(self, spec: RunSpec) -> RunSpec:
        """`spec` under this session's seed (and the run it resumes, too)."""
        if not self.seed:
            return spec
        resume = spec.resume_from
        return replace(spec, seed=spec.seed + self.seed,
                       resume_from=None if resume is None else (self.seeded(resume[0]),
                                                                resume[1]))

    def get(self, impl: tuple[str, ...], spec: RunSpec) -> Run:
        spec = self.seeded(spec)
        return self._get(impl, spec)

    def _get(self, impl: tuple[str, ...], spec: RunSpec, ahead: bool = True) -> Run:
        done = self._done(impl, spec)
        d = self._dir(impl, spec)
        if kills(spec) and not done.exists():
            # The clean run first (every kill check reads it anyway): its speed sets the bound.
            self._get(impl, self.seeded(BASE), ahead)
        with self._turn(d, ahead):
            if not done.exists():
                return self._compute(impl, spec, d)
        return self._load(spec, d, Outcome.load(done))

    @contextlib.contextmanager
    def _turn(self, d: Path, ahead: bool) -> Iterator[None]:
        """Hold the run's lock; while another worker holds it (computing the run), compute
        planned runs that are ready, and wait only when none is left."""
        lock = _lock(d)
        while True:
            try:
                lock.acquire(blocking=not (ahead and self.ahead))
                break
            except Timeout:
                if own_file(d, OUTCOME).exists() or not self.one_ahead():
                    lock.acquire()
                    break
        try:
            yield
        finally:
            lock.release()

    def planned_left(self) -> bool:
        """Some planned run has not ended yet (tests/harness/run/helpers.py)."""
        return any(not self._done(impl, spec).exists() for impl, spec, _ in self.ahead)

    def one_ahead(self) -> bool:
        """Compute the first planned run that nobody has started and whose inputs are there
        (the clean run a kill's bound and a resume need; a resume's checkpoint); False when
        there is none. Nothing is started after a clean run that did not finish, and a run
        the tests read only after it waits for it: the tests start nothing after it either
        (conftest's `run`), so a broken program's grading makes no run in vain."""
        for impl, spec, free in self.ahead:
            done = self._done(impl, spec)
            if done.exists() or not self._ready(impl, spec, free):
                continue
            lock = _lock(self._dir(impl, spec))
            try:
                lock.acquire(blocking=False)
            except Timeout:
                continue  # another worker is computing it
            try:
                if not done.exists():
                    self._compute(impl, spec, self._dir(impl, spec))
            finally:
                lock.release()
            return True
        return False

    def _done(self, impl: tuple[str, ...], spec: RunSpec) -> Path:
        """The file that says how the run ended, once it has."""
        return own_file(self._dir(impl, spec), OUTCOME)

    def _dir(self, impl: tuple[str, ...], spec: RunSpec) -> Path:
        """The run's folder (its --out, logs and the observer's traces: the run's own)."""
        return self.root / spec.key(impl, self.cwd)

    def _ready(self, impl: tuple[str, ...], spec: RunSpec, free: bool) -> bool:
        base = self._done(impl, self.seeded(BASE))
        if base.exists() and not Outcome.load(base).finished():
            return False
        if not base.exists() and (not free or kills(spec)):
            return False
        if spec.resume_from is not None:
            source, step = spec.resume_from
            done = self._done(impl, source)
            return done.exists() and resumable(Outcome.load(done),
                                               self._dir(impl, source) / "out", step)
        return True

    def _compute(self, impl: tuple[str, ...], spec: RunSpec, d: Path) -> Run:
        """Run `spec` in `d` (its lock held) and save how it ended."""
        after_kill = None
        if kills(spec):  # the clean run's speed
            clean = Outcome.load(self._done(impl, self.seeded(BASE)))  # sets the bound
            after_kill = kill_bound(clean.wall_s, self.factor)
        resume_dir = None
        if spec.resume_from is not None:
            base_spec, step = spec.resume_from
            resume_dir = self._get(impl, base_spec, False).checkpoint(step)
        argv = [*impl, "--out", str(d / "out"), *spec.flags(resume_dir)]
        refused = linked_checkpoint(resume_dir) if resume_dir is not None else ""
        if refused:  # the suite hands a resume its own folder, never a link a run made
            outcome = Outcome(argv, str(d / "out"), 2, False, 0.0, "", refused,
                              containment=contain.mode() if self.watch.contain
                              else contain.MARKER_SCAN, first_error=refused)
        else:
            outcome = self._attempt(impl, argv, d, nemesis=spec.nemesis,
                                    after_kill_s=after_kill, memory=spec.measure_memory)
        if outcome.ended_by_the_box():
            spoiled = outcome
            outcome = self._attempt(impl, argv, d, alone=True, nemesis=spec.nemesis,
                                    after_kill_s=after_kill, memory=spec.measure_memory)
            outcome.earlier = [f"{by_the_box(spoiled)}: {spoiled.reason()}"]
            if outcome.ended_by_the_box():
                outcome.not_graded = out_of_memory(max(
                    spoiled.peak_mb, outcome.peak_mb), self.mem_bytes) \
                    if outcome.oom_kills else \
                    starved(outcome)
        outcome.not_graded = outcome.not_graded or unconfined(outcome)
        if not outcome.not_graded and not outcome.finished():
            # the grading hid the reference and nobody said whether the class may use it
            outcome.not_graded = unsaid.not_graded(outcome.first_error)
        outcome.save(own_file(d, OUTCOME))
        run = self._load(spec, d, outcome)
        if run.observed is not None:
            write_trace(run, own_file(d, TIMELINE))
        return run

    def _load(self, spec: RunSpec, d: Path, outcome: Outcome) -> Run:
        """The run in `d`, read once per process: its files do not change once it has
        ended, and a grading's tests read each run 4-5 times (reading its traces and files
        anew for each was a fifth of a grading's pytest CPU, under cProfile: 1.1 of 5.1
        CPU-s). The checks are pure: none changes the Run it is given."""
        key = (d, spec, outcome.ended_ns)  # a run made again (its outcome anew) is read anew
        if key not in self._loaded:
            observed = load_observation(Path(outcome.observe_dir)) \
                if outcome.observe_dir else None
            parsed = parse_run(d / "out", spec.world_size)
            # what the boundary refused of the observer's folder is the run's doing (a
            # link, a FIFO, a record not of the observer's form): told as the contract's
            parsed.problems += [Violation("contract", None, None, "the observer's files as it "
                                          "wrote them", "refused", p)
                                for p in (observed.problems if observed else [])]
            self._loaded[key] = Run(spec.name, spec.steps, spec.world_size, outcome, parsed,
                                    observed)
        return self._loaded[key]


def _lock(d: Path) -> FileLock:
    """The lock of the run in `d`: whoever holds it computes the run, or reads it done."""
    return FileLock(str(d) + ".lock")


def timeline_of(run: Run) -> Path | None:
    """The run's timeline (Chrome trace JSON), where the run cache wrote one."""
    path = own_file(Path(run.outcome.out).parent, TIMELINE)
    return path if run.observed is not None and path.is_file() else None


def out_of_memory(peak_mb: float, cap_bytes: int | None = None) -> str:
    """Why a run the box killed twice is not graded, with what the box and the run had.
    Where each process's cap could not be set below the box (the torch installed needs
    more to import), a program that allocates without bound is killed by the box too, and
    the two cannot be told apart: said so, and never blamed on the box alone."""
    b = box.read_box()
    limit = f"limit {b.memory_limit_mb:.0f} MB" if b.memory_limit_mb else \
        f"{b.available_mb:.0f} MB available"
    said = f"the grading machine ran out of memory ({limit}, this run's peak " \
        f"{peak_mb:.0f} MB, twice)"
    cap_mb = (cap_bytes or 0) / 2**20
    if cap_mb and cap_mb >= b.memory_mb * box.HEADROOM - box.SUITE_MB:
        return (f"{said}; torch here cannot import under a per-process cap this box can "
                f"hold (it needs {cap_mb:.0f} MB), so a program that allocates without "
                "bound cannot be told from a box too small: the instructor should install "
                "torch's CPU build or choose a larger autograder machine, and regrade")
    return f"{said}: not your program's fault; the instructor should choose a larger " \
        "autograder machine and regrade"


def by_the_box(outcome: Outcome) -> str:
    """How the box spoiled an attempt, in one phrase."""
    if outcome.oom_kills:
        return "killed by the grading machine (the kernel's OOM killer struck)"
    return f"starved by the grading machine ({outcome.starved()})"


def starved(outcome: Outcome) -> str:
    """Why a run the box starved twice is not graded, with what the box did."""
    return (f"the grading machine starved this run twice ({outcome.starved()}; rerun alone "
            f"with {stress.RERUN_SCALE:g}x the bound: {outcome.reason()}): not your "
            "program's fault; the instructor should choose a larger autograder machine "
            "and regrade")

"""Run one implementation of run contract v1 as a black box, under a hard time bound.

The suite never imports the code under test. It starts the command in a new session with
a unique token in its environment, sends stdout/stderr to files (a stray process holding a
pipe open cannot stall the suite, and megabytes of output cannot fill memory), waits at most
`timeout_s`, and then kills every process that carries the token: the process group first,
then anything that left the group (setsid, double fork) but kept the environment.

With `observe`, the suite's observer is loaded into every Python process of the run
(tests/observer/), and the runner watches its traces while waiting: once every rank has sat
in an unfinished collective for `hang_after_s`, the run is deadlocked and is stopped then,
not at the bound. Before any kill it asks each rank for its stack (faulthandler, SIGUSR1)
and writes down where each rank is blocked. With `contain`, the run gets its own PID,
network and mount namespaces where the kernel allows, else as a dedicated user where the
suite is root (tests/harness/run/contain.py).

While it waits it also measures what the run holds (the proportional set size of its
processes, summed: forked ranks share torch's pages) and counts the kernel's OOM kills
(tests/harness/run/box.py), so that a run the box killed is not charged to the submission. Run
processes ask to be the OOM killer's first choice (oom_score_adj 1000): when the box runs
out, a run dies, not the suite that reports it.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import select
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import psutil

from tests.harness.observe import crash
from tests.harness.observe.boundary import Refused, RunFolder, replace_own
from tests.harness.observe.traces import (
    OBSERVER_DIR,
    ObservationReader,
    deadlocked,
    stacks,
    where_blocked,
)
from tests.harness.run import bounds, box, bytecode, contain, plan, stress, unsaid, unseen, warm
from tests.harness.run.contain import GRACE_S  # by name: Watch's field `contain` hides the module
from tests.harness.run.procfs import lingering, live_processes

TOKEN_VAR = "CAPSTONE_SUITE_RUN"
SESSION_VAR = "CAPSTONE_SUITE_SESSION"  # set per pytest session, inherited by xdist workers
TAIL_BYTES = 4096
STDERR_READ = 2_000_000  # what is searched of a run's stderr for its first traceback
MEMORY_SAMPLE_S = 1.0  # how often a run's memory is sampled


@dataclass
class Outcome:
    """How a run ended, as the suite saw it (serialisable: shared across xdist workers)."""

    argv: list[str]
    out: str
    returncode: int | None  # None: killed at the bound
    timed_out: bool
    wall_s: float
    stdout_tail: str = ""
    stderr_tail: str = ""
    alive_at_bound: list[int] = field(default_factory=list)  # pids still running at the bound
    survivors: list[int] = field(default_factory=list)  # pids that needed a kill after exit
    token: str = ""  # the environment marker every process of this run carried
    containment: str = contain.MARKER_SCAN  # how the run was contained
    deadlock_s: float | None = None  # stopped early: every rank blocked this long
    blocked: str = ""  # where each rank was blocked when the run was stopped (hang or bound)
    stacks: str = ""  # their faulthandler dumps
    observe_dir: str = ""  # the observer's traces ("" when not observed)
    sandbox: dict[str, Any] = field(default_factory=dict)  # what nsinit reported
    peak_mb: float = 0.0  # the most the run's processes held at once (PSS, sampled; their
    #                       resident sizes, a bound above it, where far below the box's)
    oom_kills: int = 0  # OOM kills the kernel counted while the run was alive
    earlier: list[str] = field(default_factory=list)  # how attempts the box spoiled ended
    not_graded: str = ""  # the box failed this run twice: why it is not graded
    ended_ns: int = 0  # wall clock (time.time_ns) when the run ended or was stopped
    after_kill_s: float = 0.0  # how long it was given to end after the suite killed a rank
    stress: dict[str, float] = field(default_factory=dict)  # the box's counters (stress.py)
    reached_collective: bool = False  # some rank of it entered a collective or a send
    first_error: str = ""  # the first exception (rank, error, line) or signal in its stderr
    crash_source: str = ""  # the submission's lines around the line that raised it
    plan_fired: bool = False  # the suite's fault plan answered a question (its fault fired)
    limit: str = ""  # the bound on the host it reached, named (bounds.py): it was stopped then

    def save(self, path: Path) -> None:
        """Atomically, and never through a link a run may have planted at `path`."""
        replace_own(path, json.dumps(asdict(self)).encode())

    def finished(self) -> bool:
        """The run ended by itself with exit 0: not a crash, a deadlock or the bound."""
        return self.returncode == 0 and not self.timed_out and self.deadlock_s is None

    def ended_by_the_box(self) -> bool:
        """The run did not end well while the kernel OOM-killed something, or while the box
        starved it (`starved`): the box's doing (the run's own processes are capped by
        --run-mem-mb and get MemoryError instead). A run stopped at a bound of its own
        (`limit`: its /tmp's tmpfs is memory) was not."""
        return self.returncode != 0 and not self.limit and (self.oom_kills > 0
                                                            or bool(self.starved()))

    def starved(self) -> str:
        """Why the box, not the program, failed this run (memory thrashing, or a CPU quota
        under which no rank reached its first collective), or "". A run that ended well
        was not starved, however tight the box, nor one stopped at a bound of its own."""
        if (self.returncode == 0 and not self.timed_out) or self.limit:
            return ""
        return stress.starved(self.stress, self.wall_s, self.reached_collective,
                              self.timed_out)

    @classmethod
    def load(cls, path: Path) -> Outcome:
        return cls(**json.loads(path.read_text()))

    def reason(self) -> str:
        """One line: how the run ended."""
        if self.limit:  # the suite stopped it there: that is how it ended
            return self.limit
        if self.deadlock_s is not None:
            return (f"deadlock: stopped after every rank sat {self.deadlock_s:.1f}s in an "
                    f"unfinished collective: {self.blocked}")
        if self.timed_out:
            where = f"; {self.blocked}" if self.blocked else ""
            return (f"killed after the {self.wall_s:.0f}s bound "
                    f"({len(self.alive_at_bound)} processes alive){where}")
        if self.returncode != 0:
            if self.first_error:  # the cause, not the launcher's last words
                return f"exit code {self.returncode}: {self.first_error}"
            last = [ln for ln in self.stderr_tail.splitlines() if ln.strip()]
            return f"exit code {self.returncode}: {last[-1][:200] if last else '(no stderr)'}"
        return "exit code 0"


def _tail(f: BinaryIO) -> str:
    """The last TAIL_BYTES of a log, read from the suite's own descriptor of it (never
    opened again by its name, which the run may have made a link meanwhile)."""
    size = os.fstat(f.fileno()).st_size
    return os.pread(f.fileno(), TAIL_BYTES, max(0, size - TAIL_BYTES)).decode(
        "utf-8", "replace")


def _head(f: BinaryIO, nbytes: int = STDERR_READ) -> str:
    """The first `nbytes` of a log, from the suite's own descriptor of it."""
    return os.pread(f.fileno(), nbytes, 0).decode("utf-8", "replace")


def session_prefix() -> str:
    """Token prefix of this suite session: runs of other sessions are never touched."""
    return os.environ.get(SESSION_VAR, "nosession") + "-"


def processes_with_token(token: str, prefix: bool = False) -> list[int]:
    """Pids whose environment carries `token` (every descendant of a run, wherever it went);
    with `prefix`, every run whose token starts with it."""
    needle = f"{TOKEN_VAR}={token}".encode()
    pids = []
    for pid, [env] in live_processes("environ"):
        values = env.split(b"\0")
        if needle in values if not prefix else any(v.startswith(needle) for v in values):
            pids.append(pid)
    return pids


def kill_pids(pids: Sequence[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _kill_all(pgid: int, token: str) -> None:
    """SIGKILL the run's process group, then whatever still carries its token."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        pids = processes_with_token(token)
        if not pids:
            return
        kill_pids(pids)
        time.sleep(0.05)


def _limits(mem_bytes: int | None, file_bytes: int | None,
            user: tuple[int, int] | None = None) -> Callable[[], None]:
    """Each process of the run: at most `mem_bytes` of private memory (RLIMIT_DATA: what it
    allocates, not the address space torch maps), files of at most `file_bytes`, the open
    files and processes of the configured bounds (tests/harness/run/bounds.py: a pids cgroup
    of the run's own where one can be made here, RLIMIT_NOFILE, RLIMIT_NPROC where the
    program's uid is the run's alone), first in line for the OOM killer, and the run user
    under that containment."""
    limits = bounds.configured()
    cage = bounds.pids_cgroup(limits.processes)  # made here: the child only joins it
    # As root the program runs as a uid of the run's own (the run user; nsinit's capstone-ns,
    # which the runs at once share) or as root, whom RLIMIT_NPROC does not bind; as any other
    # user it runs as the grader's own uid, whose every process NPROC would count
    nproc = bounds.rlimits(limits, own_uid=os.geteuid() == 0, shared=user is None)

    def apply() -> None:
        if mem_bytes:
            resource.setrlimit(resource.RLIMIT_DATA, (mem_bytes, mem_bytes))
        if file_bytes:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))
        bounds.apply_rlimits(nproc)
        if cage is not None:
            bounds.join(cage)  # before the program's first fork, while still root
        with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
        if user is not None:
            contain.become(user)()
    return apply


def held_mb(leader: int, exclude: set[int], uid: int | None = None,
            namespace: bool = False, exact_above_mb: float = 0.0) -> float:
    """What the run's processes hold now, MiB: the proportional set size summed over every
    process below `leader` (with `namespace`, every process of its PID namespace: a warm
    start's program is no descendant of the leader; under the run-user containment, every
    process of that user). Where their resident sizes sum to less than `exact_above_mb`,
    that sum is returned instead: a bound above the PSS (forked ranks' shared pages counted
    in each) read from statm, where the PSS walks each process's page tables (smaps_rollup,
    ~12 ms a process of a torch program: 0.85 CPU-s of a grading's 2.3 in its pytest
    process, under cProfile)."""
    try:
        procs = psutil.Process(leader).children(recursive=True)
    except psutil.Error:
        procs = []
    known = {p.pid for p in procs}
    more = list(contain.host_pids(leader).values()) if namespace else []
    if uid is not None:
        more += contain.user_processes(uid)
    for pid in more:
        if pid not in known:
            known.add(pid)
            # A process of the run may end between the listing and this look: not held
            with contextlib.suppress(psutil.Error):
                procs.append(psutil.Process(pid))
    procs = [p for p in procs if p.pid not in exclude]
    if exact_above_mb > 0:
        rss = 0
        for p in procs:
            with contextlib.suppress(psutil.Error):
                rss += p.memory_info().rss
        if rss / 2**20 < exact_above_mb:
            return rss / 2**20
    total = 0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            total += p.memory_full_info().pss
    return total / 2**20


@dataclass(frozen=True)
class Watch:
    """What the runner adds around a run: the observer, early deadlock stops, namespaces."""

    observe: bool = False
    hang_after_s: float = 5.0  # 0: never stop early
    nemesis: str = ""  # a fault the observer makes in the run (tests/observer/_observer_nemesis)
    after_kill_s: float = 20.0  # a run still alive this long after the nemesis killed a rank
    #                             is stopped (runs.kill_bound sets it per run)
    contain: bool = False
    memory: bool = True  # the observer walks memory and searches for the state (False: a run
    #                      that no memory check reads)
    # A fork server's socket (tests/harness/run/warm.py): a program this repository ships
    # starts from it, inside the run's namespaces ("": every run starts cold)
    warm: str = ""
    poll_s: float = 0.2
    # A run's memory as its processes' resident sizes where these sum to less than this
    # (MiB): far below what the box can give, the exact PSS would change no decision of the
    # memory budget (0: always the PSS)
    exact_above_mb: float = 0.0
    # How long a process may take to exit after the run ended before it is a survivor; the
    # suite's own tests of programs that certainly leave one shorten it
    grace_s: float = GRACE_S


def _outlived_kill(obs: Any, after_s: float) -> bool:
    """The nemesis killed a rank of this run more than `after_s` ago."""
    killed = [int(p.nemesis.get("t", 0)) for p in obs.processes
              if p.nemesis and str(p.nemesis.get("kind", "")).startswith("kill")]
    return bool(killed) and time.time_ns() - min(killed) > after_s * 1e9


def observed_environment(observe_dir: Path | None) -> dict[str, str]:
    """This environment as a run's Python processes get it: one OpenMP thread, no bytecode
    written, and (with `observe_dir`) the observer loaded, recording there. A warm start's
    fork server (tests/harness/run/warm.py) is set up the same way."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    env.pop(bytecode.PREFIX_VAR, None)  # nor reads the suite's (tests/harness/run/bytecode.py)
    env.pop(contain.HIDE_VAR, None)  # the session's, not the run's
    env.pop(unsaid.UNSAID_VAR, None)
    for var in plan.SEED_VARS:  # the fault seed would name the nemesis's step and rank
        env.pop(var, None)
    if observe_dir is not None:
        observe_dir.mkdir(parents=True, exist_ok=True)
        env["CAPSTONE_OBSERVE_DIR"] = str(observe_dir)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(OBSERVER_DIR), *filter(None, [os.environ.get("PYTHONPATH")])])
        env.setdefault("TORCH_FR_BUFFER_SIZE", "20000")
    return env


def start_warm_server(directory: Path) -> warm.Server:
    """A fork server (tests/harness/run/warm.py) whose processes have a run's environment,
    the observer recording into `directory`/observe until a run retargets it."""
    return warm.Server(directory, observed_environment(directory / "observe"))


def _environment(token: str, observe_dir: Path | None, home: Path | None = None,
                 nemesis: str = "", memory: bool = True,
                 user_name: str = contain.RUN_USER) -> dict[str, str]:
    env = observed_environment(observe_dir)
    env[TOKEN_VAR] = token
    env.pop(plan.SOCKET_VAR, None)
    if nemesis and observe_dir is not None:  # the socket that serves it, never the plan
        env[plan.SOCKET_VAR] = str(observe_dir.parent / "plan.sock")
    if home is not None:  # the run user's: its home is its run directory
        env.update(HOME=str(home), USER=user_name, LOGNAME=user_name)
    if observe_dir is not None and not memory:
        env["CAPSTONE_OBSERVE_MEM"] = ""
    return env


def _wait_for_end(proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Back when `proc` ends or after `timeout_s`. On a pidfd (Linux >= 5.3) the wake-up is
    immediate; Popen.wait(timeout) sleeps in steps growing to 50 ms, ~25 ms lost after each
    run. (`proc` is not reaped before this returns, so its pid is still its own.)"""
    try:
        ending = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout_s)
        return
    try:
        select.select([ending], [], [], timeout_s)
    finally:
        os.close(ending)


def _lingering(find: Callable[[], list[int]], grace_s: float) -> list[int]:
    """What `find` still finds `grace_s` after the run ended: a helper still exiting, such as
    multiprocessing's resource tracker, is not a survivor."""
    return lingering(find, grace_s)


def _signal_stacks(pids: list[int], leader: int, observe_dir: Path, token: str,
                   uid: int | None, wait_s: float = 0.3) -> None:
    """Ask every observed process for its faulthandler dump (SIGUSR1 is registered only where
    the observer loaded, so only those get it), and wait until they are written (at most
    `wait_s`: a process that cannot answer does not hold the run up). A pid is the run's
    word (its traces): only one verified a live process of this run is signalled
    (`_of_this_run`), never one <= 0, never another process of the machine."""
    asked = []
    for pid, host in _of_this_run(pids, leader, token, uid).items():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(host, signal.SIGUSR1)
            asked.append(f"stack-{pid}.txt")
    folder = RunFolder(observe_dir.parent)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if _dumped(folder, observe_dir.name, asked):
            time.sleep(0.02)  # the last lines of a dump
            return
        time.sleep(0.02)


def _dumped(folder: RunFolder, directory: str, names: list[str]) -> bool:
    """Whether each of `names` is a non-empty regular file in the run's `directory`: one
    listing through the boundary per look (no file opened, no link followed)."""
    try:
        have = {e.name: e for e in folder.entries(directory)}
    except Refused:
        return False
    return all((e := have.get(n)) is not None and e.kind == "file" and e.size > 0
               for n in names)


def _of_this_run(pids: list[int], leader: int, token: str, uid: int | None
                 ) -> dict[int, int]:
    """Of the pids a run's traces name, those that are live processes of this run: pid as
    the traces name it -> the host's pid. Under namespaces, a pid of the run's own PID
    namespace (the namespace says whose it is); else a process that carries the run's token
    or runs as the run's own user. A pid <= 0 (every process, a process group) is never
    one."""
    named = {p for p in pids if isinstance(p, int) and p > 0}
    ns_to_host = contain.host_pids(leader)
    if ns_to_host:
        return {p: ns_to_host[p] for p in named if ns_to_host.get(p, 0) > 0}
    ours = set(processes_with_token(token))
    if uid is not None:
        ours.update(contain.user_processes(uid))
    return {p: p for p in named if p in ours}


def _warm_connection(watch: Watch, mode: str, argv: list[str]) -> socket.socket | None:
    """A connection to the fork server where this run may start warm: a program this
    repository ships, observed (the server has the observer loaded), under namespace
    containment (the run's program joins them)."""
    if not (watch.warm and watch.observe) or mode != contain.NAMESPACES \
            or not warm.eligible(argv):
        return None
    with contextlib.suppress(OSError):
        return warm.connect(watch.warm)
    return None  # the server is gone: a cold start


def run_command(argv: Sequence[str], out: Path, timeout_s: float, cwd: Path | None = None,
                mem_bytes: int | None = None, file_bytes: int | None = None,
                watch: Watch | None = None) -> Outcome:
    """Run `argv` to completion, to a deadlock or to the bound; never leaves a process of
    it behind."""
    watch = watch or Watch()
    mode = contain.mode() if watch.contain else contain.MARKER_SCAN
    # whether it may run beside others (contain's rule), and what it may not see
    token = session_prefix() + uuid.uuid4().hex
    with contain.admitted(mode) as user, _unseen(user, cwd):
        try:
            return _run(argv, out, timeout_s, cwd, mem_bytes, file_bytes, watch, mode, user,
                        token)
        except BaseException:
            # Whatever the suite met while the run ran (its own error, a KeyboardInterrupt,
            # a record it could not read), the run's processes end with it: never a run
            # left alive in its own session, charged to the next student's run
            _end_marked(token, user)
            raise


def _end_marked(token: str, user: tuple[int, int] | None) -> None:
    """SIGKILL every process that carries the run's token, and every process of its user."""
    for _ in range(3):
        kill_pids(processes_with_token(token))
    if user is not None:
        contain.end_user(user[0])


def _unseen(user: tuple[int, int] | None, cwd: Path | None) -> contextlib.AbstractContextManager:
    """Under the run user, the session's hidden folders (a class's other submissions, the
    outputs) closed to that user for the run; under namespaces nsinit hides them."""
    hidden = contain.hidden_folders()
    if user is None or not hidden:
        return contextlib.nullcontext()
    return unseen.hidden_from(user[0], [Path(h) for h in hidden], Path(cwd or os.getcwd()))


def _run(argv: Sequence[str], out: Path, timeout_s: float, cwd: Path | None,
         mem_bytes: int | None, file_bytes: int | None, watch: Watch, mode: str,
         user: tuple[int, int] | None, token: str) -> Outcome:
    out.parent.mkdir(parents=True, exist_ok=True)
    observe_dir = out.parent / "observe" if watch.observe else None
    # the user the program runs as: the run user's lease, or nsinit's unprivileged user
    ids = user or contain.program_user(mode)
    env = _environment(token, observe_dir, out.parent if ids else None, watch.nemesis,
                       watch.memory, contain.RUN_USER if user else contain.NS_USER)
    plans = plan.PlanServer(out.parent, watch.nemesis) \
        if watch.nemesis and observe_dir is not None else None
    logs = out.parent / f"{out.name}.log"
    logs.mkdir(parents=True, exist_ok=True)
    stdout_path, stderr_path = logs / "stdout", logs / "stderr"
    # nsinit's report, in an unnamed file of the suite's that no process of the run can
    # reach (a name in the run's directory could be a link the program planted)
    report = tempfile.TemporaryFile()  # noqa: SIM115 (closed by the `with` of the logs)
    conn = _warm_connection(watch, mode, list(argv))
    passed = (conn.fileno(),) if conn is not None else ()
    inner = warm.client_argv(list(argv), passed[0]) if passed else list(argv)
    programs = contain.programs_folders(list(argv)) if ids is not None else []
    # what the run reads beside its own folder (a resume's checkpoint): shown through the
    # session's hidden folders
    named = contain.named_folders(list(argv)) if ids is not None else []
    full = contain.wrap(inner, out.parent, report.fileno(), watch.grace_s, passed,
                        Path(cwd or os.getcwd()), ids, [*programs, *named]) \
        if mode == contain.NAMESPACES else inner
    if ids is not None:
        contain.open_to(out.parent, ids, Path(cwd or os.getcwd()), programs)
        if observe_dir is not None:
            contain.readable(OBSERVER_DIR)  # its sitecustomize must load in every process
    ooms_before, stress_before = box.oom_kills(), stress.read()
    peak = 0.0
    t0 = time.monotonic()
    # made anew (O_EXCL: never through a name planted before), read back through these
    # descriptors only
    with open(stdout_path, "xb+") as so, open(stderr_path, "xb+") as se, report:
        try:
            proc = subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=so, stderr=se,
                                    cwd=cwd, env=env, start_new_session=True,
                                    preexec_fn=_limits(mem_bytes, file_bytes, user),
                                    pass_fds=(*passed, report.fileno())
                                    if mode == contain.NAMESPACES else passed)
        except OSError as e:
            if plans is not None:
                plans.close()
            return Outcome(list(argv), str(out), 127, False, 0.0, "", f"cannot start: {e}",
                           token=token, containment=mode)
        finally:
            if conn is not None:
                conn.close()  # the client holds it now
        timed_out, alive, deadlock_s, blocked, dumps = False, [], None, "", ""
        deadline = t0 + timeout_s
        wrappers = contain.wrapper_pids(proc.pid) if mode == contain.NAMESPACES else set()
        next_sample = t0 + MEMORY_SAMPLE_S / 2
        # Each poll reads only what the run's processes wrote since the last one
        reader = ObservationReader(observe_dir) if observe_dir is not None else None
        started = False  # a rank was seen in a collective: its model and state are built
        limit = ""  # the bound on the host the run reached (bounds.py), named
        while proc.poll() is None:
            now = time.monotonic()
            obs = reader.read() if reader is not None else None
            if not started and obs is not None and any(p.calls for p in obs.processes):
                # A run shorter than the first timed sample (a warm start on a fast day
                # ends in ~0.4 s) is still measured once it holds what it trains with
                started, next_sample = True, now
            if now >= next_sample:  # reading PSS walks the processes' page tables: not often
                # Before the memory: a fork bomb's thousand processes make that walk slow
                limit = limit or bounds.reached(out.parent, proc.pid,
                                                user[0] if user else None,
                                                mode == contain.NAMESPACES)
                if limit:
                    deadline = now  # stopped as at the bound, the limit named
                peak = max(peak, held_mb(proc.pid, wrappers, user[0] if user else None,
                                         mode == contain.NAMESPACES, watch.exact_above_mb))
                next_sample = now + MEMORY_SAMPLE_S
            stuck = deadlocked(obs, time.time_ns(), watch.hang_after_s) \
                if obs is not None and watch.hang_after_s > 0 else None
            if obs is not None and watch.nemesis.startswith("kill") and plans is not None \
                    and plans.fired and _outlived_kill(obs, watch.after_kill_s):
                deadline = now  # a run that outlives its killed rank is not waited for
            if stuck is not None or now >= deadline:
                if obs is not None and observe_dir is not None:
                    _signal_stacks([p.pid for p in obs.processes], proc.pid, observe_dir,
                                   token, user[0] if user else None)
                    obs = reader.read() if reader is not None else obs
                    blocked, dumps = where_blocked(obs), stacks(obs)
                    if stuck is not None and now < deadline and not all(
                            p.open_call() for p in obs.ranks().values()):
                        # A rank left its call while the stacks were taken: it was slow (a
                        # starved box), not blocked. Watch on; never call it a deadlock.
                        blocked = dumps = ""
                        _wait_for_end(proc, min(watch.poll_s, max(0.0, deadline - now)))
                        continue
                timed_out, deadlock_s = stuck is None, stuck
                alive = [p for p in processes_with_token(token) if p not in wrappers] \
                    or [proc.pid]
                break
            _wait_for_end(proc, min(watch.poll_s, max(0.0, deadline - now)))
        # The leader is done (or stopped): whatever else carries the token goes too.
        ended_ns = time.time_ns()
        stopped = timed_out or deadlock_s is not None
        def left() -> list[int]:  # the run's marked processes, and any of its user's
            found = set(processes_with_token(token))
            if user is not None:
                found.update(contain.user_processes(user[0]))
            return sorted(found)

        survivors = [] if stopped else _lingering(left, watch.grace_s)
        _kill_all(proc.pid, token)
        if user is not None:
            contain.end_user(user[0])
        if ids is not None:
            os.chown(out.parent, 0, 0)  # nothing of the run's may change its directory now
            contain.readable(out.parent, again=True, own=True)  # a resume reads its files
        proc.wait()
        if plans is not None:
            plans.close()
        stdout_tail, stderr_tail = _tail(so), _tail(se)
        stderr_head = _head(se) if proc.returncode != 0 else ""
        said = os.pread(report.fileno(), 1 << 20, 0) if mode == contain.NAMESPACES else b""
    wall = time.monotonic() - t0
    ooms, pressure = box.oom_kills() - ooms_before, stress.since(stress_before)
    seen = reader.read(final=True) if reader is not None else None
    reached = seen is not None and any(p.calls for p in seen.processes)
    sandbox: dict[str, Any] = {}
    if said:
        with contextlib.suppress(ValueError, TypeError, KeyError):
            sandbox = json.loads(said)  # nsinit's own words, from the suite's own file
            survivors += [s["pid"] for s in sandbox.get("survivors", [])]
    # A nemesis record is the run's to write too (a trace file is its process's): a kill is
    # the suite's only where its plan answered
    fired = plans is not None and plans.fired
    killed = next((p.nemesis for p in seen.processes if p.nemesis and str(
        p.nemesis.get("kind", "")).startswith("kill")), None) \
        if seen is not None and fired else None
    crashed = crash.first_exception_of(
        stderr_head, [p.raised for p in seen.processes if p.raised] if seen is not None
        else None, killed) if proc.returncode != 0 else crash.Crash()
    return Outcome(list(argv), str(out), None if stopped else proc.returncode, timed_out, wall,
                   stdout_tail, stderr_tail, alive, survivors, token, mode,
                   deadlock_s, blocked, dumps, str(observe_dir or ""), sandbox,
                   round(peak, 1), ooms, ended_ns=ended_ns, stress=pressure,
                   after_kill_s=watch.after_kill_s if watch.nemesis.startswith("kill")
                   else 0.0,
                   reached_collective=reached,
                   first_error=crashed.said,
                   crash_source=crashed.around(Path(cwd or os.getcwd()).resolve()),
                   plan_fired=plans is not None and plans.fired, limit=limit)


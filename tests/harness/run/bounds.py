"""Bounds on what a run takes of the host beside memory and time, as IOI's isolate gives a
box: its processes and threads, each process's open files, the bytes and inodes of its
directory, and its files in /tmp and /dev/shm.

Where the kernel can hold a bound, it holds it, and a run at it is refused (fork fails with
EAGAIN, open with EMFILE, a write with ENOSPC): a pids cgroup of the run's own (`pids_cgroup`)
wherever the suite may make one (root, cgroup v1's pids hierarchy or a v2 with the controller
delegated), whatever uid the program has; RLIMIT_NPROC where the program's uid is the run's
alone (`rlimits`); RLIMIT_NOFILE always; under namespaces one tmpfs of `tmp_mb` and `inodes`
for the run's /tmp and /dev/shm (nsinit.py). The runner samples the run once a second
(`reached`) and stops a run at or past any bound as at its deadline, the limit named (`over`).
The bytes and inodes of a run's directory have no hard bound (isolate's are disk quotas,
which few graders' file systems have), nor, under the run user, its files in the host's /tmp:
those are bounded by that sample, one second of writing late.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import resource
import stat
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import psutil

from tests.harness.run import contain
from tests.harness.run.box import CGROUP_ROOT, own_cgroups

BOUNDS_VAR = "CAPSTONE_RUN_BOUNDS"  # JSON of Bounds' fields: what runs get instead (tests)
MB = 2**20
# Measured on a correct 4-rank run (the reference `python -m capstone --world-size 4 --steps
# 20`, the corpus's spawn, torchrun and subprocess launchers, tests/submissions/ring, under
# the observer, 2 cores): 5-6 processes, 17-22 processes and threads at once (a run gets
# OMP_NUM_THREADS=1), at most 31 open files in one process (gloo's sockets to 3 peers,
# torch's libraries), 32-34 files and folders and 1.2-1.3 MB in its directory (metrics, two
# checkpoints of 4 shards, the observer's traces), under 0.1 MB in /tmp. Each default leaves
# 20x at least: a program that asks torch for a thread per core on a 64-core grader (4 x 64)
# still fits in 512.
PROCESSES, OPEN_FILES, DISK_MB, INODES, TMP_MB = 512, 1024, 1024, 20_000, 512
# Runs of nsinit's one user (capstone-ns) at once on a machine that its RLIMIT_NPROC leaves
# room for: that limit counts the user's every process, each run's own bound is its cgroup
SHARED_RUNS = 4
PIDS_PREFIX = "capstone-run-"  # a run's pids cgroup: PREFIX + the maker's pid + a nonce
FRESH_S = 60.0  # a cgroup no sample has seen joined, this young, may await its first process


@dataclass(frozen=True)
class Bounds:
    """What one run may take of the host (each past its limit stops the run, named)."""

    processes: int = PROCESSES  # processes and threads of the run at once
    open_files: int = OPEN_FILES  # open files of each of its processes (RLIMIT_NOFILE)
    disk_mb: int = DISK_MB  # bytes its directory holds
    inodes: int = INODES  # files and folders in its directory, and in its /tmp and /dev/shm
    tmp_mb: int = TMP_MB  # bytes its files in /tmp and /dev/shm hold

    def to_env(self) -> str:
        """As $CAPSTONE_RUN_BOUNDS holds it (`configured` reads it back)."""
        return json.dumps(asdict(self))


def configured(environ: Mapping[str, str] | None = None) -> Bounds:
    """The bounds runs get: $CAPSTONE_RUN_BOUNDS's fields (those it leaves out keep their
    default), else the defaults. A field it does not know is an error, not a bound let go."""
    raw = (os.environ if environ is None else environ).get(BOUNDS_VAR, "")
    if not raw:
        return Bounds()
    given = json.loads(raw)
    known = {f.name for f in fields(Bounds)}
    if not isinstance(given, dict) or not set(given) <= known:
        raise ValueError(f"${BOUNDS_VAR}: expected a JSON object of {sorted(known)}: {raw}")
    return Bounds(**{k: int(v) for k, v in given.items()})


def rlimits(bounds: Bounds, own_uid: bool, shared: bool = False) -> dict[int, int]:
    """The rlimits for each process of a run: RLIMIT_NOFILE; RLIMIT_NPROC only where
    `own_uid`, the program's uid being the run's alone (the run user; nsinit's capstone-ns
    under namespaces as root). NPROC counts every process and thread of the real uid: on the
    grader's own uid (the marker scan, a non-root grader's user namespace) it would count the
    grader's. Where that uid is `shared` by the runs at once (capstone-ns), NPROC bounds their
    sum, SHARED_RUNS runs' worth: each run's own bound is its pids cgroup."""
    found = {resource.RLIMIT_NOFILE: bounds.open_files}
    if own_uid:
        # shared: never below the defaults' room, so that a run given small bounds (the
        # suite's own tests) does not make the runs beside it count against them
        found[resource.RLIMIT_NPROC] = max(bounds.processes, PROCESSES) * SHARED_RUNS \
            if shared else bounds.processes
    return found


def apply_rlimits(limits: Mapping[int, int]) -> None:
    """Set each limit, soft and hard (a preexec function's step): never above a hard limit
    this process may not raise."""
    for which, value in limits.items():
        _, hard = resource.getrlimit(which)
        if os.geteuid() != 0 and hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(which, (value, value))


# -- the pids cgroup --------------------------------------------------------------------------
_MADE: dict[Path, float | None] = {}  # this process's cgroups -> when made (None: joined)
_LOCK = threading.Lock()  # helper threads make runs at once (tests/harness/run/helpers.py)


def _hierarchy() -> tuple[Path, str] | None:
    """The pids hierarchy's mount and its key in /proc/PID/cgroup (v1's "pids", v2's "")."""
    v1 = CGROUP_ROOT / "pids"
    if (v1 / "cgroup.procs").is_file() and not (v1 / "cgroup.controllers").is_file():
        return v1, "pids"
    if (CGROUP_ROOT / "cgroup.controllers").is_file():
        return CGROUP_ROOT, ""
    return None


def _parent() -> Path | None:
    """Where runs' pids cgroups are made: below this process's own."""
    found = _hierarchy()
    own = own_cgroups()
    if found is None or found[1] not in own:
        return None
    here = found[0] / own[found[1]].lstrip("/")
    if found[1] == "" and "pids" not in _read(here / "cgroup.controllers").split():
        return None  # v2 that does not delegate the controller here
    return here


def pids_cgroup(limit: int) -> Path | None:
    """A pids cgroup for one run, of at most `limit` tasks (processes and threads), the hard
    bound whatever uid the program has; None where the suite cannot make one here (not root,
    no pids controller, a v2 cgroup that holds processes). Earlier runs' go first (`sweep`)."""
    parent = _parent()
    if parent is None:
        return None
    sweep(parent)
    made = parent / f"{PIDS_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        made.mkdir()
    except OSError:
        return None
    try:
        if not (made / "pids.max").is_file():  # v2: the controller is not on for children
            (parent / "cgroup.subtree_control").write_text("+pids")
        (made / "pids.max").write_text(str(limit))
    except OSError:
        with contextlib.suppress(OSError):
            made.rmdir()
        return None
    with _LOCK:
        if not _MADE:
            atexit.register(sweep, None, True)
        _MADE[made] = time.monotonic()
    return made


def join(cgroup: Path) -> None:
    """Move the calling process into `cgroup` (a preexec function's step, while root). Where
    the kernel refuses, the run keeps its rlimits and the runner's sample for a bound."""
    with contextlib.suppress(OSError):
        (cgroup / "cgroup.procs").write_text(str(os.getpid()))


def sweep(parent: Path | None = None, everything: bool = False) -> None:
    """Remove the pids cgroups of runs that ended: this process's (but one so young that its
    run may not have joined it yet; all of them `everything`, at exit) and those whose maker
    is gone. The kernel refuses to remove one that still holds a process: it is kept."""
    parent = parent or _parent()
    if parent is None:
        return
    with _LOCK, contextlib.suppress(OSError):
        for d in parent.glob(f"{PIDS_PREFIX}*"):
            maker = d.name[len(PIDS_PREFIX):].split("-")[0]
            made = _MADE.get(d)
            if maker == str(os.getpid()):
                # a young one is left unless a process was seen in it (a sample, or the
                # kernel's peak where it keeps one): its run may not have joined it yet
                peak = _read(d / "pids.peak").strip()
                if not everything and made is not None and not (peak.isdigit() and
                                                                 int(peak) > 0) and \
                        time.monotonic() - made < FRESH_S:
                    continue
            elif not maker.isdigit() or psutil.pid_exists(int(maker)):
                continue  # another live session's
            with contextlib.suppress(OSError):
                d.rmdir()
                _MADE.pop(d, None)


def cgroup_of(pid: int) -> Path | None:
    """The run's pids cgroup process `pid` is in; None where it is in none of them (its join
    failed, no cgroup was made) or is gone."""
    found = _hierarchy()
    if found is None:
        return None
    for line in _read(Path(f"/proc/{pid}/cgroup")).splitlines():  # psutil has no cgroups
        _, controllers, path = line.split(":", 2)
        if (controllers.split(",") if controllers else [""]).count(found[1]):
            d = found[0] / path.lstrip("/")
            return d if d.name.startswith(PIDS_PREFIX) else None
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def hard_bound() -> str:
    """"" where a run's processes get a hard bound here (a pids cgroup, or RLIMIT_NPROC on a
    uid of the run's own, as root), else why not."""
    if os.geteuid() == 0:
        return ""
    made = pids_cgroup(PROCESSES)
    if made is None:
        return ("the suite is not root and can make no pids cgroup here: a run's processes "
                "are bounded by the runner's sample alone")
    with contextlib.suppress(OSError):
        made.rmdir()
    return ""


# -- what a run holds ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Count:
    """A run's processes now."""

    processes: int  # processes and threads (the cgroup's limit, where it refused one more)
    open_files: int  # the most one of them holds


def count(leader: int, uid: int | None = None, namespace: bool = False) -> Count:
    """The processes of the run `leader` leads: those of its pids cgroup where it has one,
    else its descendants (with `namespace`, its PID namespace's; with `uid`, that user's)."""
    cgroup = cgroup_of(leader)
    pids: set[int] = set()
    tasks = 0
    if cgroup is not None:
        with _LOCK:
            _MADE[cgroup] = None  # joined: its run's end is when it is empty
        pids = {int(p) for p in _read(cgroup / "cgroup.procs").split()}
        tasks = int(_read(cgroup / "pids.current") or 0)
        refused = dict(ln.split() for ln in _read(cgroup / "pids.events").splitlines()
                       if len(ln.split()) == 2).get("max", "0")
        if int(refused) > 0:  # the kernel refused it a fork: it was at the limit
            tasks = max(tasks, int(_read(cgroup / "pids.max").strip() or 0))
    else:
        with contextlib.suppress(psutil.Error):
            pids = {p.pid for p in psutil.Process(leader).children(recursive=True)}
        pids.add(leader)
        if namespace:
            pids.update(contain.host_pids(leader).values())
        if uid is not None:
            pids.update(contain.user_processes(uid))
    most = 0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            p = psutil.Process(pid)
            most = max(most, p.num_fds())
            if cgroup is None:
                tasks += p.num_threads()
    return Count(tasks, most)


@dataclass(frozen=True)
class Usage:
    """What a run's files hold (bytes as the disk holds them: allocated blocks)."""

    run_bytes: int = 0
    run_inodes: int = 0  # files and folders below its directory (counting stops past the bound)
    tmp_bytes: int = 0  # its files in /tmp and /dev/shm
    tmp_inodes: int = 0


def usage(run_dir: Path, uid: int | None = None, most: int = INODES + 1,
          inside: int | None = None) -> Usage:
    """What the run's files hold: below `run_dir` (lstat, never through a link, never onto
    another file system, looking at `most` entries at most), and in /tmp and /dev/shm: with
    `inside` (the host pid of nsinit), the tmpfs nsinit gave the run's /tmp and /dev/shm, read
    through that process's root; with `uid` (the run user), that user's files in the host's
    /tmp and /dev/shm, the run's directory excepted; else nothing (the marker scan cannot
    tell a run's files there from the grader's)."""
    run_bytes, run_inodes = _walk([run_dir], most, None, run_dir)
    tmp_bytes = tmp_inodes = 0
    if inside is not None:
        with contextlib.suppress(OSError):
            fs = os.statvfs(f"/proc/{inside}/root/dev/shm")
            tmp_bytes = (fs.f_blocks - fs.f_bfree) * fs.f_frsize
            tmp_inodes = fs.f_files - fs.f_ffree
    elif uid is not None:
        tmp_bytes, tmp_inodes = _walk([Path("/tmp"), Path("/dev/shm")], most, uid, run_dir)
    return Usage(run_bytes, run_inodes, tmp_bytes, tmp_inodes)


def _walk(tops: list[Path], most: int, owner: int | None, skip: Path) -> tuple[int, int]:
    """(bytes, inodes) of the entries below `tops` (with `owner`, those of that user alone,
    through the folders it owns or anyone may write, never below `skip`), each inode once,
    never following a link or onto another file system, stopping after `most` counted or
    twice as many looked at."""
    seen: set[tuple[int, int]] = set()
    total = looked = 0
    for top in tops:
        with contextlib.suppress(OSError):
            device = top.lstat().st_dev
            stack = [top]
            while stack and len(seen) < most and looked < 2 * most:
                with contextlib.suppress(OSError), os.scandir(stack.pop()) as entries:
                    for entry in entries:
                        looked += 1
                        with contextlib.suppress(OSError):
                            st = entry.stat(follow_symlinks=False)
                            if _descend(st, Path(entry.path), device, owner, skip):
                                stack.append(Path(entry.path))
                            if (owner is None or st.st_uid == owner) and \
                                    (st.st_dev, st.st_ino) not in seen:
                                seen.add((st.st_dev, st.st_ino))
                                total += st.st_blocks * 512
                        if len(seen) >= most or looked >= 2 * most:
                            break
    return total, len(seen)


def _descend(st: os.stat_result, path: Path, device: int, owner: int | None, skip: Path
             ) -> bool:
    """Whether the walk goes into `path`: a folder (not a link to one) of the same file
    system; in the host's /tmp, one the run's user owns or anyone may write (where else could
    it have made files?), never the run's own directory, counted apart."""
    if not stat.S_ISDIR(st.st_mode) or st.st_dev != device:
        return False
    return owner is None or (path != skip and (st.st_uid == owner
                                               or bool(st.st_mode & 0o002)))


def over(bounds: Bounds, usage: Usage, processes: int, open_files: int = 0) -> str:
    """"" where the run is within `bounds`, else the sentence that names the limit it is at
    or past (those the kernel holds are at it: the run was refused one more)."""
    stopped = "the run was stopped"
    if processes >= bounds.processes:
        return (f"the run reached the limit of {bounds.processes} processes and threads (a "
                f"fork bomb?): {processes} at once; {stopped}")
    if open_files >= bounds.open_files:
        return (f"a process of the run reached the limit of {bounds.open_files} open files "
                f"(files or sockets never closed?); {stopped}")
    if usage.run_bytes > bounds.disk_mb * MB:
        return (f"the run's directory grew past {bounds.disk_mb} MB (the limit of what a run "
                f"may write): {usage.run_bytes / MB:.0f} MB; {stopped}")
    if usage.run_inodes > bounds.inodes:
        return (f"the run's directory grew past {bounds.inodes} files and folders (the limit "
                f"of what a run may make); {stopped}")
    if usage.tmp_bytes >= bounds.tmp_mb * MB:
        return (f"the run's files in /tmp and /dev/shm reached {bounds.tmp_mb} MB (the limit "
                f"of what a run may keep there); {stopped}")
    if usage.tmp_inodes >= bounds.inodes:
        return (f"the run's files in /tmp and /dev/shm reached {bounds.inodes} files and "
                f"folders (the limit of what a run may keep there); {stopped}")
    return ""


def reached(run_dir: Path, leader: int, uid: int | None = None, namespace: bool = False) -> str:
    """The runner's sample of a live run: "" or the sentence naming the limit (`over`) the
    run `leader` leads is at or past now, under the configured bounds. `uid`: the run
    user's; `namespace`: nsinit is the leader's child."""
    bounds = configured()
    found = count(leader, uid, namespace)
    # nsinit: the unshare process's one child
    inside = next(iter(contain.wrapper_pids(leader) - {leader}), None) if namespace else None
    return over(bounds, usage(run_dir, uid, bounds.inodes + 1, inside), found.processes,
                found.open_files)

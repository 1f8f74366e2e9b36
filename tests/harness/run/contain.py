"""Containment of a run: Linux namespaces where the kernel allows them, else the marker scan.

With namespaces (`unshare --pid --fork --mount-proc --net --mount`, then tests/harness/run/nsinit.py
as PID 1) a run cannot leave anything behind (when PID 1 ends, the kernel ends every process
of the namespace, whatever its environment or session), cannot meet another run on a port or a
/tmp path (its own loopback; its own /tmp, an overlay through which the old one shows),
cannot reach the network, and cannot write outside its run directory (the suite's own files
are read-only to it).

Where unshare is refused but the suite runs as root (Gradescope and most Docker graders: their
seccomp profile refuses unshare without CAP_SYS_ADMIN), every process of a run runs as a
dedicated unprivileged user (RUN_USER, created by the autograder's setup.sh or here on first
use): it cannot write the suite, the results file or anything the run directory does not
hold, cannot signal the suite, and after the run every process of that user is ended and its
files in /tmp and /dev/shm removed, whatever their environment or session. Runs then go one
at a time on the machine (no private loopback: a fixed MASTER_PORT would meet).

Where the suite is neither root nor allowed namespaces, runs fall back to the
environment-marker scan of tests/harness/run/runner.py (GUARANTEES says what it cannot promise).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from tests.harness.run import access, acl, privileges
from tests.harness.run.procfs import live_processes

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

NSINIT = Path(__file__).resolve().parent / "nsinit.py"
NAMESPACES = "namespaces"
MARKER_SCAN = "marker-scan"
USER = "run-user"
FORCE_VAR = "CAPSTONE_CONTAINMENT"  # "run-user" or "marker-scan" forces that fallback
RUN_USER = "capstone-run"  # one user: runs under it go one at a time on the machine (`lease`)
# The user of programs in namespaces: another than RUN_USER, whose every process the run-user
# containment ends after each of its runs (a grading forced to it may share the machine)
NS_USER, NS_FALLBACK_UID = "capstone-ns", 61_235
# How long after a run ends a process of it may still be exiting (here and, passed on its
# command line, in nsinit inside a namespace): 1 s was too short for a tutorial-style run's
# resource tracker on 2 busy cores, and a grading box may have half a CPU.
GRACE_S = 3.0
FALLBACK_UID = 61_234  # when no user can be created: a uid nobody else has, no passwd entry
GUARANTEES = {
    NAMESPACES: "namespaces (own PID, network and mount namespace per run; suite files "
                "read-only to runs)",
    USER: f"a dedicated user ({RUN_USER}; unshare refused here): runs cannot write the suite "
          "or the results file, cannot signal the suite, and every process of that user is "
          "ended after each run; runs go one at a time on this machine",
    MARKER_SCAN: "marker scan (neither namespaces nor root here). It CANNOT guarantee: that a "
                 "process which drops the environment marker (a clean exec in a new session) "
                 "is found and ended, that a run does not write the suite's files or the "
                 "results file (they are writable by the user the suite runs as), or that a "
                 "run does not signal the suite. Grade as root or where unshare is allowed",
}
_FLAGS = ("--pid", "--fork", "--mount-proc", "--net", "--mount")


@functools.lru_cache(maxsize=1)
def _unshare_prefix() -> tuple[str, ...] | None:
    """The unshare command that works here (as root, or in a user namespace), or None."""
    exe = shutil.which("unshare")
    if exe is None or os.environ.get(FORCE_VAR) == MARKER_SCAN:
        return None
    for extra in ((), ("--user", "--map-root-user")):
        prefix = (exe, *extra, *_FLAGS)
        try:
            probe = subprocess.run([*prefix, sys.executable, "-I", "-c", "pass"],
                                   capture_output=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return prefix
    return None


def run_user() -> tuple[int, int] | None:
    """(uid, gid) of the dedicated run user, created if missing; None unless root and a
    process of that user can start this interpreter. A directory on the interpreter's way
    that is closed to other users (a home of mode 0700 holding a pyenv, conda or venv) is
    opened to that user alone, for passage only (`grant_passage`)."""
    return _ready_user(RUN_USER, FALLBACK_UID)


@functools.lru_cache(maxsize=2)
def _ready_user(name: str, fallback: int) -> tuple[int, int] | None:
    if os.geteuid() != 0 or os.environ.get(FORCE_VAR) == MARKER_SCAN:
        return None
    found = _user(name, fallback)
    # held by this process whether or not another's grant is already there: the grant is
    # put back when the last process holding it ends (access.py), never under a live one
    grant_passage(found[0], closed_dirs(interpreter_paths()))
    return found if _can_start(found) else None


def _can_start(ids: tuple[int, int]) -> bool:
    """Whether a process of `ids` can start this interpreter (and load its `site`)."""
    try:
        probe = subprocess.run([sys.executable, "-I", "-c", "pass"], capture_output=True,
                               timeout=20, preexec_fn=become(ids), cwd="/")
    except (OSError, subprocess.TimeoutExpired, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


def interpreter_paths() -> list[Path]:
    """What a run's `python` must reach, links resolved (a venv's `lib64`, its `python`): the
    interpreter itself, its prefixes and its path."""
    found = [sys.executable, sys.base_prefix, sys.prefix,
             *(p for p in sys.path if p and os.path.isdir(p))]
    return [Path(os.path.realpath(p)) for p in found]


def closed_dirs(paths: list[Path]) -> list[Path]:
    """The directories above `paths` that other users cannot pass through (no execute bit
    for others), outermost first."""
    closed = {d for path in paths for d in path.parents if not d.stat().st_mode & 0o001}
    return sorted(closed, key=lambda d: (len(d.parts), str(d)))


def grant_passage(uid: int, dirs: list[Path]) -> list[Path]:
    """Let user `uid`, and no one else, pass through `dirs` (a POSIX ACL entry `u:UID:x`,
    written as the kernel stores it: it cannot list them, and the group's and others' bits
    are unchanged); returns those granted (none where the file system takes no ACLs)."""
    granted: list[Path] = []

    def grant(path: Path) -> None:
        if acl.grant(path, uid):
            granted.append(path)
    access.hold_all([(d, grant) for d in dirs])
    return granted


def _user(name: str, fallback: int) -> tuple[int, int]:
    import pwd

    with contextlib.suppress(KeyError):
        return pwd.getpwnam(name).pw_uid, pwd.getpwnam(name).pw_gid
    if shutil.which("useradd") and subprocess.run(
            ["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
             "--shell", "/usr/sbin/nologin", name], capture_output=True).returncode == 0:
        return pwd.getpwnam(name).pw_uid, pwd.getpwnam(name).pw_gid
    return fallback, fallback


@contextlib.contextmanager
def lease() -> Iterator[tuple[int, int]]:
    """The run user, once no other run on this machine (of any session) holds it. Runs under
    it go one at a time, whoever starts them: there is no private loopback, any two
    submissions may use the tutorials' port 12355 or /tmp path, and ending every process of
    the user after a run must not end another run's."""
    from filelock import FileLock

    user = run_user()
    if user is None:
        raise RuntimeError(f"no run user: {why_not_user()}")
    USER_RUNS.mkdir(mode=0o711, exist_ok=True)
    with FileLock(str(USER_RUNS / "one-run-at-a-time.lock")):
        yield user


@contextlib.contextmanager
def admitted(mode: str) -> Iterator[tuple[int, int] | None]:
    """Containment's one rule on runs at once, for every caller of the runner: in namespaces
    each run has its own network and /tmp, so runs overlap freely; without them a
    submission's fixed port (the tutorials' 12355) or /tmp rendezvous would join another
    run's ranks, so runs go one at a time on the machine: under the run user through its
    `lease` (yields the user), under the marker scan through one lock per user."""
    if mode == NAMESPACES:
        yield None
        return
    if mode == USER:
        with lease() as user:
            yield user
        return
    import tempfile

    from filelock import FileLock

    path = Path(tempfile.gettempdir()) / f"capstone-one-run-at-a-time-{os.getuid()}.lock"
    with FileLock(str(path)):
        yield None


def become(ids: tuple[int, int]) -> Callable[[], None]:
    """A preexec function: drop to the run user (no supplementary groups), with no
    capability and no way to gain one (tests/harness/run/privileges.py)."""
    return functools.partial(privileges.drop, ids)


def program_user(mode: str) -> tuple[int, int] | None:
    """Under namespace containment, the unprivileged user a run's program runs as (nsinit
    drops to it): the run user, where the suite runs as root; None in a user namespace (the
    program is then its root, whose every capability nsinit drops: outside, it is the
    grader's own uid, and every mount is read-only to it). Nsinit refuses to start a program
    as the host's root."""
    if mode != NAMESPACES or os.geteuid() != 0:
        return None
    return _ready_user(NS_USER, NS_FALLBACK_UID)


def mode() -> str:
    """Which containment runs get on this machine: NAMESPACES, USER or MARKER_SCAN."""
    if os.environ.get(FORCE_VAR) not in (USER, MARKER_SCAN) and _unshare_prefix() is not None:
        return NAMESPACES
    return USER if run_user() is not None else MARKER_SCAN


def why_not_user() -> str:
    """Why the run-user containment is not available here ("" when it is)."""
    if os.environ.get(FORCE_VAR) == MARKER_SCAN:
        return f"{FORCE_VAR}={MARKER_SCAN} forces the marker scan"
    if os.geteuid() != 0:
        return "the suite does not run as root"
    if run_user() is None:
        closed = closed_dirs(interpreter_paths())
        if not closed:
            return f"a process of user {RUN_USER} cannot start {sys.executable}"
        names = ", ".join(f"{d} (mode {d.stat().st_mode & 0o777:04o})" for d in closed)
        fix = ("an ACL entry could not be written there (does the file system take "
               "ACLs?)" if os.geteuid() == 0 else f"as root the suite grants {RUN_USER} "
               "alone passage through it")
        return (f"a process of user {RUN_USER} cannot start {sys.executable}: {names} on its "
                f"way is closed to other users; {fix}, or open it (chmod o+x)")
    return ""


def passage() -> list[Path]:
    """The directories the run user passes through by its ACL entry alone (closed to other
    users), for the session's report; empty unless the run-user containment is in use."""
    return closed_dirs(interpreter_paths()) if mode() == USER else []


USER_RUNS = Path("/tmp/capstone-runs")  # run directories under the run-user containment


def user_root(root: Path) -> Path:
    """Where a run cache at `root` keeps its runs under the run-user containment: below
    USER_RUNS (root's, mode 0711), not below pytest's temporary root, whose mode every new
    pytest session resets to 0700 (closing it to the run user mid-session). Named by this
    suite session, which removes its own at its end (`remove_user_roots`)."""
    import hashlib

    USER_RUNS.mkdir(mode=0o711, exist_ok=True)
    USER_RUNS.chmod(0o711)
    session = os.environ.get("CAPSTONE_SUITE_SESSION", "nosession")
    digest = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:12]
    return USER_RUNS / f"{session}-{digest}"


def reset_by_pytest(root: Path) -> bool:
    """Whether `root` lies in pytest's own temporary root (`pytest-of-USER`), whose mode
    each new pytest session sets back to 0700 (a `--basetemp` given is left as it is)."""
    return any(d.name.startswith("pytest-of-") for d in root.resolve().parents)


def remove_user_roots(session: str) -> None:
    for d in USER_RUNS.glob(f"{session}-*") if USER_RUNS.is_dir() else []:
        shutil.rmtree(d, ignore_errors=True)


def _traversable(path: Path) -> None:
    """The execute bit for others on every directory above `path` (a way through: others
    still cannot list them or write there), each change journaled (access.py)."""
    parents = list(reversed(path.parents))
    access.hold_all([(d, _with_bits(0o001)) for d in parents],
                    needed=lambda d: not d.stat().st_mode & 0o001)


def _with_bits(bits: int) -> Callable[[Path], None]:
    def add(path: Path) -> None:
        path.chmod(path.lstat().st_mode | bits)
    return add


def readable(folder: Path, again: bool = False, own: bool = False) -> None:
    """Let the run user read a folder (the submission it runs, the observer, an earlier run's
    checkpoints): read for others, and execute on folders, where the folder is closed to
    others (e.g. made 0700 by a temp-dir maker). Done once per folder unless `again`. The
    changes are journaled and put back after (access.py) unless the folder is the suite's
    `own` (a run's directory, removed with its session)."""
    if again or folder not in _OPENED:
        _open_for_reading(folder, force=again, own=own)
        _OPENED.add(folder)


_OPENED: set[Path] = set()


def _open_for_reading(folder: Path, force: bool, own: bool) -> None:
    """(Never through a link: a run, or a submission, may plant one to anywhere.)"""
    _traversable(folder)
    if own and not force and folder.stat().st_mode & 0o005 == 0o005:
        return
    found: list[tuple[Path, int]] = []
    for top, dirs, files in os.walk(folder, followlinks=False):
        for name, bits in [*((d, 0o005) for d in dirs), *((f, 0o004) for f in files)]:
            path = Path(top) / name
            if not stat.S_ISLNK(path.lstat().st_mode):
                found.append((path, bits))
    found.append((folder, 0o005))
    if own:
        for path, bits in found:
            _with_bits(bits)(path)
        return
    bits_of = dict(found)
    access.hold_all([(p, _with_bits(b)) for p, b in found],
                    needed=lambda p: p.lstat().st_mode & bits_of[p] != bits_of[p])


def programs_folders(argv: list[str]) -> list[Path]:
    """The folders of the program files `argv` names by path (`/abs/run.sh`, `python
    sub/main.py`), the interpreter's own excepted: the run user must read them too."""
    python = interpreter_paths()
    found = []
    for arg in argv[:2]:
        path = Path(arg)
        # a program file reached through a link (a submission's `src/main.py` pointing into
        # a classmate's folder) names no folder: it would be shown to the run, and opened
        if "/" in arg and path.is_file() and os.path.realpath(arg) == os.path.abspath(arg):
            folder = path.resolve().parent
            if not any(folder == p or folder.is_relative_to(p) for p in python):
                found.append(folder)
    return found


def named_folders(argv: list[str]) -> list[Path]:
    """The folders `argv`'s options name by absolute path after the program (a resume's
    checkpoint, `--out`): a run reads them, so a closed way to them is opened too."""
    found = []
    for arg in argv[2:]:
        path = Path(arg)
        # Never a folder reached through a link: the run's own files name these (a resume's
        # checkpoint made a link to a classmate's folder would be shown to the resumed run)
        if path.is_absolute() and path.exists() and os.path.realpath(path) == str(path):
            found.append(path if path.is_dir() else path.parent)
    return found


def open_to(run_dir: Path, ids: tuple[int, int], cwd: Path | None = None,
            programs: list[Path] | None = None) -> None:
    """Give the run user its run directory, a way through the directories above it, and
    read access to the folder it runs in and to `programs` (`programs_folders`). (A folder
    above closed again while the run runs shuts it out: the suite's own nested pytest
    sessions keep their temporary roots apart for that, nested.py.)"""
    _traversable(run_dir)
    os.chown(run_dir, *ids)
    for top, dirs, files in os.walk(run_dir, followlinks=False):  # the suite's, so far
        for name in [*dirs, *files]:
            os.chown(Path(top) / name, *ids, follow_symlinks=False)
    if cwd is not None:
        # the way to it anew for every run: a folder above may have been closed since (a
        # pytest starting elsewhere sets its /tmp/pytest-of-USER back to 0700)
        _traversable(cwd.resolve())
        readable(cwd.resolve())
    for folder in programs or []:
        _traversable(folder)
        readable(folder)


def user_processes(uid: int) -> list[int]:
    """Every live process running as `uid` (zombies are already dead)."""
    found = []
    for p in psutil.process_iter(["uids", "status"]):
        with contextlib.suppress(psutil.Error, TypeError):
            if p.info["status"] != psutil.STATUS_ZOMBIE and p.info["uids"] is not None \
                    and uid in (p.info["uids"].real, p.info["uids"].effective):
                found.append(p.pid)
    return found


def end_user(uid: int, grace_s: float = 2.0) -> list[int]:
    """SIGKILL every process of `uid` until none is left, then remove what that user left in
    /tmp and /dev/shm (a stale rendezvous file would hang the next run); returns the pids
    that were found."""
    seen: list[int] = []
    deadline = time.monotonic() + grace_s
    while True:
        pids = user_processes(uid)
        if not pids or time.monotonic() > deadline:
            break
        seen += [p for p in pids if p not in seen]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    for top in (Path("/tmp"), Path("/dev/shm")):
        with contextlib.suppress(OSError):
            for entry in top.iterdir():
                with contextlib.suppress(OSError):
                    if entry.lstat().st_uid == uid:
                        if entry.is_dir() and not entry.is_symlink():
                            shutil.rmtree(entry, ignore_errors=True)
                        else:
                            entry.unlink()
    return seen


HIDE_VAR = "CAPSTONE_HIDE"  # folders no run of the session may see (os.pathsep-separated)


def hidden_folders() -> list[str]:
    """What the grading session asked to hide from its runs ($CAPSTONE_HIDE): a class's
    folder of submissions and the grading's outputs."""
    return [p for p in os.environ.get(HIDE_VAR, "").split(os.pathsep) if p]


def wrap(argv: list[str], run_dir: Path, report_fd: int, grace_s: float,
         pass_fds: tuple[int, ...] = (), cwd: Path | None = None,
         user: tuple[int, int] | None = None, programs: list[Path] | None = None) -> list[str]:
    """`argv` as started inside its own namespaces (unchanged under the marker scan); nsinit
    gives a process still exiting `grace_s` (the runner's `Watch.grace_s`) before it counts
    as a survivor, hands `pass_fds` on to the command and starts it as `user` (uid, gid)
    without privileges. The session's hidden folders are empty in the run's view, but for
    its own working directory (its submission) and `programs`' folders."""
    prefix = _unshare_prefix()
    if prefix is None:
        return argv
    passed = [f"--pass-fd={fd}" for fd in pass_fds]
    if user is not None:
        passed.append(f"--user={user[0]}:{user[1]}")
    passed += [f"--hide={h}" for h in hidden_folders()]
    if cwd is not None and hidden_folders():
        passed += [f"--show={f.resolve()}" for f in [cwd, *(programs or [])]]
    # -S: nsinit needs the standard library alone, and the site-packages' .pth hooks (an
    # editable install's finder) took two thirds of its interpreter's start (~20 ms a run)
    return [*prefix, sys.executable, "-I", "-S", str(NSINIT), "--run", str(run_dir),
            "--report-fd", str(report_fd), "--grace", str(grace_s), *passed, "--", *argv]


def _children(pid: int) -> list[int]:
    """The kernel's list of `pid`'s children: one file, where psutil's `children()` reads
    every process's stat to find them. (psutil has no pid namespaces: `host_pids` reads
    /proc too.)"""
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def wrapper_pids(leader: int) -> set[int]:
    """The unshare process and nsinit (host pids): the suite's, not the submission's."""
    try:
        return {leader, *_children(leader)}
    except (OSError, ValueError):
        return {leader}


def host_pids(leader: int) -> dict[int, int]:
    """Namespace pid -> host pid of every process in the PID namespace below `leader` (the
    unshare process); empty when there is none (under the marker scan)."""
    try:
        ns = os.readlink(f"/proc/{_children(leader)[0]}/ns/pid")
    except (OSError, IndexError, ValueError):
        return {}
    found = {}
    for pid, [status] in live_processes("status"):
        try:
            if os.readlink(f"/proc/{pid}/ns/pid") != ns:
                continue
        except OSError:
            continue
        for line in status.decode(errors="replace").splitlines():
            if line.startswith("NSpid:"):
                found[int(line.split()[-1])] = pid
    return found

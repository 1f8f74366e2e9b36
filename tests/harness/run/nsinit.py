"""PID 1 of a run's namespaces: set the run's world up, start the submission, report what
outlived it, and end (the kernel then ends every process left in the PID namespace).

`python -I -S nsinit.py --run DIR --report-fd FD -- ARGV...`, started by `unshare --pid --fork
--mount-proc --net --mount` (tests/harness/run/contain.py). It brings the loopback interface up
(gloo finds no interface without it), gives the run a private /tmp (an overlay over the old
one, its writes kept in a tmpfs of bounded size at DIR/tmp) and /dev/shm (on that same
tmpfs), and makes every other mount
read-only, DIR excepted (/sys, /proc/sys and the cgroup files too). The program then starts
without a privilege (tests/harness/run/privileges.py): as the run user where `--user` names
it, with no capability and `no_new_privs`, so that it cannot undo any of this (remount,
unmount, write the cgroups); where it still holds one, it is ended and the run is not
graded. Standard library only, and `-I -S`: it never loads the suite's observer or anything
of the submission's.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import json
import os
import re
import socket
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves the script's own out
from privileges import drop, held, unprivileged
from procfs import lingering, live_processes

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC = 1024, 2048, 4096, 16384
MS_RELATIME, MS_STRICTATIME = 1 << 21, 1 << 24
# the per-mount options a read-only remount keeps as they were (mountinfo's 6th field)
KEPT = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
        "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME}
NOT_CONFINED = 125  # the exit code of a run whose sandbox failed: the submission never ran
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
# The run's /tmp and /dev/shm: one tmpfs of TMP_MB and TMP_INODES (bounds.py's defaults, which
# a test holds equal: nsinit imports no dataclasses, ~15 ms a run), or $CAPSTONE_RUN_BOUNDS's
BOUNDS_VAR, TMP_MB, TMP_INODES = "CAPSTONE_RUN_BOUNDS", 512, 20_000


def _mount(libc: ctypes.CDLL, src: str | None, target: str, flags: int,
           fstype: str | None = None, data: str | None = None) -> None:
    if libc.mount(src and src.encode(), target.encode(), fstype and fstype.encode(), flags,
                  data and data.encode()) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {src} on {target}: {os.strerror(err)}")


def loopback_up() -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    flags = struct.unpack("16sH22x", fcntl.ioctl(s, SIOCGIFFLAGS,
                                                 struct.pack("16sH22x", b"lo", 0)))[1]
    fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))
    s.close()


def hide(libc: ctypes.CDLL, hidden: list[str], shown: list[str]) -> None:
    """An empty folder over each of `hidden` (a class's other submissions, the grading's
    outputs), and each of `shown` that lies inside one (the run's own submission) bound back
    where it was."""
    keep = {path: os.open(path, os.O_PATH) for path in shown if os.path.isdir(path)}
    for path in hidden:
        if os.path.isdir(path):
            _mount(libc, "tmpfs", path, 0, "tmpfs", "size=1m,mode=0755")
    for path, fd in keep.items():
        if not os.path.isdir(path):  # inside a hidden folder: made again, the real one bound
            os.makedirs(path)
            _mount(libc, f"/proc/self/fd/{fd}", path, MS_BIND)
        os.close(fd)


def tmp_bounds(environ: dict[str, str]) -> tuple[int, int]:
    """(MiB, inodes) of the tmpfs that holds the run's /tmp and /dev/shm: `environ`'s
    $CAPSTONE_RUN_BOUNDS (its `tmp_mb` and `inodes`), else the defaults (ValueError: it is
    not such an object)."""
    given = json.loads(environ.get(BOUNDS_VAR) or "{}")
    if not isinstance(given, dict):
        raise ValueError(f"${BOUNDS_VAR} is not a JSON object")
    return int(given.get("tmp_mb", TMP_MB)), int(given.get("inodes", TMP_INODES))


def confine(run: str, hidden: list[str] | None = None, shown: list[str] | None = None,
            tmp: tuple[int, int] = (TMP_MB, TMP_INODES)) -> None:
    """A private /tmp (an overlay: the old /tmp shows through, writes stay the run's) and
    /dev/shm, both kept on one tmpfs of `tmp` (MiB, inodes): past it a write fails (ENOSPC),
    and the runner, which reads the tmpfs's use through this process's root (bounds.py),
    names the limit; `hidden` folders empty but for what of `shown` lies in them; `run`
    writable where it is; every other path read-only."""
    libc = ctypes.CDLL(None, use_errno=True)
    keep = os.open(run, os.O_PATH)
    layer = os.path.join(run, "tmp")  # the overlay's upper layer, on a tmpfs of its own
    os.makedirs(layer, exist_ok=True)
    _mount(libc, "tmpfs", layer, 0, "tmpfs", f"size={tmp[0]}m,nr_inodes={tmp[1]},mode=0755")
    for sub in ("upper", "work", "shm"):
        os.makedirs(os.path.join(layer, sub))
    for sub in ("upper", "shm"):
        os.chmod(os.path.join(layer, sub), 0o1777)  # /tmp's own mode, for the run user
    # held before the overlay hides the layer (a run's directory may lie in /tmp)
    shm = os.open(os.path.join(layer, "shm"), os.O_PATH)
    _mount(libc, "overlay", "/tmp", 0, "overlay",
           f"lowerdir=/tmp,upperdir={layer}/upper,workdir={layer}/work")
    hide(libc, hidden or [], [*(shown or []), run])
    # the run's own directory, the real one (over the overlay when it lies in /tmp), as a
    # mount of its own: the read-only remount of / below does not reach it
    _mount(libc, f"/proc/self/fd/{keep}", run, MS_BIND)
    if os.path.isdir("/dev/shm"):  # the same tmpfs as /tmp's writes: one bound for both
        _mount(libc, f"/proc/self/fd/{shm}", "/dev/shm", MS_BIND)
    os.close(shm)
    _mount(libc, "/", "/", MS_BIND | MS_REC)
    _mount(libc, "/proc/sys", "/proc/sys", MS_BIND)  # a mount of its own, to be made read-only
    read_only(libc, writable=[run, "/tmp", "/dev/shm"])
    os.chdir(os.getcwd())  # re-enter the working directory through the read-only mount


def read_only(libc: ctypes.CDLL, writable: list[str]) -> None:
    """Every mount read-only but those at `writable` (and below the run's directory, the
    first of them), /dev's and the run's own /proc: a remount of / alone is not recursive,
    and /sys, the cgroup hierarchies and /proc/sys are mounts of their own."""
    keep = {os.path.realpath(w) for w in writable}
    run = os.path.realpath(writable[0])
    with open("/proc/self/mountinfo") as f:
        mounts = [(line.split()[4], line.split()[5]) for line in f]
    done = set()
    for point, options in mounts:
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), point)  # " " is \040
        if point in done or point in keep or point.startswith((run + "/", "/dev/")) \
                or point in ("/dev", "/proc") or (point.startswith("/proc/")
                                                  and point != "/proc/sys"):
            continue
        done.add(point)
        flags = MS_BIND | MS_REMOUNT | MS_RDONLY
        for opt in options.split(","):
            flags |= KEPT.get(opt, 0)
        if not flags & (MS_NOATIME | MS_RELATIME):  # kept too: a user namespace locks it
            flags |= MS_STRICTATIME
        _mount(libc, None, point, flags)


def others() -> list[dict[str, object]]:
    """Processes of this namespace other than this one (its /proc is the namespace's)."""
    return [{"pid": pid, "cmdline": cmd.replace(b"\0", b" ").decode("utf-8", "replace")
             .strip()[:200]} for pid, [cmd] in live_processes("cmdline")]


def _host_root() -> bool:
    """Whether this process is root of the host's user namespace (not of a user namespace
    of the grader's, whose root is the grader's own uid outside)."""
    with open("/proc/self/uid_map") as f:
        return os.getuid() == 0 and f.read().split()[:3] == ["0", "0", "4294967295"]


def _report(fd: int, report: dict[str, object]) -> None:
    """Write the report to the runner's own descriptor: an unnamed file of the runner's,
    which no process of the run can reach (a file in the run's directory could be a link
    the program planted, and nsinit writes as root)."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(report).encode(), 0)


def _not_confined(report: dict[str, object], fd: int, why: str) -> int:
    report["filesystem"] = why
    _report(fd, report)
    print(f"the run's sandbox could not be set up ({why}): the submission was not started",
          file=sys.stderr)
    return NOT_CONFINED


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True)
    ap.add_argument("--report-fd", type=int, required=True,
                    help="the runner's descriptor the report is written to")
    ap.add_argument("--grace", type=float, required=True,
                    help="seconds a process still exiting after the command is not a survivor")
    ap.add_argument("--pass-fd", type=int, action="append", default=[],
                    help="a descriptor the command inherits (a warm start's connection)")
    ap.add_argument("--hide", action="append", default=[],
                    help="a folder the run sees empty (other submissions, the outputs)")
    ap.add_argument("--show", action="append", default=[],
                    help="a folder inside a hidden one the run still sees (its own)")
    ap.add_argument("--user", default="",
                    help="UID:GID the program runs as (the run user; none in a user namespace)")
    ap.add_argument("argv", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    report: dict[str, object] = {"network": "private", "filesystem": "confined"}
    try:
        loopback_up()
    except OSError as e:
        report["network"] = f"loopback not up: {e}"
    try:
        confine(args.run, args.hide, args.show, tmp_bounds(dict(os.environ)))
    except (OSError, ValueError) as e:  # fail closed: never run the submission unconfined
        return _not_confined(report, args.report_fd, f"not confined: {e}")
    ids = tuple(int(i) for i in args.user.split(":")) if args.user else None
    if ids is None and _host_root():
        return _not_confined(report, args.report_fd, "not confined: the program would run as "
                             "the host's root (no run user was given)")
    try:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, pass_fds=args.pass_fd,
                                 preexec_fn=lambda: drop(ids))
    except subprocess.SubprocessError as e:  # the drop failed: never run it privileged
        return _not_confined(report, args.report_fd,
                             f"not confined: the program could not drop its privileges: {e}")
    except OSError as e:
        print(f"cannot start {argv[0]!r}: {e}", file=sys.stderr)
        return 127
    kept = unprivileged(held(child.pid), ids[0] if ids else None)
    if kept:
        child.kill()
        child.wait()
        return _not_confined(report, args.report_fd,
                             f"not confined: the program still held {kept}")
    report["privileges"] = f"none (uid {ids[0]})" if ids else "none (user namespace)"
    rc = child.wait()
    report["survivors"] = lingering(others, args.grace)
    _report(args.report_fd, report)
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main())

"""PID 1 of a run's namespaces: set the run's world up, start the submission, report what
outlived it, and end (the kernel then ends every process left in the PID namespace).

`python -I -S nsinit.py --run DIR --report FILE -- ARGV...`, started by `unshare --pid --fork
--mount-proc --net --mount` (tests/harness/run/contain.py). It brings the loopback interface up
(gloo finds no interface without it), gives the run a private /tmp (an overlay over the old
one, its writes kept in a tmpfs at DIR/tmp) and /dev/shm, and makes every other path
read-only, DIR excepted. Standard library only, and `-I -S`: it never loads the suite's observer
or anything of the submission's.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import json
import os
import socket
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves the script's own out
from procfs import lingering, live_processes

MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC = 1, 32, 4096, 16384
NOT_CONFINED = 125  # the exit code of a run whose sandbox failed: the submission never ran
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


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


def confine(run: str, hidden: list[str] | None = None, shown: list[str] | None = None
            ) -> None:
    """A private /tmp (an overlay: the old /tmp shows through, writes stay the run's) and
    /dev/shm; `hidden` folders empty but for what of `shown` lies in them; `run` writable
    where it is; every other path read-only."""
    libc = ctypes.CDLL(None, use_errno=True)
    keep = os.open(run, os.O_PATH)
    layer = os.path.join(run, "tmp")  # the overlay's upper layer, on a tmpfs of its own
    os.makedirs(layer, exist_ok=True)
    _mount(libc, "tmpfs", layer, 0, "tmpfs", "size=2g,mode=0755")
    for sub in ("upper", "work"):
        os.makedirs(os.path.join(layer, sub))
    _mount(libc, "overlay", "/tmp", 0, "overlay",
           f"lowerdir=/tmp,upperdir={layer}/upper,workdir={layer}/work")
    hide(libc, hidden or [], [*(shown or []), run])
    # the run's own directory, the real one (over the overlay when it lies in /tmp), as a
    # mount of its own: the read-only remount of / below does not reach it
    _mount(libc, f"/proc/self/fd/{keep}", run, MS_BIND)
    if os.path.isdir("/dev/shm"):
        _mount(libc, "tmpfs", "/dev/shm", 0, "tmpfs")
    _mount(libc, "/", "/", MS_BIND | MS_REC)
    _mount(libc, None, "/", MS_BIND | MS_REMOUNT | MS_RDONLY)
    os.chdir(os.getcwd())  # re-enter the working directory through the read-only mount


def others() -> list[dict[str, object]]:
    """Processes of this namespace other than this one (its /proc is the namespace's)."""
    return [{"pid": pid, "cmdline": cmd.replace(b"\0", b" ").decode("utf-8", "replace")
             .strip()[:200]} for pid, [cmd] in live_processes("cmdline")]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("--grace", type=float, required=True,
                    help="seconds a process still exiting after the command is not a survivor")
    ap.add_argument("--pass-fd", type=int, action="append", default=[],
                    help="a descriptor the command inherits (a warm start's connection)")
    ap.add_argument("--hide", action="append", default=[],
                    help="a folder the run sees empty (other submissions, the outputs)")
    ap.add_argument("--show", action="append", default=[],
                    help="a folder inside a hidden one the run still sees (its own)")
    ap.add_argument("argv", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    report: dict[str, object] = {"network": "private", "filesystem": "confined"}
    try:
        loopback_up()
    except OSError as e:
        report["network"] = f"loopback not up: {e}"
    try:
        confine(args.run, args.hide, args.show)
    except OSError as e:  # fail closed: never run the submission unconfined
        report["filesystem"] = f"not confined: {e}"
        with open(args.report, "w") as f:
            json.dump(report, f)
        print(f"the run's sandbox could not be set up ({e}): the submission was not started",
              file=sys.stderr)
        return NOT_CONFINED
    try:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, pass_fds=args.pass_fd)
    except OSError as e:
        print(f"cannot start {argv[0]!r}: {e}", file=sys.stderr)
        return 127
    rc = child.wait()
    report["survivors"] = lingering(others, args.grace)
    with open(args.report, "w") as f:  # the run's directory, bound in again (or never moved)
        json.dump(report, f)
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main())

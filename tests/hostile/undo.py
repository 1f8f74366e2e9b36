"""Tries to undo its sandbox before it reads its classmates (issue 62): remounts / writable,
unmounts every mount it can see (the empty folders that hide a class), bind-mounts / where it
may write, joins the root cgroup and makes one of its own, writes /proc/sys, ptraces PID 1
(the sandbox's init), takes uid 0, and writes into its classmate's folder and the suite's
checkout ($CAPSTONE_TAMPER_TARGETS names more). Then, in a class (a guess.txt beside it), it
reads every classmate's file it can after each attempt (tests/hostile/peek.py's way) and
raises what it read, so that it would reach its feedback.
What each attempt did is written to undo.json in its --out folder."""

import contextlib
import ctypes
import functools
import json
import os
from collections.abc import Callable
from pathlib import Path

from _common import out_dir, read_others

MS_REMOUNT, MS_BIND, MNT_DETACH, PTRACE_ATTACH, PTRACE_DETACH = 32, 4096, 2, 16, 17
out = out_dir()
libc = ctypes.CDLL(None, use_errno=True)
here = Path.cwd()
done: dict[str, str] = {}


in_class = (here / "guess.txt").is_file()  # a class's folder: its guess.txt names a classmate
seen: list[str] = []


def attempt(name: str, call: Callable[[], object]) -> None:
    """Try one way out, then read the classmates (in a class): any way that worked shows."""
    try:
        value = call()
    except OSError as e:
        done[name] = f"refused: {e.strerror}"
    else:
        if isinstance(value, int) and value != 0:
            done[name] = f"refused: {os.strerror(ctypes.get_errno())}"
        else:
            done[name] = "done"
    if in_class:
        seen.extend(read_others(here))


def hiding_mounts() -> list[str]:
    """The empty folders mounted over a class's (tmpfs mounts outside the system's paths):
    only those, so that it never unmounts a machine's own (were it run unconfined)."""
    with open("/proc/self/mountinfo") as f:
        found = [(line.split()[4], line.split(" - ")[1].split()[0]) for line in f]
    return [p for p, fs in found if fs == "tmpfs" and not p.startswith(
        ("/dev", "/run", "/sys", "/proc")) and p != "/tmp"]


def write(path: Path) -> int:
    with open(path, "a") as f:
        f.write("# written by tests/hostile/undo.py\n")
    return 0


def same_value(path: str) -> int:  # harmless if it succeeds: the value it already had
    value = Path(path).read_text()
    Path(path).write_text(value)
    return 0


def cgroups() -> int:
    root = Path("/sys/fs/cgroup")
    tops = [d for d in root.iterdir() if (d / "cgroup.procs").is_file()] or [root]
    (tops[0] / "cgroup.procs").write_text(str(os.getpid()))  # out of the grading's box
    return 0


def own_cgroup() -> int:
    root = Path("/sys/fs/cgroup")
    tops = [d for d in root.iterdir() if (d / "cgroup.procs").is_file()] or [root]
    made = tops[0] / f"undo-{os.getpid()}"
    made.mkdir()
    made.rmdir()
    return 0


def ptrace_init() -> int:
    if libc.ptrace(PTRACE_ATTACH, 1, None, None) != 0:
        return -1
    libc.ptrace(PTRACE_DETACH, 1, None, None)
    return 0


bound = out / "bound"
bound.mkdir(exist_ok=True)
attempt("remount / writable", lambda: libc.mount(None, b"/", None, MS_REMOUNT | MS_BIND,
                                                   None))
unmounted = [p for p in reversed(hiding_mounts())
             if libc.umount2(p.encode(), MNT_DETACH) == 0]
attempt("unmount", lambda: 0 if unmounted else -1)
if unmounted:
    done["unmount"] = f"done: {unmounted}"
attempt("bind-mount /", lambda: libc.mount(b"/", str(bound).encode(), None, MS_BIND, None))
attempt("join the root cgroup", cgroups)
attempt("make a cgroup", own_cgroup)
attempt("write /proc/sys", lambda: same_value("/proc/sys/vm/swappiness"))
attempt("ptrace PID 1", ptrace_init)
attempt("setuid 0", lambda: os.setuid(0))
targets = [here.parent / name / "undo-was-here.txt" for name in
           (here / "guess.txt").read_text().split()[:1]] if (here / "guess.txt").is_file() else []
targets += [Path(p) for p in os.environ.get("CAPSTONE_TAMPER_TARGETS", "").split(":") if p]
for target in targets:
    attempt(f"write {target}", functools.partial(write, target))
with contextlib.suppress(OSError):
    (out / "undo.json").write_text(json.dumps(done, indent=1))
# (out of a class, the suite's own tests run it from the checkout: what lies beside it is
# nobody's)
raise RuntimeError(f"read {len(seen)} files of others: " + " | ".join(seen)[:20000])

"""A run's program holds no privilege of the grader's: how a process gives them up before it
becomes the program, and how the one that started it checks that it did.

Standard library only: nsinit (`python -I -S`, PID 1 of a run's namespaces), the fork server's
program (tests/harness/run/warm.py) and the run-user containment's preexec all call `drop`.
After it the process has no capability (none effective, permitted, inheritable, ambient or
in its bounding set, so no exec gives one back), no setuid or file-capability exec can raise
it (`no_new_privs`), and, given a user, it runs as that user with no supplementary group.
"""

from __future__ import annotations

import ctypes
import os

PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_SET_DUMPABLE = 24, 38, 47, 4
PR_CAP_AMBIENT_CLEAR_ALL = 4
# /proc/PID/status fields `held` reads; a process without privileges shows all zero
CAPABILITY_FIELDS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")


def _prctl(libc: ctypes.CDLL, option: int, arg: int, arg2: int = 0) -> None:
    if libc.prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(arg2), ctypes.c_ulong(0),
                  ctypes.c_ulong(0)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}, {arg}): {os.strerror(err)}")


def drop(ids: tuple[int, int] | None) -> None:
    """Give up every privilege for good: the bounding set and the ambient set emptied, the
    user `ids` (uid, gid) taken with no supplementary group (which clears the effective and
    permitted sets), and `no_new_privs` set. Without `ids` (a user namespace whose root is the
    grader's own uid outside) the process stays that uid and its sets are emptied by the
    next exec, as the bounding set is empty. Raises OSError where any step fails: the caller
    must then not start the program."""
    libc = ctypes.CDLL(None, use_errno=True)
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for cap in range(last + 1):
        _prctl(libc, PR_CAPBSET_DROP, cap)
    _prctl(libc, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    if ids is not None:
        os.setgroups([])
        os.setgid(ids[1])
        os.setuid(ids[0])
        # a process that changed its user is not dumpable until it execs: its /proc files
        # would be root's, and the program (a warm start never execs) could not read its own
        _prctl(libc, PR_SET_DUMPABLE, 1)
    _prctl(libc, PR_SET_NO_NEW_PRIVS, 1)


def held(pid: int | str = "self") -> dict[str, object]:
    """What process `pid` holds: its uids, its capability sets (hex, as the kernel prints
    them) and whether no_new_privs is set; {} where it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            lines = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    except OSError:
        return {}
    found: dict[str, object] = {k: lines.get(k, "").strip() for k in CAPABILITY_FIELDS}
    found["uids"] = [int(u) for u in lines.get("Uid", "").split()]
    found["no_new_privs"] = lines.get("NoNewPrivs", "0").strip() == "1"
    return found


def unprivileged(found: dict[str, object], uid: int | None) -> str:
    """'' where `found` (`held`) is a process without privileges (running as `uid`, where
    given), else what it still holds."""
    if not found:
        return ""  # gone already: it held nothing long enough to matter to the check
    kept = [k for k in CAPABILITY_FIELDS if int(str(found[k]) or "0", 16)]
    if kept:
        return "capabilities " + ", ".join(f"{k} {found[k]}" for k in kept)
    if not found["no_new_privs"]:
        return "no_new_privs unset"
    uids = found["uids"]
    if uid is not None and isinstance(uids, list) and any(u != uid for u in uids):
        return f"uids {uids}, not {uid}"
    return ""

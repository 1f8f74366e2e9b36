"""The live processes in /proc (standard library only: tests/harness/run/nsinit.py uses it too)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any

SECOND_LOOK_S = 0.01  # a fork takes well under this: a second look sees the child it made


def live_processes(*files: str) -> Iterator[tuple[int, list[bytes]]]:
    """(pid, the contents of /proc/PID/FILE for each of `files`) of every process but this
    one and zombies; a process that ends while it is read is skipped."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    continue
            contents = []
            for name in files:
                with open(f"/proc/{entry}/{name}", "rb") as f:
                    contents.append(f.read())
        except (OSError, IndexError):
            continue
        yield int(entry), contents


def lingering(find: Callable[[], list[Any]], grace_s: float) -> list[Any]:
    """What `find` (a scan of /proc) still finds `grace_s` after a run's command ended: a
    helper still exiting, such as multiprocessing's resource tracker, is not a survivor. A
    scan that finds nothing looks once more: a process that forks while /proc is read is
    listed, then gone (a zombie) by the time it is read, its child born after the listing
    (a double fork's escape passed for clean 1 time in 5 under load)."""
    deadline = time.monotonic() + grace_s
    left, empty_looks = find(), 0
    while True:
        if left and time.monotonic() >= deadline:
            return left
        if not left:
            empty_looks += 1
            if empty_looks == 2:
                return left
        time.sleep(0.05 if left else SECOND_LOOK_S)
        left = find()

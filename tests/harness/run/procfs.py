"""The live processes in /proc (standard library only: tests/harness/run/nsinit.py uses it too)."""

from __future__ import annotations

import os
from collections.abc import Iterator


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

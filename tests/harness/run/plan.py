"""The suite's own fault plan (the nemesis: `KIND@STEP:RANK`), handed to a run's processes
without the run being able to read it: nothing in the run's environment, arguments, files
or /proc names the kind, step or rank of the fault before it happens.

The runner serves the plan on a Unix socket in the run's directory; the run's environment
names only the socket. Each process's observer asks once, at its interpreter's start, before
the program's first line runs; the server answers each process (its pid, from the kernel's
SO_PEERCRED) once, so the program asking again from a process gets nothing. A forked child
inherits its parent's observer, plan included; a fresh interpreter's observer asks itself.
What stays out of reach: a program that reads its own observer's memory, or starts an
interpreter without the observer to ask in its place (docs/observer.md, the threat model).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from pathlib import Path

SOCKET_VAR = "CAPSTONE_NEMESIS_SOCK"
# The session's seeds, set by the pytest controller for its xdist workers, never a run's: the
# fault seed draws the nemesis's steps and ranks, the suite seed is in every run's --seed.
SUITE_SEED_VAR = "CAPSTONE_SUITE_SEED"
FAULT_SEED_VAR = "CAPSTONE_FAULT_SEED"
SEED_VARS = (SUITE_SEED_VAR, FAULT_SEED_VAR)
_SUN_PATH_MAX = 107  # sockaddr_un's sun_path: 108 bytes with its terminating NUL


class PlanServer:
    """Serves `plan` from `directory`/plan.sock until `close`."""

    def __init__(self, directory: Path, plan: str) -> None:
        self.path = directory / "plan.sock"
        if len(bytes(self.path)) > _SUN_PATH_MAX:  # the kernel's "AF_UNIX path too long"
            raise OSError(f"the fault plan's socket {self.path} is {len(bytes(self.path))} "
                          f"bytes, over the {_SUN_PATH_MAX} a Unix socket's path may have: "
                          "give the session a shorter temporary root (pytest --basetemp "
                          "/tmp/NAME, or a shorter TMPDIR)")
        self.path.unlink(missing_ok=True)
        self.plan = plan.encode()
        self.served: set[int] = set()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(self.path))
        self.path.chmod(0o666)  # the run user's processes connect too
        self.sock.listen(64)
        self.thread = threading.Thread(target=self._serve, daemon=True,
                                       name="capstone-plan")
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed: the run is over
                return
            with conn:
                pid = struct.unpack("3i", conn.getsockopt(
                    socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[0]
                if pid not in self.served:
                    self.served.add(pid)
                    with contextlib.suppress(OSError):
                        conn.sendall(self.plan)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.path.unlink(missing_ok=True)

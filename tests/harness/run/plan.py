"""The suite's own fault plan (the nemesis: `KIND@STEP:RANK`), handed to a run's processes
without the run being able to read it: nothing in the run's environment, arguments, files
or /proc names the kind, step or rank of the fault before it happens.

The runner serves the plan on a Unix socket in the run's directory; the run's environment
names only the socket. The observer asks as the run goes, at each training step's first
backward ("backward STEP RANK") and each checkpoint's save ("save STEP RANK"), and the plan
answers only where its fault fires: the question that names its moment (a NaN or a kill at
a step's backward, a torn save at a checkpoint's), once for the whole run; every other
question, and any after it fired, gets nothing. So no process of the run, forked or fresh,
learns the fault before the rank meets it: a process that guesses the moment in the rank's
place takes the fault from it (the suite then sees its fault never made, and charges it).
What stays out of reach: a program that reads its own observer's memory (docs/observer.md,
the threat model).
"""

from __future__ import annotations

import contextlib
import socket
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
        self.fired = False
        self.lock = threading.Lock()
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
            with conn, contextlib.suppress(OSError):
                conn.settimeout(2.0)  # a question is one short line, sent at once
                asked = b""
                while b"\n" not in asked and len(asked) < 64:
                    chunk = conn.recv(64)
                    if not chunk:
                        break
                    asked += chunk
                if self.fires(asked.decode(errors="replace").strip()):
                    conn.sendall(self.plan)

    def fires(self, question: str) -> bool:
        """Whether `question` ("backward STEP RANK" or "save STEP RANK") names the moment the
        plan's fault fires, the first time it is asked (the fault fires once per run)."""
        with self.lock:
            if self.fired:
                return False
            kind, _, where = self.plan.decode().partition("@")
            step, _, rank = where.partition(":")
            when = "save" if kind == "killsave" else "backward"
            if question.split() == [when, step, rank]:
                self.fired = True
                return True
            return False

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.path.unlink(missing_ok=True)

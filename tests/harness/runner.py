"""Run one implementation of run contract v1 as a black box, under a hard time bound.

The suite never imports the code under test. It starts the command in a new session with
a unique token in its environment, sends stdout/stderr to files (a stray process holding a
pipe open cannot stall the suite, and megabytes of output cannot fill memory), waits at most
`timeout_s`, and then kills every process that carries the token: the process group first,
then anything that left the group (setsid, double fork) but kept the environment.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

TOKEN_VAR = "CAPSTONE_SUITE_RUN"
SESSION_VAR = "CAPSTONE_SUITE_SESSION"  # set per pytest session, inherited by xdist workers
TAIL_BYTES = 4096


@dataclass
class Outcome:
    """How a run ended, as the suite saw it (serialisable: shared across xdist workers)."""

    argv: list[str]
    out: str
    returncode: int | None  # None: killed at the bound
    timed_out: bool
    wall_s: float
    stdout_tail: str = ""
    stderr_tail: str = ""
    alive_at_bound: list[int] = field(default_factory=list)  # pids still running at the bound
    survivors: list[int] = field(default_factory=list)  # pids that needed a kill after exit
    token: str = ""  # the environment marker every process of this run carried

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    @classmethod
    def load(cls, path: Path) -> Outcome:
        return cls(**json.loads(path.read_text()))

    def reason(self) -> str:
        """One line: how the run ended."""
        if self.timed_out:
            return (f"killed after the {self.wall_s:.0f}s bound "
                    f"({len(self.alive_at_bound)} processes alive)")
        if self.returncode != 0:
            last = [ln for ln in self.stderr_tail.splitlines() if ln.strip()]
            return f"exit code {self.returncode}: {last[-1][:200] if last else '(no stderr)'}"
        return "exit code 0"


def _tail(path: Path) -> str:
    size = path.stat().st_size if path.exists() else 0
    with open(path, "rb") as f:
        f.seek(max(0, size - TAIL_BYTES))
        return f.read().decode("utf-8", "replace")


def session_prefix() -> str:
    """Token prefix of this suite session: runs of other sessions are never touched."""
    return os.environ.get(SESSION_VAR, "nosession") + "-"


def processes_with_token(token: str, prefix: bool = False) -> list[int]:
    """Pids whose environment carries `token` (every descendant of a run, wherever it went);
    with `prefix`, every run whose token starts with it."""
    needle = f"{TOKEN_VAR}={token}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        values = env.split(b"\0")
        if state != b"Z" and (needle in values if not prefix else
                               any(v.startswith(needle) for v in values)):
            pids.append(int(entry))
    return pids


def kill_pids(pids: Sequence[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _kill_all(pgid: int, token: str) -> None:
    """SIGKILL the run's process group, then whatever still carries its token."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        pids = processes_with_token(token)
        if not pids:
            return
        kill_pids(pids)
        time.sleep(0.05)


def _limits(mem_bytes: int | None, file_bytes: int | None) -> Callable[[], None]:
    def apply() -> None:
        if mem_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))
        if file_bytes:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))
    return apply


def run_command(argv: Sequence[str], out: Path, timeout_s: float, cwd: Path | None = None,
                mem_bytes: int | None = None, file_bytes: int | None = None) -> Outcome:
    """Run `argv` to completion or to the bound; never leaves a process of it behind."""
    out.parent.mkdir(parents=True, exist_ok=True)
    token = session_prefix() + uuid.uuid4().hex
    env = dict(os.environ, **{TOKEN_VAR: token, "OMP_NUM_THREADS": "1",
                              "PYTHONDONTWRITEBYTECODE": "1"})
    logs = out.parent / f"{out.name}.log"
    logs.mkdir(parents=True, exist_ok=True)
    stdout_path, stderr_path = logs / "stdout", logs / "stderr"
    t0 = time.monotonic()
    with open(stdout_path, "wb") as so, open(stderr_path, "wb") as se:
        try:
            proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=so, stderr=se,
                                    cwd=cwd, env=env, start_new_session=True,
                                    preexec_fn=_limits(mem_bytes, file_bytes))
        except OSError as e:
            return Outcome(list(argv), str(out), 127, False, 0.0, "", f"cannot start: {e}",
                           token=token)
        timed_out, alive = False, []
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            alive = processes_with_token(token)
        # The leader is done (or past the bound): whatever else carries the token goes too.
        survivors = [] if timed_out else processes_with_token(token)
        _kill_all(proc.pid, token)
        proc.wait()
    wall = time.monotonic() - t0
    return Outcome(list(argv), str(out), None if timed_out else proc.returncode, timed_out, wall,
                   _tail(stdout_path), _tail(stderr_path), alive, survivors, token)

"""A warm start for the programs this repository ships: the reference (`python -m capstone`),
its mutants (`python tests/mutants/launch.py MUTANT`) and the suite's corpus
(`tests/students/*.py`, `tests/styles/*.py`, `tests/holdout/*.py`) run by the suite's own
tests, or graded in place (`--impl`). Submissions always start cold.

A run of the reference is mostly `import torch` (1.6-1.9 CPU-s of ~2). The fork server here
imports torch, the reference and the observer once; each run is then a fork of it:

    runner --connect--> server            (outside the run's namespaces)
    unshare > nsinit > `python -I -S warm.py client FD -- ARGV`   (the run's first process)
    client --SCM_RIGHTS: stdio, /proc/self/ns/{net,mnt,pid}, argv, env, cwd, limits--> server
    server --fork--> helper: setns(net, mnt, pid) --fork--> the run's program (PID n inside)
    helper --exit status--> client, which ends with it

so the program runs inside the run's namespaces (its own network, the confined filesystem,
a PID of the namespace: nsinit sees it, and the namespace's end ends it), with the run's
argv, environment, working directory, limits, user and stdio, and the observer retargeted to
the run's directory (`_Observer.retarget`). The client is started with `-I -S`: the observer
never loads in it, so the run's processes are the program's own, as in a cold start.
Only under namespace containment (the runner falls back to a cold start elsewhere).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import random
import resource
import runpy
import signal
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
LAUNCHER = ROOT / "tests" / "mutants" / "launch.py"
# The suite's own corpus of programs written other ways than the reference (students'
# mistakes, the ecosystem's styles, the hold-out mistakes): shipped here and run by the suite's
# own tests, so they start warm there too, and where --impl names one of them in place (the
# grades tier's mutants and hold-outs). Copied into a submission's folder (a platform,
# bench/holdout.py) or run by the corpus tier's cold cache they start cold; tests/hostile and
# tests/submissions always do.
CORPUS = tuple(ROOT / "tests" / d for d in ("students", "styles", "holdout"))
CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWPID = 0x00020000, 0x40000000, 0x20000000
# Joined in this order; every descriptor is opened first (after the mount namespace,
# /proc is the run's and the client's pid means nothing there).
NAMESPACES = (("net", CLONE_NEWNET), ("mnt", CLONE_NEWNS), ("pid", CLONE_NEWPID))
# (the bounds.py ones too: a warm program keeps the open files and processes of a cold one)
LIMITS = ("RLIMIT_DATA", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_NPROC")
START_S = 60.0  # how long the server may take to import torch and listen


def eligible(argv: list[str]) -> bool:
    """`argv` runs a program this repository ships, with this interpreter: the reference, a
    mutant or a program of the suite's corpus."""
    if len(argv) < 2 or argv[0] != sys.executable:
        return False
    return argv[1:3] == ["-m", "capstone"] or Path(argv[1]).resolve() == LAUNCHER \
        or in_corpus(argv)


def in_corpus(argv: list[str]) -> bool:
    """`argv` runs a program of the suite's corpus (tests/students, tests/styles); its runs
    start from the server that has imported TorchDynamo too (`_corpus_server`)."""
    if len(argv) < 2:
        return False
    script = Path(argv[1]).resolve()
    return script.suffix == ".py" and script.parent in CORPUS


def connect(path: str) -> socket.socket:
    """A connection to the fork server listening at `path` (OSError: none is listening)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        conn.connect(path)
    except OSError:
        conn.close()
        raise
    return conn


def client_argv(argv: list[str], fd: int) -> list[str]:
    """The run's first process under a warm start: the client, handed connection `fd`."""
    return [sys.executable, "-I", "-S", str(Path(__file__).resolve()), "client", str(fd),
            "--", *argv]


# -- the client: the run's first process, inside its namespaces -------------------------------
def client(fd: int, argv: list[str]) -> int:
    conn = socket.socket(fileno=fd)
    ns = [os.open(f"/proc/self/ns/{name}", os.O_RDONLY) for name, _ in NAMESPACES]
    request = {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd(),
               "limits": {n: resource.getrlimit(getattr(resource, n)) for n in LIMITS},
               "user": [os.getuid(), os.getgid()]}
    socket.send_fds(conn, [json.dumps(request).encode()], [0, 1, 2, *ns])
    reply = conn.recv(4096)
    if not reply:
        print("warm start: the fork server ended before the run did", file=sys.stderr)
        return 70
    ended = json.loads(reply)
    if "error" in ended:
        print(f"warm start: {ended['error']}", file=sys.stderr)
        return 70
    code = int(ended["code"])
    if code < 0:  # the program died of a signal: so does its stand-in
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


# -- the server ------------------------------------------------------------------------------
def serve(path: str) -> None:
    """Import what the runs import, then fork a run per connection, forever."""
    import importlib
    import pkgutil

    import torch  # noqa: F401  the floor every run of the reference pays

    import capstone

    for m in pkgutil.iter_modules(capstone.__path__):
        if m.name not in ("__main__", "demo", "plot", "pytest_impl"):
            importlib.import_module(f"capstone.{m.name}")
    importlib.import_module("tests.mutants.catalogue")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    srv.bind(path + ".tmp")
    os.replace(path + ".tmp", path)  # connectable once it exists
    srv.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # helpers are reaped by the kernel
    corpus: socket.socket | None = None  # the corpus server's end, once one was asked for
    while True:
        conn, _ = srv.accept()
        with contextlib.suppress(OSError, ValueError):
            msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 8)
            req = json.loads(msg)
            if in_corpus(req["argv"]):
                corpus = corpus or _corpus_server(srv)
                socket.send_fds(corpus, [msg], [conn.fileno(), *fds])
            else:
                _fork_helper(conn, req, fds, srv)
            for fd in fds:
                os.close(fd)
        conn.close()


def _corpus_server(listener: socket.socket) -> socket.socket:
    """A second server, forked from this one, that has imported TorchDynamo too: every
    `torch.optim.Optimizer` the corpus builds imports it (2-2.5 CPU-s), in each forked rank
    since the ranks build theirs after the fork (the reference steps `torch.optim.adam.adam`
    and never does). Only the corpus's runs start from it, so the reference's and the
    mutants' processes hold no more objects than a cold start's. Returns this end of the pair
    the runs' requests are handed over by, with their connection as the first descriptor."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    if os.fork() != 0:
        theirs.close()
        return mine
    listener.close()
    mine.close()
    import torch._dynamo  # noqa: F401

    while True:
        msg, fds, _, _ = socket.recv_fds(theirs, 1 << 20, 9)
        if not msg:  # the server ended
            os._exit(0)
        with contextlib.suppress(OSError, ValueError):
            conn = socket.socket(fileno=fds[0])
            _fork_helper(conn, json.loads(msg), fds[1:], theirs)
            conn.close()
        for fd in fds[1:]:
            with contextlib.suppress(OSError):
                os.close(fd)


def _fork_helper(conn: socket.socket, req: dict[str, Any], fds: list[int],
                 listener: socket.socket) -> None:
    """Fork the helper that starts the run `req` asks for (this process goes on serving)."""
    if os.fork() == 0:
        listener.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        try:
            _helper(conn, req, fds)
        finally:
            os._exit(70)


def _helper(conn: socket.socket, req: dict[str, Any], fds: list[int]) -> None:
    """Join the run's namespaces, start its program there, and report how it ended."""
    stdio, ns = fds[:3], fds[3:]
    libc = ctypes.CDLL(None, use_errno=True)
    for fd, (name, flag) in zip(ns, NAMESPACES, strict=True):
        if libc.setns(fd, flag) != 0:
            err = os.strerror(ctypes.get_errno())
            conn.send(json.dumps({"error": f"cannot join the run's {name} namespace: {err}"})
                      .encode())
            os._exit(0)
        os.close(fd)
    pid = os.fork()  # the first process the server made inside the PID namespace
    if pid == 0:
        conn.close()
        _program(req, stdio)
    for fd in stdio:
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    with contextlib.suppress(OSError):
        conn.send(json.dumps({"code": os.waitstatus_to_exitcode(status)}).encode())
    os._exit(0)


def _program(req: dict[str, Any], stdio: list[int]) -> None:
    """Become the run's program, as `python ARGV` started in the run's world would be."""
    code: Any = 1
    try:
        os.setsid()
        for i, fd in enumerate(stdio):
            os.dup2(fd, i)
            os.close(fd)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        for name, (soft, hard) in req["limits"].items():
            resource.setrlimit(getattr(resource, name), (soft, hard))
        with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
        from tests.harness.run import privileges  # the server's: the client imports none

        uid, gid = req["user"]  # the program's user (nsinit's drop), never the server's root
        privileges.drop((uid, gid) if (uid, gid) != (os.getuid(), os.getgid()) else None)
        random.seed()  # the server's state is every fork's: draw anew, as a new process does
        argv = list(req["argv"])
        sys.orig_argv = argv
        observer = sys.modules.get("sitecustomize")
        if observer is not None and getattr(observer, "_OBSERVER", None) is not None:
            observer._OBSERVER.retarget()
        code = 0
        try:
            if argv[1] == "-m":
                sys.argv = [argv[2], *argv[3:]]
                runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
            else:
                sys.argv = argv[1:]
                sys.path[0] = str(Path(argv[1]).resolve().parent)
                runpy.run_path(argv[1], run_name="__main__")
        except SystemExit as e:
            code = e.code
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    os._exit(code)


class Server:
    """One fork server (per xdist worker): started when made (back once it listens), ended
    with `close`. `env` is a run's environment (the runner's `observed_environment`), the
    observer recording into a folder of the server's own until a run retargets it; no run
    token: the server is the suite's, not a run's."""

    def __init__(self, directory: Path, env: dict[str, str]) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = str(directory / "warm.sock")
        with open(directory / "warm.log", "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.harness.run.warm", "serve", self.path],
                cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=log, start_new_session=True)
        deadline = time.monotonic() + START_S
        while not os.path.exists(self.path):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"the fork server did not start (see {directory}/warm.log)")
            time.sleep(0.05)

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


if __name__ == "__main__":
    if sys.argv[1:2] == ["client"]:
        rest = sys.argv[3:]
        sys.exit(client(int(sys.argv[2]), rest[1:] if rest[:1] == ["--"] else rest))
    if sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2])

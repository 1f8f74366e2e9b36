"""Start the ranks and their rendezvous; report the first rank that fails.

Two ways in:
- the default launcher forks `world_size` ranks from this process (torch is imported once,
  so start-up costs ~0.1 s instead of one torch import per rank; from a process that already
  runs threads, through a fork server instead) and joins them through a
  `FileStore` in the run directory (no ports, so parallel test runs cannot collide); each
  rank reports its result through a pipe, and a gloo rank ends once the launcher, holding
  every rank's result, releases it (`_await_release`);
- under `torchrun` (RANK/WORLD_SIZE/MASTER_ADDR set) this process *is* one rank and joins
  through `env://`, which is how the same code reaches several machines.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from capstone.config import under_torchrun
from capstone.world import World

RankFn = Callable[[World], Any]

_PR_SET_PDEATHSIG = 1
FAILURE_GRACE_S = 1.0
# Errors a rank sees when a peer dies: never the root cause when another rank failed.
_SECONDARY = ("Connection closed by peer", "Connection reset by peer", "Broken pipe",
              "Timed out waiting")


class LaunchError(RuntimeError):
    """A rank failed; the message names the rank and why."""


def run_ranks(fn: RankFn, world_size: int, run_dir: Path, timeout_s: float,
              backend: str = "gloo", device: str = "cpu") -> list[Any]:
    """Run `fn(world)` on every rank; return the ranks' results in rank order.

    Raises LaunchError naming the first rank that failed; the other ranks are stopped at
    once rather than left waiting on a collective that will never complete.
    """
    if under_torchrun():
        return [_torchrun_rank(fn, timeout_s, backend, device)]
    run_dir.mkdir(parents=True, exist_ok=True)
    store_path = run_dir / f".rendezvous-{os.getpid()}"
    store_path.unlink(missing_ok=True)
    ctx = _context()
    procs: list[Any] = []
    conns: dict[int, Connection] = {}
    finished = False
    try:
        for rank in range(world_size):
            parent_end, child_end = ctx.Pipe()  # duplex: the result up, the release down
            p = ctx.Process(target=_rank_main, name=f"capstone-rank-{rank}",
                            args=(fn, rank, world_size, store_path, timeout_s, backend,
                                  device, child_end))
            p.start()
            child_end.close()
            procs.append(p)
            conns[rank] = parent_end
        results = _collect(procs, conns)
        finished = True
        return results
    finally:
        for conn in conns.values():
            _release(conn)
        for p in procs:
            if not finished and p.is_alive():
                p.kill()
            p.join()
        store_path.unlink(missing_ok=True)


def _context() -> Any:
    """fork while this process has one thread (a rank starts in ~0.1 s, torch already in
    memory); forkserver once it has more (a test runner's threads, torch's thread pool after
    a computation): a fork copies only the calling thread, so a lock another thread held
    stays held in the child (Python 3.12 warns of it; 3.14 makes forkserver the default)."""
    try:
        threads = len(os.listdir("/proc/self/task"))
    except OSError:  # no /proc: assume the worst
        threads = 2
    if threads == 1:
        return mp.get_context("fork")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])  # the server imports torch once, then forks
    return ctx


def _collect(procs: list[Any], conns: dict[int, Connection]) -> list[Any]:
    """Each rank's result, read as it reports it (a gloo rank then waits for its release);
    a rank that reports an error or exits without a result is a failure."""
    results: dict[int, Any] = {}
    failures: list[tuple[int, str]] = []  # in the order the launcher saw them
    # A rank is pending until its result or its exit is seen, whichever comes first.
    pending: dict[Any, int] = {}
    for rank, p in enumerate(procs):
        pending[p.sentinel] = pending[conns[rank]] = rank
    deadline = None
    while pending:
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready = wait(list(pending), timeout=timeout)
        if not ready:
            break  # the grace period is over: the ranks still running are stopped
        for handle in ready:
            if handle not in pending:
                continue  # the rank's other handle was ready in the same wait
            rank = pending[handle]
            del pending[procs[rank].sentinel], pending[conns[rank]]
            message = _receive(conns[rank])
            if message is not None and message[0] == "ok":
                results[rank] = message[1]
                continue
            proc = procs[rank]
            proc.join()  # an error report is followed by the rank's exit at once
            failures.append((rank, _describe_failure(rank, proc.exitcode, message)))
            # A crash makes its peers fail too ("connection closed by peer"), sometimes
            # before the crash itself is seen: wait briefly, then name the root cause.
            deadline = deadline or time.monotonic() + FAILURE_GRACE_S
    if failures:
        raise LaunchError(_root_cause(failures))
    return [results[r] for r in range(len(procs))]


def _root_cause(failures: list[tuple[int, str]]) -> str:
    primary = [f for f in failures if not any(s in f[1] for s in _SECONDARY)] or failures
    rank, text = primary[0]
    others = sorted(r for r, _ in failures if r != rank)
    if others:
        text += (f"\n(rank(s) {', '.join(map(str, others))} failed as a consequence: a peer "
                 "left the collective)")
    return text


def _receive(conn: Connection) -> tuple[str, Any] | None:
    try:
        if conn.poll():
            return conn.recv()  # type: ignore[no-any-return,unused-ignore]
    except (EOFError, OSError):
        pass
    return None


def _describe_failure(rank: int, exitcode: int | None, message: tuple[str, Any] | None) -> str:
    if message is not None and message[0] == "error":
        return f"rank {rank} failed: {message[1].rstrip()}"
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name
        return f"rank {rank} was killed by {name} (exit code {exitcode})"
    return f"rank {rank} exited with code {exitcode} without reporting a result"


def _rank_main(fn: RankFn, rank: int, world_size: int, store_path: Path, timeout_s: float,
               backend: str, device: str, conn: Connection) -> None:
    _die_with_parent()
    torch.set_num_threads(1)  # 4 ranks on 2 cores: more threads only fight each other
    try:
        store = dist.FileStore(str(store_path), world_size)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=timeout_s))
        try:
            result = fn(World(rank=rank, size=world_size, device=_rank_device(device, rank)))
        except BaseException:
            dist.destroy_process_group()
            raise
        if backend != "gloo":
            dist.destroy_process_group()  # NCCL's communicators must be ended explicitly
        conn.send(("ok", result))
        if backend == "gloo":
            _await_release(conn)
    except BaseException:
        exc = sys.exc_info()[1]
        conn.send(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
        conn.close()
        sys.stderr.flush()
        os._exit(1)
    conn.close()


def _release(conn: Connection) -> None:
    """Let a rank waiting in `_await_release` end. A message, not the end of the pipe:
    the ranks forked after this one hold copies of the launcher's end."""
    with contextlib.suppress(OSError):  # the rank is gone already
        conn.send(None)
    conn.close()


def _await_release(conn: Connection) -> None:
    """Wait until the launcher has every rank's result, then let this rank's process end
    without `destroy_process_group`.

    Once every rank has returned, no collective is left in flight, so ending the processes
    closes gloo's connections as the process group would: its destructor adds nothing but
    time, one tick of gloo's event loop (up to 10 ms) per peer connection, 20-40 ms a rank,
    about 0.07 s of the demo's two launches. Ending before the others have returned could
    cut a peer off in the middle of its last collective; hence the release.
    """
    with contextlib.suppress(EOFError, OSError):  # the launcher is gone: PDEATHSIG ends us
        conn.recv()


def _rank_device(device: str, local_rank: int) -> str:
    """`cuda` means this rank's own GPU (set as current, as NCCL expects)."""
    if device != "cuda":
        return device
    torch.cuda.set_device(local_rank)
    return f"cuda:{local_rank}"


def _torchrun_rank(fn: RankFn, timeout_s: float, backend: str, device: str) -> Any:
    torch.set_num_threads(1)
    dist.init_process_group(backend, init_method="env://",
                            timeout=timedelta(seconds=timeout_s))
    try:
        local = int(os.environ.get("LOCAL_RANK", dist.get_rank()))
        return fn(World(rank=dist.get_rank(), size=dist.get_world_size(),
                        device=_rank_device(device, local)))
    finally:
        dist.destroy_process_group()


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this rank if the launcher dies, so no rank outlives a killed run."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass

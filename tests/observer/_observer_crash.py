"""Where a Python rank can end with an exception, hooked so that the observer records it with
its time (loaded by the observer, tests/observer/sitecustomize.py, whose `record_raise` writes
the record): a crash's cause is read from these records, not from stderr, where launchers
interleave their ranks' tracebacks and multiprocessing prints its "Process ForkProcess-1:"
headers. Each hook records and then does what the hooked function did.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any


def patch_process(observer: Any, mod: Any) -> None:
    """multiprocessing's Process, in the fork, spawn and forkserver contexts: its
    bootstrap prints a failed run()'s traceback under a header; record it first."""
    import functools

    base = getattr(mod, "BaseProcess", None)
    real = getattr(base, "_bootstrap", None)
    if base is None or not callable(real):
        return

    @functools.wraps(real)
    def _bootstrap(process: Any, *args: Any, **kwargs: Any) -> Any:
        run = process.run

        def recorded() -> Any:
            try:
                return run()
            except BaseException as e:
                observer.record_raise(e, "multiprocessing")
                raise
        with contextlib.suppress(AttributeError, TypeError):
            process.run = recorded
        return real(process, *args, **kwargs)
    base._bootstrap = _bootstrap


def patch_hooks(observer: Any) -> None:
    """A rank that is the process's main program (subprocess and torchrun children, a
    plain script) ends through sys.excepthook; a thread (a checkpoint writer) through
    threading.excepthook."""
    import threading

    real_sys, real_thread = sys.excepthook, threading.excepthook

    def excepthook(kind: Any, value: Any, tb: Any) -> None:
        observer.record_raise(value, "main")
        real_sys(kind, value, tb)

    def thread_hook(args: Any) -> None:
        if args.exc_value is not None:
            observer.record_raise(args.exc_value, "thread")
        real_thread(args)
    sys.excepthook, threading.excepthook = excepthook, thread_hook


def patch_spawn(observer: Any, mod: Any) -> None:
    """mp.spawn's children hand their traceback to the parent, which re-raises only the
    first it notices (often a peer that lost the collective, not the cause): each
    child's exception is recorded here, with its time."""
    import functools

    real = getattr(mod, "_wrap", None)
    if not callable(real):
        return

    @functools.wraps(real)  # its module and name: spawn pickles it by reference
    def _wrap(fn: Any, i: int, args: Any, error_file: Any) -> Any:
        def recorded(*a: Any) -> Any:
            try:
                return fn(*a)
            except Exception as e:
                observer.record_raise(e, "mp.spawn")
                raise
        return real(recorded, i, args, error_file)
    mod._wrap = _wrap

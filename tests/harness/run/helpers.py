"""Runs at once in one pytest process: threads that compute a session's planned runs beside
the tests (RunCache.plan), so that a grading needs no pytest-xdist workers.

A grading's tests cost little; its runs cost nearly all of it, and two go at once on two CPUs.
With xdist those two runs take a controller and two workers: three pytest processes, each
~0.8-1 CPU-s to start (pytest, conftest, the graded modules' collection) before the first run
starts. Here the process that runs the tests is the only one: it computes the run a test
waits for, and each helper thread the first planned run that is ready and nobody computes,
through the same run locks as xdist's workers (a `FileLock` is per thread: another thread's
acquire waits as another process's would).
"""

from __future__ import annotations

import threading
import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.harness.run.runs import RunCache

IDLE_S = 0.05  # how often an idle helper looks again (a run ended: a resume may be ready)


class Helpers:
    """`count` threads computing `cache`'s planned runs until `stop()` (or none is left)."""

    def __init__(self, cache: RunCache, count: int) -> None:
        self.cache = cache
        self._stop = threading.Event()
        self.errors: list[Exception] = []
        self._threads = [threading.Thread(target=self._work, name=f"run-helper-{i}",
                                          daemon=True) for i in range(count)]
        for t in self._threads:
            t.start()

    def _work(self) -> None:
        try:
            while not self._stop.is_set() and self.cache.planned_left():
                if not self.cache.one_ahead():
                    self._stop.wait(IDLE_S)
        except Exception as e:
            # The run it was computing has no outcome: the test that reads it computes it
            # again in its own thread, where the same error fails that test, as it would
            # without helpers. This thread helps no more.
            self.errors.append(e)

    def stop(self) -> None:
        """Start no more runs; wait for the ones the helpers are computing (each within its
        run bound) so that no run outlives the session. A helper's error is told as a
        warning: the tests made its runs themselves."""
        self._stop.set()
        for t in self._threads:
            t.join()
        for e in self.errors:
            warnings.warn(f"a run helper stopped ({e!r}): the tests made its runs",
                          stacklevel=2)

"""Where a class's grading sessions run: here (threads, `-j K` at once), or as one job per
submission through submitit (`--executor local`: processes of this machine; `--executor
slurm`: a job array on a Slurm cluster). Every way grades a submission with the same
`session.grade`, in a session of its own, so the grades, feedback and summary are the same.

A Slurm cluster must provide a filesystem that the login node and the compute nodes share,
holding this checkout, its venv (the same path) and the output folder; submitit writes
each job's pickled call, logs and result under OUT/submitit/.

submitit is the `class` extra (`pip install -c constraints.txt -e ".[class]"`).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tests.harness.platforms.session import Grading, grade
from tests.harness.run import box

EXECUTORS = ("here", "local", "slurm")


@dataclass(frozen=True)
class JobResources:
    """What one submission's job asks the scheduler for."""

    cpus: int = 2
    timeout_min: float = 15.0  # a session's own bound (600 s) and the start-up around it
    partition: str = ""  # Slurm partition ("" : the cluster's default)
    parallelism: int = 0  # jobs of the array at once (0: as many as the scheduler gives)

    @property
    def mem_mb(self) -> int:
        """Sized from what the suite measured: the session (one pytest process) and the
        runs it makes at once, within the headroom the box planner keeps."""
        return int(math.ceil(box.session_mb(2 if self.cpus >= 2 else 1) / 256) * 256)


def grade_one(folder: Path, out: Path, g: Grading) -> dict[str, Any]:
    """One submission's session, its results and log under `out` (a job's whole work)."""
    return grade(folder, out / "results.json", g, log=out / "pytest.log")


def run_jobs(todo: list[tuple[str, Path, Path]], g: Grading, executor: str = "here",
             jobs: int = 1, resources: JobResources | None = None, folder: Path | None = None
             ) -> Iterator[tuple[str, dict[str, Any]]]:
    """Grade each (name, submission folder, output folder) of `todo`; yield (name, results)
    as they finish."""
    if not todo:
        return
    if executor == "here":
        if jobs > 1:
            g = replace(g, runs_at_once=1)  # K sessions share the cores: one run in each
        with ThreadPoolExecutor(max(1, jobs)) as pool:
            futures = {pool.submit(grade_one, f, o, g): n for n, f, o in todo}
            for fut in as_completed(futures):
                yield futures[fut], fut.result()
        return
    try:
        import submitit
    except ImportError:
        raise SystemExit(f"--executor {executor} needs submitit: pip install -c "
                         "constraints.txt -e \".[class]\"") from None
    res = resources or JobResources()
    ex = submitit.AutoExecutor(folder=str(folder or Path("submitit")),
                               cluster="local" if executor == "local" else "slurm")
    params: dict[str, Any] = {"timeout_min": math.ceil(res.timeout_min),  # submitit: ints
                              "cpus_per_task": res.cpus, "mem_gb": math.ceil(res.mem_mb / 1024),
                              "name": "capstone-grade"}
    if executor == "slurm":
        if res.partition:
            params["slurm_partition"] = res.partition
        if res.parallelism:
            params["slurm_array_parallelism"] = res.parallelism
    ex.update_parameters(**params)
    # submitit's local executor starts every job at once: in waves of `jobs` here, as -j.
    wave = len(todo) if executor == "slurm" else max(1, jobs)
    # A Slurm job has a box of its own (the session plans its runs at once in it); local
    # jobs of one wave share this machine's cores.
    g = replace(g, runs_at_once=None if executor == "slurm" or wave == 1 else 1)
    for i in range(0, len(todo), wave):
        batch = todo[i:i + wave]
        submitted = ex.map_array(grade_one, [f for _, f, _ in batch], [o for _, _, o in batch],
                                 [g] * len(batch))
        print(f"grade_class: {len(batch)} job(s) submitted ({executor}): "
              f"{', '.join(j.job_id for j in submitted)}", file=sys.stderr)
        for (name, _, _), job in zip(batch, submitted, strict=True):
            yield name, job.result()

"""The two ways into the reference: its own forking launcher and torchrun's env://, on one
machine and as two machines (two torchrun agents on this host); the suite's observer follows
torchrun into its workers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch.distributed as dist

from capstone.launch import run_ranks
from capstone.world import World
from tests.harness.check.checks import Run
from tests.harness.check.observed_checks import check_genuine_ranks
from tests.harness.observe.parse import parse_run
from tests.harness.observe.traces import load_observation
from tests.harness.run.runner import Watch, run_command
from tests.harness.run.runs import N2

ROOT = Path(__file__).resolve().parents[1]
TWO_NODES = ROOT / "tests" / "harness" / "run" / "two_nodes.py"


def _without_wall_time(records: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {s: {k: v for k, v in r.items() if k != "step_time_s"} for s, r in records.items()}


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.parametrize("layout", ["one machine", "two machines"])
def test_torchrun_gives_the_bytes_of_the_forking_launcher(reference_only, run, tmp_path,
                                                          layout):
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    if torchrun is None:
        pytest.skip("no torchrun next to this python")
    out = tmp_path / "torchrun"
    args = ["-m", "capstone", "--out", str(out), *N2.flags(None)]
    if layout == "one machine":
        argv = [torchrun, "--standalone", "--nproc-per-node", "2", *args]
    else:  # ranks told apart by RANK, not LOCAL_RANK (0 on both "machines")
        argv = [sys.executable, str(TWO_NODES), torchrun, *args]
    outcome = run_command(argv, out, 90, ROOT, watch=Watch(observe=True, contain=True))
    assert outcome.returncode == 0, outcome.reason()
    # the observer reached torchrun's workers too: two ranks, each its own process
    observed = load_observation(Path(outcome.observe_dir))
    assert check_genuine_ranks(Run("torchrun", 3, 2, outcome, parse_run(out, 2), observed)) == []
    forked, launched = run(N2).parsed, parse_run(out, 2)
    assert launched.problems == []
    for rank in range(2):
        assert _without_wall_time(launched.records[rank]) == \
            _without_wall_time(forked.records[rank]), f"rank {rank}"
    for step, ck in forked.checkpoints.items():
        assert launched.checkpoints[step].manifest == ck.manifest, f"step {step}"


def test_the_launcher_forks_its_ranks_from_a_single_threaded_process():
    """A fork copies only the calling thread: a lock another thread held (numpy's OpenBLAS
    pool, a test runner's I/O thread) stays held in the child, and Python >= 3.12 warns.
    The reference's launcher process has one thread when it forks; a process that already
    runs threads gets a fork server instead, and the ranks' results are the same."""
    probe = ("import os, threading, capstone.launch as l; "
             "print(len(os.listdir('/proc/self/task')), l._context().get_start_method()); "
             "threading.Thread(target=threading.Event().wait, daemon=True).start(); "
             "print(l._context().get_start_method())")
    env = {k: v for k, v in os.environ.items()  # a user's shell: conftest sets OMP's
           if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", probe],
                         capture_output=True, text=True, check=True, cwd=ROOT,
                         env=env).stdout.split()
    assert out == ["1", "fork", "forkserver"], out


def test_a_resume_is_launched_by_fork_too(tmp_path):
    """The demo's second run (the resume) starts from the same launcher process as its first:
    checking the checkpoint and the model's size before it (preflight) must leave that
    process single-threaded, or its ranks go through a fork server that imports torch again
    (the demo then took ~2x `import torch` instead of ~1x)."""
    probe = f"""
import os
from dataclasses import replace
from pathlib import Path
import capstone.launch as l
from capstone.cli import preflight, run
from capstone.config import TrainConfig
cfg = TrainConfig(out=Path({str(tmp_path / "a")!r}), world_size=2, steps=2, checkpoint_every=1)
run(cfg)
preflight(replace(cfg, out=Path({str(tmp_path / "b")!r}),
                  resume=cfg.out / "checkpoints" / "step-000001"))
print(len(os.listdir("/proc/self/task")), l._context().get_start_method())
"""
    env = {k: v for k, v in os.environ.items()  # a user's shell: conftest sets OMP's
           if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", probe],
                         capture_output=True, text=True, check=True, cwd=ROOT,
                         env=env).stdout.split()
    assert out[-2:] == ["1", "fork"], out


def _process_state(pid: int) -> str:
    """psutil's status of a process ("running", "sleeping", ...; "zombie" once it has exited
    and is not yet reaped), "" once it is gone."""
    try:
        return str(psutil.Process(pid).status())
    except psutil.NoSuchProcess:
        return ""


def _late_rank_sees_early_ranks(world: World) -> list[str]:
    pids: list[int | None] = [None] * world.size
    dist.all_gather_object(pids, os.getpid())
    if world.rank != world.size - 1:
        return []  # these ranks are done at once
    time.sleep(0.5)  # the others have long returned
    return [_process_state(pid) for pid in pids[:-1] if pid is not None]


def test_a_gloo_rank_that_returned_first_ends_only_once_every_rank_returned(tmp_path):
    """A gloo rank skips destroy_process_group (its destructor waits up to 10 ms per peer
    connection): ending its process closes those connections, which is safe only once no
    peer can still be inside a collective with it. So a rank that is done waits for the
    launcher's release, sent once every rank has returned."""
    states = run_ranks(_late_rank_sees_early_ranks, 3, tmp_path, 20.0)[-1]
    assert len(states) == 2 and all(
        s and s not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD) for s in states), \
        f"ranks that returned first ended before the last rank returned: states {states}"

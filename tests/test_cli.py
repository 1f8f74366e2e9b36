"""Command-line contract of the reference: bad flags exit 2 with one line that says what to
pass instead, and nothing is written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from capstone.cli import main
from tests.harness.run.runner import run_command

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("flags, says", [
    (["--steps", "-3"], "--steps must be >= 1"),
    (["--world-size", "0"], "--world-size must be >= 1"),
    (["--batch-size", "x"], "--batch-size takes a whole number"),
    (["--inject", "garbage"], "--inject expects KIND@STEP"),
    (["--inject", "nan@0"], "--inject expects KIND@STEP"),
    (["--inject", "nan@30"], "would never fire"),
    (["--checkpoint-every", "25"], "after the last step"),
    (["--pg-timeout", "-1"], "positive number of seconds"),
    (["--lr", "0"], "--lr must be positive"),
    (["--frobnicate"], "unrecognized arguments"),
    (["--backend", "nccl"], "add --device cuda"),
    (["--tensor-parallel", "3"], "must divide --world-size"),
    (["--micro-batches", "3"], "does not split into --micro-batches 3"),
    (["--inject", "killsave@7"], "needs a checkpoint at step 7"),
    (["--n-embd", "30"], "not a multiple of 4 heads"),
    ([], "required: --out"),
])
def test_bad_flag_exits_2_with_one_line(tmp_path, capsys, flags, says):
    out = tmp_path / "run"
    argv = (["--out", str(out)] if flags else ["--seed", "1"]) + flags
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err
    assert not out.exists(), "a refused run must not create its run directory"


@pytest.mark.slow
def test_a_tensor_parallel_checkpoint_resumes_only_on_its_mesh(tmp_path, run_cache, capsys):
    """A shard of a --tensor-parallel run holds its rank's heads: resumed by another mesh it
    would be read as other parameters, so the resume is refused with what to pass (in the
    CLI's preflight, before any rank starts: run in-process)."""
    flags = ["--world-size", "2", "--steps", "2", "--checkpoint-every", "2", "--batch-size",
             "2"]
    out = tmp_path / "a"
    first = run_command([sys.executable, "-m", "capstone", *flags, "--out", str(out),
                         "--tensor-parallel", "2"], out, 120, ROOT, watch=run_cache.watch)
    assert first.returncode == 0, first.reason()
    ckpt = out / "checkpoints" / "step-000002"
    assert '"mesh"' in (ckpt / "manifest.json").read_text()
    capsys.readouterr()
    assert main([*flags, "--steps", "3", "--out", str(tmp_path / "b"),
                 "--resume", str(ckpt)]) == 2
    assert "resume with the same --world-size 2 and --tensor-parallel 2" in \
        capsys.readouterr().err


@pytest.mark.slow
def test_a_script_without_a_main_guard_runs_once_when_its_ranks_start_by_forkserver(tmp_path):
    """A student's main.py written as the reference submission is (`exit_now(main(...))` at
    its top level, no `if __name__ == "__main__":`) whose process has a thread when it
    launches: the launcher then starts the ranks by forkserver, and each rank re-imports the
    script before its own code runs. Those re-imports must do nothing (each used to run the
    whole command again in the rank, refuse the run directory and exit 2)."""
    script = tmp_path / "main.py"
    script.write_text("import sys, threading, time\n"
                      "threading.Thread(target=time.sleep, args=(120,), daemon=True).start()\n"
                      "from capstone.cli import exit_now, main\n"
                      "exit_now(main(sys.argv[1:]))\n")
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, str(script), "--out", str(out), "--world-size", "2",
                           "--steps", "2", "--checkpoint-every", "0"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0 and "error" not in done.stderr, done.stderr[-2000:]
    for rank in (0, 1):  # step 0, 1 and 2, once each
        steps = [json.loads(line)["step"] for line in
                 (out / "metrics" / f"rank-{rank}.jsonl").read_text().splitlines()]
        assert steps == [0, 1, 2], (rank, steps)


def test_non_empty_run_directory_is_refused(tmp_path, capsys):
    (tmp_path / "precious.txt").write_text("keep me")
    assert main(["--out", str(tmp_path)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert (tmp_path / "precious.txt").read_text() == "keep me"


def test_missing_resume_checkpoint_is_a_clear_error(tmp_path, capsys):
    assert main(["--out", str(tmp_path / "r"), "--resume", str(tmp_path / "nope")]) == 1
    assert "no such checkpoint directory" in capsys.readouterr().err


def test_real_process_exit_code_and_help():
    bad = subprocess.run([sys.executable, "-m", "capstone", "--out", "x", "--steps", "zero"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    ok = subprocess.run([sys.executable, "-m", "capstone", "--out", "x", "--help"], cwd=ROOT,
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "--checkpoint-every" in ok.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu_is_refused(tmp_path, capsys):
    assert main(["--out", str(tmp_path / "r"), "--device", "cuda"]) == 2
    assert "sees no CUDA device" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_torch_is_imported_with_the_collector_paused_and_then_frozen():
    """The launcher imports torch as Python's gc docs advise a process that forks: torch's
    objects frozen (out of every later collection, in it and in its forked ranks), the
    collector paused during the import and running again after it; a process that had
    torch already (this test runner) is left as it is."""
    from capstone.cli import import_torch

    probe = ("import gc; from capstone.cli import import_torch; import_torch(); "
             "print(gc.get_freeze_count(), gc.isenabled())")
    frozen, collecting = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, check=True,
                                        capture_output=True, text=True,
                                        timeout=60).stdout.split()
    assert int(frozen) > 10_000 and collecting == "True"
    import gc

    before = gc.get_freeze_count()
    import_torch()
    assert gc.get_freeze_count() == before and gc.isenabled()

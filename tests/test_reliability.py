"""The reference under faults and hostile input: a failing rank ends the run promptly, a
rank killed mid-checkpoint never costs the previous checkpoint, corrupt checkpoints are
refused without touching anything, and a checkpoint resumes on another world size."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from capstone.checkpoint import load_checkpoint
from capstone.cli import main
from tests.harness.check.checks import PARITY_LOSS_RTOL, Run, check_rollback
from tests.harness.observe.parse import parse_run
from tests.harness.run.corrupt import plant_code_in_shard
from tests.harness.run.runner import Outcome, processes_with_token, run_command
from tests.harness.run.runs import BASE, RunCache, faulted

ROOT = Path(__file__).resolve().parents[1]
CAPSTONE = (sys.executable, "-m", "capstone")
pytestmark = pytest.mark.slow


@pytest.fixture
def capstone(run_cache: RunCache) -> Callable[..., Outcome]:
    """`capstone(out, *flags)`: one run of the reference with these flags, started as the
    run cache starts the suite's own runs (warm, observed, in its namespaces)."""
    def run(out: Path, *flags: str, timeout: float = 60) -> Outcome:
        outcome = run_command([*CAPSTONE, "--out", str(out), *flags], out, timeout, ROOT,
                              watch=run_cache.watch)
        assert processes_with_token(outcome.token) == []
        return outcome
    return run


def tree_digest(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("kind", ["crash", "kill"])
def test_a_failing_rank_ends_the_run_promptly(reference_only, tmp_path, capstone, kind):
    o = capstone(tmp_path / "run", "--inject", f"{kind}@5")
    assert o.returncode not in (0, None), o.reason()
    # The other ranks are stopped at once, not after the 30 s collective timeout.
    assert o.wall_s < 15, f"{kind}: the run took {o.wall_s:.1f}s to end"
    assert "rank 1" in o.stderr_tail.splitlines()[0], o.stderr_tail
    if kind == "crash":
        assert "Traceback" in o.stderr_tail and "InjectedCrash" in o.stderr_tail
    else:
        assert "SIGKILL" in o.stderr_tail


def test_rank_killed_mid_checkpoint_keeps_the_previous_one(reference_only, tmp_path, run,
                                                          capstone):
    out = tmp_path / "run"
    o = capstone(out, "--checkpoint-every", "5", "--inject", "killsave@10")
    assert o.returncode != 0 and "rank 1" in o.stderr_tail, o.reason()
    steps = sorted(d.name for d in (out / "checkpoints").iterdir())
    assert "step-000005" in steps and "step-000010" not in steps, steps
    load_checkpoint(out / "checkpoints" / "step-000005")  # complete and valid
    resumed = tmp_path / "resumed"
    o = capstone(resumed, "--checkpoint-every", "5", "--resume",
                 str(out / "checkpoints" / "step-000005"))
    assert o.returncode == 0, o.reason()
    base, again = run(BASE).parsed, parse_run(resumed, 4)
    for rank in range(4):
        for s in range(6, 21):
            assert again.records[rank][s]["loss"] == base.records[rank][s]["loss"], (rank, s)


def _flip(shard: Path) -> None:
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))


def _truncate(shard: Path) -> None:
    shard.write_bytes(shard.read_bytes()[:1000])


def _manifest_without(key: str) -> Callable[[Path], None]:
    def edit(shard: Path) -> None:
        path = shard.parent / "manifest.json"
        manifest = json.loads(path.read_text())
        del manifest[key]
        path.write_text(json.dumps(manifest))
    return edit


CORRUPTIONS: dict[str, tuple[Callable[[Path], object], str]] = {
    "flipped_byte": (_flip, r"rank-2.pt: sha256 does not match"),
    "truncated_shard": (_truncate, r"rank-2.pt: sha256 does not match"),
    "missing_shard": (Path.unlink, r"rank-2.pt: shard of rank 2 is missing"),
    "manifest_not_json": (lambda s: (s.parent / "manifest.json").write_text("{oops"),
                          r"manifest.json: not valid JSON"),
    "manifest_lacks_key": (_manifest_without("n_params"), r"key 'n_params' missing"),
    "pickle_with_code": (lambda s: plant_code_in_shard(s, "pwned"),
                         r"rank-2.pt: cannot be loaded with weights_only"),
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_corrupt_checkpoint_is_refused_and_nothing_is_overwritten(reference_only, tmp_path,
                                                                  run, capsys, corruption):
    edit, message = CORRUPTIONS[corruption]
    source = run(BASE).parsed.out
    victim = tmp_path / "run"  # a copy of a whole run, resumed into itself
    shutil.copytree(source, victim)
    ckpt = victim / "checkpoints" / "step-000010"
    edit(ckpt / "rank-2.pt")
    before = tree_digest(victim)
    # The refusal happens in the CLI's preflight, before any rank starts: run it in-process.
    assert main(["--out", str(victim), "--resume", str(ckpt)]) == 1
    captured = capsys.readouterr()
    first = captured.err.strip().splitlines()[0]
    assert re.search(message, first), first
    assert "pwned" not in captured.out
    assert tree_digest(victim) == before, "a refused resume changed the run directory"


@pytest.mark.parametrize("world_size", [2, 1])
def test_elastic_resume_reshards_and_matches_the_4_rank_run(reference_only, tmp_path, run,
                                                            capstone, world_size):
    base = run(BASE)
    out = tmp_path / "elastic"
    o = capstone(out, "--world-size", str(world_size), "--batch-size", str(16 // world_size),
                 "--resume", str(base.parsed.out / "checkpoints" / "step-000010"))
    assert o.returncode == 0, o.reason()
    assert f"resharding step 10 from 4 to {world_size} ranks" in o.stderr_tail
    elastic = Run("elastic", 20, world_size, o, parse_run(out, world_size))
    for s in range(11, 21):
        a, b = base.parsed.records[0][s]["loss"], elastic.parsed.records[0][s]["loss"]
        assert abs(a - b) <= PARITY_LOSS_RTOL * abs(a), f"step {s}: {a} vs {b}"
    load_checkpoint(out / "checkpoints" / "step-000020")


def test_resume_with_another_model_shape_is_refused(reference_only, tmp_path, run, capsys):
    ckpt = run(BASE).parsed.out / "checkpoints" / "step-000010"
    assert main(["--out", str(tmp_path / "r"), "--n-embd", "64", "--resume", str(ckpt)]) == 2
    assert "holds 30080 parameters" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_fault_with_no_checkpoint_to_return_to_gives_up_clearly(reference_only, tmp_path,
                                                              capstone):
    o = capstone(tmp_path / "run", "--steps", "6", "--checkpoint-every", "0",
                 "--inject", "nan@5")
    assert o.returncode == 1, o.reason()
    assert "nan detected and there is no checkpoint to roll back to" in \
        o.stderr_tail.splitlines()[0], o.stderr_tail


def test_a_fault_right_after_a_checkpoint_rolls_back_to_it(reference_only, run):
    """The step-10 checkpoint waits for step 11 to prove it healthy (a spike of step 10 shows
    only in step 11's loss); a healthy loss with bad gradients at 11 still vouches for it."""
    assert check_rollback(run(BASE), run(faulted("nan", 11)), "nan", 11) == []

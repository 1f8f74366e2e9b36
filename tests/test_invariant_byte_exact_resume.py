"""Invariant 4: checkpoints are what their manifests say, load with weights_only=True, and a
run resumed from step 10 repeats steps 11..20 bit for bit, down to the step-20 shard bytes."""

import pytest

from tests.harness.check.checks import check_checkpoint_files, check_resume
from tests.harness.run.runs import BASE, RESUMED


@pytest.mark.reads(BASE)
def test_checkpoints_match_their_manifests(run, holds):
    holds(check_checkpoint_files(run(BASE), [10, 20]), "checkpoints of the base run")


@pytest.mark.reads(BASE, RESUMED)
def test_resume_from_step_10_is_bit_identical(run, holds):
    holds(check_resume(run(BASE), run(RESUMED), from_step=10), "resume from step 10")

"""A grade is a function of the submission and the assignment's seed, and a mutant's verdict
must not depend on which seed the assignment drew: the mutant matrix graded under three seeds
(`-m seeds`, minutes: three times the matrix's runs). The matrix's verdict (caught by its
targets, with its hint) must be the same under each, and the reference must pass every check
under each. A check that is not a mutant's target may catch a wrong program under one seed's
data and not another's (recorded as `incidental`).

The seeds differ in the data, the initial weights and every fault the suite draws: seed 0
injects the NaN at step 12 and kills rank 1 at step 14 and rank 3 while it saves; seed 2, the
NaN at 18, rank 2 at step 12 and rank 1 while it saves; seed 3, the NaN at 16, rank 3 at step
19 and rank 2 while it saves."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

from tests.harness.check.matrix import CHECKS, FROM_BASE_RUN, evaluate
from tests.harness.diagnose.diagnosis import diagnose
from tests.harness.observe.violations import summarize
from tests.harness.run.runs import RunCache
from tests.mutants.catalogue import MUTANTS

LAUNCHER = Path(__file__).resolve().parent / "mutants" / "launch.py"
SEEDS = (0, 2, 3)
pytestmark = [pytest.mark.fault, pytest.mark.seeds]


def _under(run_cache: RunCache, seed: int) -> RunCache:
    """The session's cache with another assignment seed (runs are keyed by their seed)."""
    cache = copy.copy(run_cache)
    cache.seed = seed
    return cache


def _verdicts(run_cache: RunCache, impl: tuple[str, ...], names: tuple[str, ...],
              hint: str | None) -> dict[int, dict[str, object]]:
    """Per seed: which checks found something, and whether the feedback gave the hint."""
    out: dict[int, dict[str, object]] = {}
    for seed in SEEDS:
        cache = _under(run_cache, seed)
        found = evaluate(lambda spec, c=cache: c.get(impl, spec), names, seed)  # type: ignore[misc]
        verdict: dict[str, object] = {name: bool(v) for name, v in found.items()}
        if hint is not None:
            verdict["hint"] = any(hint in h for name, v in found.items()
                                  for h in diagnose(name, v))
        verdict["why"] = {name: summarize(v) for name, v in found.items() if v}
        out[seed] = verdict
    return out


def _agree(verdicts: dict[int, dict[str, object]], keys: tuple[str, ...]) -> None:
    plain = {seed: {k: verdict[k] for k in keys} for seed, verdict in verdicts.items()}
    first = plain[SEEDS[0]]
    assert all(p == first for p in plain.values()), (
        "the verdict depends on the seed:\n" + json.dumps(verdicts, indent=1, default=str))


def _incidental(verdicts: dict[int, dict[str, object]], keys: tuple[str, ...]) -> list[str]:
    """Checks other than the targets whose verdict on a wrong program changes with the data
    (a program that accumulates gradients may or may not raise the loss at some step): a
    wrong program's extra losses, reported, not a disagreement of the matrix."""
    return [k for k in keys if len({bool(v[k]) for v in verdicts.values()}) > 1]


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_a_mutant_gets_the_same_verdict_under_every_seed(reference_only, run_cache,
                                                         record_property, name):
    mutant = MUTANTS[name]
    impl = (sys.executable, str(LAUNCHER), name)
    names = tuple(dict.fromkeys(FROM_BASE_RUN + mutant.targets))
    verdicts = _verdicts(run_cache, impl, names, mutant.hint)
    record_property("seed_verdicts", json.dumps(verdicts, default=str))
    others = tuple(n for n in names if n not in mutant.targets)
    record_property("incidental", json.dumps(_incidental(verdicts, others)))
    _agree(verdicts, (*mutant.targets, "hint"))
    for seed, verdict in verdicts.items():
        for target in mutant.targets:
            assert verdict[target], f"{name} was not caught by {target} under seed {seed}"
        assert verdict["hint"], f"{name} under seed {seed}: feedback lacks {mutant.hint!r}"


def test_the_reference_passes_every_check_under_every_seed(reference_only, run_cache, impl):
    verdicts = _verdicts(run_cache, impl, tuple(CHECKS), None)
    for seed, verdict in verdicts.items():
        assert not any(verdict[k] for k in CHECKS), (seed, verdict["why"])

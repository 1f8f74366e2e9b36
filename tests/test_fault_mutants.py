"""Wrong compositions of the reference must be caught, each by the invariant it breaks.

Not selected by `-k invariant`. Every mutant runs as a real multi-rank run (see
tests/mutants/catalogue.py); the unmutated reference must pass every check. The catalogue's
per-mutant tests run in the `seeds` tier (`pytest -m seeds`, `.ci/run`) beside the same
catalogue under the other assignment seeds (tests/test_matrix_seeds.py), whose seed-0 runs
they share: README's test command keeps the catalogue's shape and the reference's pass.
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.harness.check.fault_checks import FLAG_HINT, check_fault_took_effect, check_killed
from tests.harness.check.matrix import CHECKS, EXERCISE_CHECKS, FROM_BASE_RUN, KILLS, evaluate
from tests.harness.diagnose.diagnosis import diagnose
from tests.harness.observe.violations import summarize
from tests.harness.run.runs import (
    BASE,
    PROMPT_FLOOR_S,
    PROMPT_RUNS,
    PROMPT_S,
    fault_step,
    faulted,
    kill_bound,
    nemesis_kill,
    nemesis_of,
)
from tests.mutants.catalogue import MUTANTS

LAUNCHER = Path(__file__).resolve().parent / "mutants" / "launch.py"
pytestmark = pytest.mark.fault


def test_catalogue_has_the_required_mutants():
    required = {"no_broadcast", "no_allgather", "local_gradient", "summed_gradients",
                "replicated_state", "checkpoint_without_moments", "step_count_not_restored",
                "same_rows", "no_guard", "extra_collective",
                # observed: one process, replicated state, doubled traffic, rank-dependent calls
                "single_process", "replicated_moments", "ddp_and_zero", "unmatched_recv",
                # a guard the flag's NaN (rank 0's) cannot tell from a right one
                "rank0_guard"}
    assert required <= set(MUTANTS), f"missing: {required - set(MUTANTS)}"
    assert len(MUTANTS) >= 16
    for m in MUTANTS.values():
        assert set(m.targets) <= set(CHECKS), f"{m.name} targets an unknown check"
        assert m.hint, f"{m.name} names no hint its feedback must give"


@pytest.mark.seeds  # the catalogue's runs: the seeds tier, beside its other seeds
@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_is_caught_by_its_target(reference_only, run_cache, record_property, name):
    mutant = MUTANTS[name]
    impl = (sys.executable, str(LAUNCHER), name)
    names = tuple(dict.fromkeys(FROM_BASE_RUN + mutant.targets))
    if "rank_killed" in names:
        # A mutant whose ranks outlive a dead peer sits out the promptness bound once per
        # kill, asleep: the two kill runs side by side (their bound follows the base run).
        run_cache.get(impl, BASE)
        with ThreadPoolExecutor(len(KILLS)) as pool:
            list(pool.map(lambda kind: run_cache.get(impl, nemesis_kill(run_cache.seed, kind)),
                          KILLS))
    found = evaluate(lambda spec: run_cache.get(impl, spec), names, run_cache.seed)
    hints = [h for t in mutant.targets for h in diagnose(t, found[t])]
    hinted = any(mutant.hint in h for h in hints)
    record_property("matrix_row", json.dumps({
        "mutant": name, "targets": list(mutant.targets),
        "cells": {k: len(v) for k, v in found.items()},
        "hint": f"{'ok' if hinted else 'MISSING'}: {mutant.hint}"}))
    for target in mutant.targets:
        assert found[target], f"mutant {name} was not caught by {target}"
    record_property("reason", "; ".join(f"{t}: {found[t][0]}" for t in mutant.targets))
    assert mutant.hint and hinted, f"mutant {name}: feedback lacks {mutant.hint!r}: {hints}"


EXERCISE_MUTANTS = sorted(n for n, m in MUTANTS.items() if set(m.targets) & set(EXERCISE_CHECKS))
# Mistakes a mutant makes besides its own: every head on every rank, halved and all-reduced
# forward only, also leaves the input's gradient un-reduced in backward (each rank's is 1/T).
# Moments kept whole beside tensor parallelism are the invariants' moments kept whole.
ALSO_MADE = {"tp_all_heads_halved": {"the input's gradient is not all-reduced in backward"},
             "tp_moments_whole": {"exp_avg is held in a storage of",
                                  "exp_avg_sq is held in a storage of"}}


@pytest.mark.seeds
@pytest.mark.parametrize("name", EXERCISE_MUTANTS)
def test_an_exercise_mutant_is_told_its_own_mistake_and_no_other(reference_only, run_cache,
                                                                  name):
    """Each mistake told once, by name: no failed check of an exercise mutant gives the hint
    that names another mutant's mistake (a general check that a specific one
    explains stays silent, or points at it)."""
    mutant = MUTANTS[name]
    impl = (sys.executable, str(LAUNCHER), name)
    found = evaluate(lambda spec: run_cache.get(impl, spec), mutant.targets, run_cache.seed)
    others = {m.hint for n, m in MUTANTS.items() if n != name and m.hint != mutant.hint
              } - ALSO_MADE.get(name, set())
    hints = [h for t in mutant.targets for h in diagnose(t, found[t])]
    wrong = [(o, h) for h in hints for o in others if o in h]
    assert not wrong, f"mutant {name} is told another mistake: {wrong}"


def test_a_guard_that_reads_the_flag_meets_no_spike_in_its_replay(reference_only, run_cache):
    """(A NaN is the matrix's rollback probe.) Its rollback replays steps 11.. from
    checkpoint 10, whose losses are above twice the last step's: the first time's losses,
    not the spike it never applied."""
    kind = "spike"
    step = fault_step(kind, 0)
    impl = (sys.executable, str(LAUNCHER), "guard_reads_flag")
    found = check_fault_took_effect(run_cache.get(impl, faulted(kind, step)), kind, step)
    assert found and found[0].message.endswith(FLAG_HINT), found


def test_reference_passes_every_check(reference_only, run, run_cache, record_property):
    found = evaluate(run, tuple(CHECKS), run_cache.seed)
    record_property("matrix_row", json.dumps({
        "mutant": "(reference)", "targets": [],
        "cells": {k: len(v) for k, v in found.items()}}))
    broken = {k: v for k, v in found.items() if v}
    assert not broken, "\n".join(f"{k}:\n{summarize(v)}" for k, v in broken.items())


def test_a_killed_rank_s_peers_get_as_long_as_the_program_s_speed_warrants(reference_only,
                                                                           run_cache):
    """The promptness bound after the suite kills a rank follows the program's own clean
    run (5x its wall time, 5 s at least, 20 s at most, x the box's factor): ranks that wait
    for a dead peer are stopped at that bound (below 20 s where the program runs fast: here,
    not in a starved box, where 5x its clean run reaches the cap), and told so."""
    f = run_cache.factor
    assert kill_bound(0.5, f) == PROMPT_FLOOR_S * f and kill_bound(60.0, f) == PROMPT_S * f
    assert kill_bound(3.0) == 15.0
    impl = (sys.executable, str(LAUNCHER), "waits_for_dead_peer")
    spec = nemesis_kill(run_cache.seed, "kill")
    _, step, rank = nemesis_of(spec) or ("kill", 0, 1)
    killed = run_cache.get(impl, spec)  # the clean run first, inside: it sets the bound
    clean = run_cache.get(impl, BASE)
    bound = kill_bound(clean.outcome.wall_s, f)
    assert killed.outcome.after_kill_s == bound, (killed.outcome.after_kill_s, bound)
    if PROMPT_RUNS * clean.outcome.wall_s < PROMPT_S * f:  # a fast program: under the cap
        assert bound < PROMPT_S * f, bound
    found = check_killed(killed, "kill", step, rank)
    assert found and found[0].expected.startswith(f"the run to end within {bound:.0f}s"), found

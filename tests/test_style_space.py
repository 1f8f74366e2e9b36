"""A space of correct programs, not a list: tests/styles/space.py is one ZeRO-1 program whose
way of being written is chosen by knobs (launcher, rendezvous, where the state lives, how
the collectives are written, the backward, micro-batches, the model, clipping, the
checkpoint's writer, the process group), and Hypothesis draws combinations of them. Every
drawn program must pass every check of the graded invariants (`-m styles`).

Each one-knob change from the default is pinned by an `@example`; a failing draw shrinks
toward the defaults, so the failure names the fewest knobs that break the suite ("fails with
remat=reentrant alone"). The draws and pins are shared among six tests (`shard`), so that
xdist spreads them; draws are deterministic (a seed per shard, no example database). One
command draws as many as asked:

    CAPSTONE_STYLE_DRAWS=100 python -m pytest -m styles -k drawn tests/test_style_space.py

The suite never imports the program: it reads the knobs from `space.py --knobs` and runs it
as a command, as it runs a student's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, assume, example, given, seed, settings
from hypothesis import strategies as st

from tests.harness.check.matrix import EXERCISE_CHECKS, INVARIANT_CHECKS, evaluate
from tests.harness.observe.violations import summarize
from tests.profiles import shard_seed

SPACE = Path(__file__).resolve().parent / "styles" / "space.py"
_SPEC = json.loads(subprocess.run([sys.executable, str(SPACE), "--knobs"], check=True,
                                  capture_output=True, text=True).stdout)
KNOBS: dict[str, list[str]] = _SPEC["knobs"]
EXCLUDED = [((a, x), (b, y)) for (a, x), (b, y), _ in _SPEC["excluded"]]
MISTAKES: dict[str, tuple[list[str], str]] = {k: (v[0], v[1])
                                              for k, v in _SPEC["mistakes"].items()}
DEFAULT = {k: v[0] for k, v in KNOBS.items()}
# How many programs Hypothesis draws past the pinned ones, each other than the default style
# (pinned itself): CI's numbers, more on request (docs/suite.md)
DRAWS = int(os.environ.get("CAPSTONE_STYLE_DRAWS", "6"))
PAIRS = int(os.environ.get("CAPSTONE_STYLE_PAIRS", "12"))
EXERCISE_DRAWS = int(os.environ.get("CAPSTONE_STYLE_EXERCISE_DRAWS", "1"))
# CAPSTONE_STYLE_PINS=0: the draws alone, without the one-knob pins (an exploration of many
# fresh draws, whose pins CI runs anyway)
PINS = os.environ.get("CAPSTONE_STYLE_PINS", "1") != "0"
pytestmark = pytest.mark.fault


def allowed(style: dict[str, str]) -> bool:
    return not any(style.get(a) == x and style.get(b) == y for (a, x), (b, y) in EXCLUDED)


def styles() -> st.SearchStrategy[dict[str, str]]:
    """Every allowed combination of the knobs; each knob shrinks to its default."""
    return st.fixed_dictionaries({k: st.sampled_from(v) for k, v in KNOBS.items()}
                                 ).filter(allowed)


def drawn_styles() -> st.SearchStrategy[dict[str, str]]:
    """The styles a draw may give: every allowed one but the default. Hypothesis's first
    draw is the simplest example, here the all-defaults style: without the filter every
    property test spent its first draw on the default (the six shards' "12 draws" were the
    default six times and 6 other programs). The default is pinned instead, once per test."""
    return styles().filter(lambda style: style != DEFAULT)


def with_(**knobs: str) -> dict[str, str]:
    """The default style with `knobs` changed (and what they need: torchrun meets by env)."""
    style = {**DEFAULT, **knobs}
    if style["launcher"] == "torchrun":
        style["rendezvous"] = "env"
    return style


def changed(style: dict[str, str]) -> str:
    """The knobs `style` sets away from the default, as --style takes them."""
    return ",".join(f"{k}={v}" for k, v in style.items() if v != DEFAULT.get(k, "none")
                    ) or "the default"


def command(style: dict[str, str], mistake: str = "none") -> tuple[str, ...]:
    """The program in `style`, with `mistake` made in it."""
    knobs = changed({**style, "mistake": mistake})
    return (sys.executable, str(SPACE), f"--style={knobs if knobs != 'the default' else ''}")


def one_knob_changes() -> list[dict[str, str]]:
    return [with_(**{k: v}) for k, values in KNOBS.items() for v in values[1:]]


def test_the_strategy_draws_the_programs_space_and_only_it():
    """The knobs the suite draws are the program's (`--knobs`), and the program refuses a
    combination it does not write, naming why."""
    assert {k: v[0] for k, v in KNOBS.items()} == DEFAULT
    assert all(allowed(s) for s in one_knob_changes())
    (a, x), (b, y) = EXCLUDED[0]
    bad = subprocess.run([sys.executable, str(SPACE), f"--style={a}={x},{b}={y}",
                          "--out", "/nonexistent"], capture_output=True, text=True)
    assert bad.returncode == 2 and f"{a}={x} with {b}={y}" in bad.stderr, bad.stderr


def _evaluated(run_cache: Any, impl: tuple[str, ...], names: tuple[str, ...]
               ) -> dict[str, list[Any]]:
    """The checks `names` on the program `impl`, two at a time: their runs side by side (a
    run the two share is made once, by the cache), where one check's runs alone would leave
    a core idle (the one-rank and two-rank runs)."""
    def one(name: str) -> list[Any]:
        return evaluate(lambda spec: run_cache.get(impl, spec), (name,), run_cache.seed)[name]
    with ThreadPoolExecutor(2) as pool:
        return dict(zip(names, pool.map(one, names), strict=True))


def _graded(run_cache: Any, style: dict[str, str]) -> dict[str, list[Any]]:
    found = _evaluated(run_cache, command(style), INVARIANT_CHECKS)
    return {k: v for k, v in found.items() if v}


SHARDS = 6  # the space's draws and pins as six tests, so that xdist spreads them on its workers
# Programs draws found failing, each pinned once fixed (in the suite, or in the program where
# the slip was the program's):
FOUND = [
    # DDP's reducer destroyed after the process group, at train's return: its destructor hung
    # a rank now and then under load (the resumed run after a kill; the program's slip)
    with_(reduce="ddp_hook", micro="4", rows="strided", rendezvous="tcp", model="separate_qkv",
          save="rename"),
]


def pinned_styles() -> list[dict[str, str]]:
    """The style space's pins (CAPSTONE_STYLE_PINS=0: none): the default, each one-knob
    change from it, and the programs draws found."""
    return [dict(DEFAULT), *one_knob_changes(), *FOUND] if PINS else []


def _property(strategy: st.SearchStrategy[Any], pins: list[Any], draws: int, stream: int,
              check: Callable[[Any], None]) -> Callable[[], None]:
    """A Hypothesis test of `check(case)`: each of `pins` (an `@example` each, in order),
    then `draws` cases drawn from `strategy` on its own stream of draws (`stream`: the same
    cases in every session, other tests' other cases), each a case this test has not graded:
    Hypothesis may draw a value again by another path (a filter's retry), and a draw that
    repeats a pin or an earlier draw is not counted (`assume`), so that `draws` are as many
    programs. A failing case is not remembered, so that its shrinking replays it."""
    graded: set[str] = set()

    @settings(max_examples=max(1, draws),
              phases=tuple(Phase) if draws else (Phase.explicit,),
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @seed(shard_seed(stream))  # explore mixes in its seed
    @given(case=strategy)
    def drawn(case: Any) -> None:
        key = json.dumps(case, sort_keys=True)
        assume(key not in graded)
        check(case)
        graded.add(key)
    for case in reversed(pins):
        drawn = example(case=case)(drawn)
    return drawn


def _drawn_in_shard(shard: int, check: Callable[[dict[str, str]], None]) -> Callable[[], None]:
    """This shard's share of the style space's cases (SHARDS streams, so that the shards draw
    different programs): of the default and the one-knob changes, each pinned, and of the
    DRAWS draws."""
    draws = DRAWS // SHARDS + (shard < DRAWS % SHARDS)  # DRAWS in all, however many shards
    return _property(drawn_styles(), pinned_styles()[shard::SHARDS], draws, shard, check)


@pytest.mark.styles
@pytest.mark.long
@pytest.mark.timeout(900 + 90 * (DRAWS + 1 + len(one_knob_changes())) // SHARDS)  # a grading each
@pytest.mark.parametrize("shard", range(SHARDS))
def test_every_drawn_program_passes_every_check(reference_only, run_cache, shard):
    """The default, every one-knob change from it, and DRAWS drawn combinations (shrunk to the
    fewest non-default knobs where one fails), pass every check of the graded invariants."""
    def passes(style: dict[str, str]) -> None:
        broken = _graded(run_cache, style)
        assert not broken, f"fails with {changed(style)}:\n" + "\n".join(
            f"{k}:\n{summarize(v)}" for k, v in broken.items())
    _drawn_in_shard(shard, passes)()


# Each mistake in another API than torch.distributed's functions besides the default style's:
# the i-th mistake in the i-th of the others, in turn (every mistake in every API on request:
# CAPSTONE_STYLE_EVERY_API=1, minutes more)
EVERY_API = os.environ.get("CAPSTONE_STYLE_EVERY_API") == "1"


def mistakes_in_apis() -> list[tuple[dict[str, str], str]]:
    """(style, mistake) pairs that make each mistake through the APIs beside the default."""
    others = KNOBS["api"][1:]
    pairs = [(with_(api=api), m) for i, m in enumerate(sorted(MISTAKES))
             for api in (others if EVERY_API else [others[i % len(others)]])]
    return [(s, m) for s, m in pairs if allowed({**s, "mistake": m})]


def _caught(run_cache: Any, style: dict[str, str], mistake: str) -> None:
    """`mistake` made in `style`: caught by each of its targets, its hint in the feedback."""
    from tests.harness.diagnose.diagnosis import diagnose

    targets, hint = MISTAKES[mistake]
    found = _evaluated(run_cache, command(style, mistake), tuple(targets))
    where = f"mistake={mistake} in {changed(style)}"
    for target in targets:
        assert found[target], f"{where}: not caught by {target}"
    hints = [h for t in targets for h in diagnose(t, found[t])]
    assert any(hint in h for h in hints), f"{where}: the feedback lacks {hint!r}: {hints}"


# (style, mistake) pairs pinned: each mistake in the default style, then those draws found
PAIRS_PINNED = [(dict(DEFAULT), mistake) for mistake in sorted(MISTAKES)] + [
    # Found by a draw: a ring's batch_isend_irecv sent nothing by the traffic count, so the
    # reduction per micro-batch written as a ring passed communication
    (with_(reduce="ring"), "reduce_per_micro"),
    # Found by a draw: a rank waiting on a ring's isend/irecv (Work.wait) was in no observed
    # call, so the hang's deadlock went unseen ("hung until the bound"); waits are calls now
    (with_(gather="ring", guard="loss_first"), "hang"),
]


def _pairs(check: Callable[[tuple[dict[str, str], str]], None]) -> Callable[[], None]:
    """The pinned pairs and PAIRS drawn ones (a drawn style other than the default, a
    mistake it can make)."""
    pairs = st.tuples(drawn_styles(), st.sampled_from(sorted(MISTAKES))).filter(
        lambda sm: allowed({**sm[0], "mistake": sm[1]}))
    return _property(pairs, PAIRS_PINNED, PAIRS, SHARDS, check)


@pytest.mark.styles
@pytest.mark.long
@pytest.mark.timeout(900 + 60 * (PAIRS + len(PAIRS_PINNED)))
def test_every_mistake_is_caught_by_its_target_in_every_style(reference_only, run_cache):
    """A mistake of the lesson made in a drawn style: caught by each of its target
    invariants, and the feedback names it (its hint), whatever the way of writing."""
    _pairs(lambda pair: _caught(run_cache, *pair))()


@pytest.mark.styles
@pytest.mark.long
@pytest.mark.timeout(900 + 60 * len(mistakes_in_apis()))
@pytest.mark.parametrize("pair", mistakes_in_apis(),
                         ids=lambda p: f"{p[1]}-{p[0]['api']}" if isinstance(p, tuple) else "")
def test_every_mistake_is_caught_in_every_api(reference_only, run_cache, pair):
    """Each mistake of the lesson made through another API than torch.distributed's
    functions (the process group's methods, functional collectives, DTensor): caught by its
    targets with its hint, as through the functions (the observer sees every API alike)."""
    _caught(run_cache, *pair)


# Styles whose exercises are pinned: the default, then those a trial or a draw found
EXERCISES_PINNED = [
    dict(DEFAULT),
    # Found by a trial: the worker's local state was sized P/N, not P_local/(N/T), under
    # --tensor-parallel (the program's slip)
    with_(state="worker_locals", reduce="grad_hooks"),
    # Found by a draw, shrunk to model=separate_qkv: the program's heads took a fused q, k, v
    # only (its slip); and micro-batches inside a step all-reduce B/M rows' activations,
    # which the suite counted as none (its own: counted now in micro-batch units, on the
    # step clock)
    with_(model="separate_qkv"),
    # Found by a draw: activation checkpointing re-runs each block's forward all-reduce
    # inside the backward (6 per step, not 4); the suite now tells a recompute by its
    # input's digest
    with_(remat="non_reentrant", micro="2"),
    with_(reduce="ring", gather="ring", micro="2", model="functional"),
    # Found by a draw: a reentrant checkpoint's blocks are reached only by the passes its
    # backward runs inside the step's, whose leaves the first backward's 2-D leaves missed
    # ("rank 0 holds every head of the attention"; the suite's: they are read now)
    with_(remat="reentrant"),
    # Found by a draw: a guard that reads every micro-batch's loss before any backward runs
    # both forwards first, whose 4 all-reduces the suite read as 4 in step 1's forward (the
    # suite's: counted per micro-batch run before the first backward now)
    with_(micro="2", guard="loss_first"),
]


def _exercised(check: Callable[[dict[str, str]], None]) -> Callable[[], None]:
    """The pinned styles and EXERCISE_DRAWS drawn ones."""
    return _property(drawn_styles(), EXERCISES_PINNED, EXERCISE_DRAWS, SHARDS + 1, check)


@pytest.mark.styles
@pytest.mark.long
@pytest.mark.timeout(900 + 120 * (EXERCISE_DRAWS + len(EXERCISES_PINNED)))
def test_drawn_programs_do_the_exercises(reference_only, run_cache):
    """The lesson's exercises in a drawn style, graded as a grading that selects them:
    every check of accumulation, and of tensor parallelism where the style can write it
    (DDP's comm hook rejects --tensor-parallel: its exercise 1 is not implemented)."""
    def does(style: dict[str, str]) -> None:
        exercises = tuple(e for e in EXERCISE_CHECKS
                          if e != "tensor_parallel" or style["reduce"] != "ddp_hook")
        found = _evaluated(run_cache, command(style), exercises)
        broken = {k: v for k, v in found.items() if v}
        assert not broken, f"the exercises fail with {changed(style)}:\n" + "\n".join(
            f"{k}:\n{summarize(v)}" for k, v in broken.items())
    _exercised(does)()


def test_each_draw_is_a_program_no_other_case_grades():
    """The draws are as many programs as they are said to be: none is a pin (the default
    style among them) and none repeats. Hypothesis's first draw is its simplest example, the
    default style, and a filter's retry can draw a value again: CI's 12 drawn programs
    were the default six times and 6 others, and its 12 drawn pairs 10 new ones."""
    def cases(of: Callable[[Callable[[Any], None]], Callable[[], None]]) -> list[str]:
        seen: list[str] = []
        of(lambda case: seen.append(json.dumps(case, sort_keys=True)))()
        assert len(seen) == len(set(seen)), seen
        return seen

    # a space of four, one pinned: the three draws are the three others
    assert sorted(cases(partial(_property, st.integers(0, 3), [0], 3, 0))) == ["0", "1", "2", "3"]
    graded = [c for shard in range(SHARDS)
              for c in cases(partial(_drawn_in_shard, shard))]
    pinned = pinned_styles()
    assert len(graded) == len(set(graded)) == len(pinned) + DRAWS
    assert set(graded) >= {json.dumps(s, sort_keys=True) for s in pinned}
    assert len(cases(_pairs)) == len(PAIRS_PINNED) + PAIRS
    assert len(cases(_exercised)) == len(EXERCISES_PINNED) + EXERCISE_DRAWS

"""The suite is the same suite on every clone: its property tests are derandomized with no
example database by default and in CI, and draw afresh only when asked (`explore`), from a
seed the session prints (tests/profiles.py, loaded by conftest.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import profiles

ROOT = Path(__file__).resolve().parents[1]


def _draws() -> list[int]:
    seen: list[int] = []

    @given(st.integers())
    def probe(x: int) -> None:
        seen.append(x)
    probe()
    return seen


@pytest.mark.skipif(os.environ.get(profiles.PROFILE_VAR) == profiles.EXPLORE,
                    reason="an exploring session draws afresh on purpose")
def test_the_suite_draws_the_same_examples_every_time():
    """The profile conftest.py loaded: derandomized, no database, no clock in the verdict;
    a property test drawn twice draws the same examples (before: a fresh draw every run,
    and failures kept in a local .hypothesis/ folder a clone does not have)."""
    current = settings.default  # (None where no profile was loaded: that fails here too)
    assert current is not None and current.derandomize and current.database is None \
        and current.deadline is None
    assert _draws() == _draws()


def test_the_profile_is_chosen_by_the_environment():
    assert profiles.chosen({}) == "default"
    assert profiles.chosen({"CI": "true"}) == "ci"
    assert profiles.chosen({"CI": "true", profiles.PROFILE_VAR: "explore"}) == "explore"
    with pytest.raises(ValueError, match="CAPSTONE_HYPOTHESIS='random': use one of default"):
        profiles.chosen({profiles.PROFILE_VAR: "random"})


def test_explore_draws_a_seed_once_and_replays_a_given_one():
    env: dict[str, str] = {profiles.PROFILE_VAR: "explore"}
    drawn = profiles.explore_seed(env)
    assert drawn is not None and env[profiles.SEED_VAR] == str(drawn)  # the workers read it
    assert profiles.explore_seed(env) == drawn  # drawn once per session
    assert profiles.explore_seed({**env, profiles.SEED_VAR: "1234"}) == 1234
    assert profiles.explore_seed({}) is None
    with pytest.raises(ValueError, match="give a whole number"):
        profiles.explore_seed({**env, profiles.SEED_VAR: "abc"})
    # a sharded test's shards draw apart, by default and exploring
    assert len({profiles.shard_seed(k, {}) for k in range(6)}) == 6
    assert len({profiles.shard_seed(k, dict(env)) for k in range(6)}) == 6


def _header(env: dict[str, str]) -> str:
    out = subprocess.run([sys.executable, "-m", "pytest", "--co", "-p", "no:cacheprovider",
                          "tests/test_profiles.py"], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, **env}, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


@pytest.mark.slow
def test_a_session_says_its_profile_and_how_to_replay_an_exploring_one():
    clean = {k: v for k, v in os.environ.items()
             if k not in (profiles.PROFILE_VAR, profiles.SEED_VAR, "CI")}
    with pytest.MonkeyPatch.context() as mp:
        for k in (profiles.PROFILE_VAR, profiles.SEED_VAR, "CI"):
            mp.delenv(k, raising=False)
        assert "hypothesis profile: default (derandomized, no database)" in _header(clean)
        said = _header({profiles.PROFILE_VAR: "explore"})
        found = re.search(r"hypothesis profile: explore, seed (\d+): to replay, "
                          r"CAPSTONE_HYPOTHESIS=explore CAPSTONE_HYPOTHESIS_SEED=(\d+) ", said)
        assert found and found[1] == found[2], said
        again = _header({profiles.PROFILE_VAR: "explore", profiles.SEED_VAR: found[1]})
        assert f"seed {found[1]}:" in again


def test_draws_do_not_depend_on_the_modules_a_worker_loaded_before():
    """Hypothesis mixes constants of the loaded local modules into its draws; which are
    loaded depends on the tests xdist gave a worker before. The suite turns that off: a
    module loaded between two draws changes nothing, and nothing is cached on disk."""
    from hypothesis.internal.conjecture import providers

    assert len(providers._get_local_constants()) == 0
    before = _draws()
    import tests.harness.report.ledger  # noqa: F401  (a local module, full of constants)
    assert _draws() == before and len(providers._get_local_constants()) == 0

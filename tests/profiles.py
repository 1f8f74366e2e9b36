"""The suite's Hypothesis profiles: the same suite on every clone, exploring on request.

conftest.py registers them and loads one (`load`) in pytest_configure, before any test module
is imported, so that every `@settings` of the repository inherits it (where Hypothesis's
pytest plugin is off, as in a grading session, Hypothesis is not even imported):

- `default` (a person's run) and `ci` (CI's, and what Hypothesis would otherwise load by itself
  under CI=true): derandomized (each property test draws the examples its own source
  determines), no example database (no `.hypothesis/` folder whose failures a clone would
  not have), no deadline and no too-slow health check (both depend on the machine's load:
  a derandomized test must not fail by the clock). A clone passes or fails as every clone
  does.
- `explore`: fresh draws from a seed, which the session prints in its header, to replay:

      CAPSTONE_HYPOTHESIS=explore python -m pytest -n 2             # draws a seed, prints it
      CAPSTONE_HYPOTHESIS=explore CAPSTONE_HYPOTHESIS_SEED=N python -m pytest ...  # replays

  (or Hypothesis's own `--hypothesis-profile explore --hypothesis-seed N`). A failure found
  so is pinned with `@example` in its test, as the style space's FOUND lists do.
"""

from __future__ import annotations

import os
import random
from collections.abc import MutableMapping

PROFILE_VAR = "CAPSTONE_HYPOTHESIS"  # default, ci or explore
SEED_VAR = "CAPSTONE_HYPOTHESIS_SEED"  # explore's seed (drawn and exported when not given)
EXPLORE = "explore"
PROFILES = ("default", "ci", EXPLORE)


def _without_local_constants() -> None:
    """Hypothesis seeds its draws with constants it reads from the local modules loaded so
    far (and caches them under .hypothesis/constants). Which modules a worker has loaded
    when a property test draws depends on which tests xdist gave it before: the same
    derandomized test could draw other examples in another order. The suite draws from its
    strategies alone (a private hook of the pinned Hypothesis, checked for; without it
    nothing changes and tests/test_profiles.py says so)."""
    from hypothesis.internal.conjecture import providers

    if hasattr(providers, "_get_local_constants") and hasattr(providers, "_local_constants"):
        empty = providers._local_constants  # empty until the first draw reads the modules
        providers._get_local_constants = lambda: empty


def register() -> None:
    """Register the three profiles (Hypothesis's own `default` and `ci` replaced), each
    drawing from the strategies alone (no constants of the loaded modules)."""
    from hypothesis import HealthCheck, settings  # here: a grading session never imports it

    _without_local_constants()
    steady = {"derandomize": True, "database": None, "deadline": None,
              "suppress_health_check": [HealthCheck.too_slow]}
    settings.register_profile("default", **steady)  # type: ignore[arg-type]
    settings.register_profile("ci", print_blob=True, **steady)  # type: ignore[arg-type]
    settings.register_profile(EXPLORE, derandomize=False, database=None, deadline=None,
                              print_blob=True, suppress_health_check=[HealthCheck.too_slow])


def chosen(env: MutableMapping[str, str]) -> str:
    """The profile `env` asks for: $CAPSTONE_HYPOTHESIS, else `ci` under CI (CI=true, as
    Hypothesis itself tells), else `default`."""
    name = env.get(PROFILE_VAR) or ("ci" if env.get("CI") else "default")
    if name not in PROFILES:
        raise ValueError(f"{PROFILE_VAR}={name!r}: use one of {', '.join(PROFILES)}")
    return name


def explore_seed(env: MutableMapping[str, str]) -> int | None:
    """Under `explore`, the session's seed: $CAPSTONE_HYPOTHESIS_SEED, else one drawn now
    and written into `env` (xdist's workers and every later reader then share it); None
    under the steady profiles."""
    if chosen(env) != EXPLORE:
        return None
    if not env.get(SEED_VAR):
        env[SEED_VAR] = str(random.SystemRandom().randrange(2**32))
    try:
        return int(env[SEED_VAR])
    except ValueError:
        raise ValueError(f"{SEED_VAR}={env[SEED_VAR]!r}: give a whole number (the seed an "
                         "exploring session printed)") from None


def load(env: MutableMapping[str, str] = os.environ) -> tuple[str, int | None]:
    """Register and load the profile `env` asks for; its name and explore's seed."""
    from hypothesis import settings

    register()
    name = chosen(env)
    settings.load_profile(name)
    return name, explore_seed(env)


def shard_seed(shard: int, env: MutableMapping[str, str] = os.environ) -> int:
    """A sharded property test's `@seed` (each shard draws its own examples): the shard's
    number by default, mixed with explore's seed when exploring."""
    drawn = explore_seed(env)
    return shard if drawn is None else hash((drawn, shard)) % 2**32


def replay(name: str, seed: int | None) -> str:
    """The header line a session prints: its profile, and how to replay an exploring one."""
    if seed is None:
        return f"hypothesis profile: {name} (derandomized, no database)"
    return (f"hypothesis profile: {EXPLORE}, seed {seed}: to replay, "
            f"{PROFILE_VAR}={EXPLORE} {SEED_VAR}={seed} python -m pytest ...")

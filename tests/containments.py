"""The containments a test of the suite's own runs under, as a pytest plugin (conftest.py
names it): `contained` runs the test once with namespaces and once as the run user (forced,
as where a Docker grader refuses unshare), and skips, with the reason, the one this machine
does not offer."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.harness.run import contain


@pytest.fixture(params=[contain.NAMESPACES, contain.USER])
def contained(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
              ) -> Iterator[str]:
    """Each containment this machine offers: namespaces, and the run user (forced, as where a
    Docker grader refuses unshare); skipped, with the reason, where one is not. (The probe
    of unshare is cached per process: cleared around the test, which may force it off.)"""
    contain._unshare_prefix.cache_clear()
    try:
        if request.param == contain.USER:
            monkeypatch.setenv(contain.FORCE_VAR, contain.USER)
            if contain.mode() != contain.USER:
                pytest.skip(f"no run user here: {contain.why_not_user()}")
        elif contain.mode() != contain.NAMESPACES:
            pytest.skip("unshare is not allowed here")
        yield str(request.param)
    finally:
        contain._unshare_prefix.cache_clear()

"""Invariant 7: what the ranks did, as the suite's observer saw it in every process of the run
(tests/observer/): N genuine ranks in one process group, the same collectives on every rank,
and no more traffic per step than ZeRO-1 needs (2(N-1)/N·P elements, the ZeRO paper's 2Ψ)."""

import json

import pytest

from tests.harness.observed_checks import (
    check_genuine_ranks,
    check_same_sequence,
    check_zero_traffic,
    traffic_per_step,
)
from tests.harness.runs import BASE, N2, N3


@pytest.fixture
def observed(run):
    """run(spec), skipping when the suite runs with --no-observe."""
    def get(spec):
        r = run(spec)
        if r.observed is None:
            pytest.skip("the observer is off (--no-observe)")
        return r
    return get


@pytest.mark.parametrize("spec", [BASE, N2, N3], ids=lambda s: s.name)
def test_ranks_are_distinct_processes_in_one_group(observed, holds, spec):
    holds(check_genuine_ranks(observed(spec)), f"process group of the {spec.name} run")


def test_every_rank_issues_the_same_collectives(observed, holds):
    holds(check_same_sequence(observed(BASE)), "collective sequence of the base run")


def test_zero1_traffic_is_one_allreduce_per_step(observed, holds, record_property):
    r = observed(BASE)
    per_rank = {rank: round(sum(sites.values())) for rank, sites in traffic_per_step(r).items()}
    in_bytes = {rank: round(sum(sites.values()))
                for rank, sites in traffic_per_step(r, in_bytes=True).items()}
    record_property("observed", json.dumps({"elements_sent_per_step": per_rank,
                                            "bytes_sent_per_step": in_bytes}))
    holds(check_zero_traffic(r), "elements sent per step in the base run")

"""Invariant 7: what the ranks did, as the suite's observer saw it in every process of the run
(tests/observer/): N genuine ranks in one process group, the same collectives on every rank,
no more traffic per step than ZeRO-1 needs (2(N-1)/N·P elements, the ZeRO paper's 2Ψ), each
rank computing on its own 1/N of the global batch, and every gradient element reduced across
the ranks at every step (at least the (N-1)/N·P elements of a reduce-scatter)."""

import json

import pytest

from tests.harness.check.observed_checks import (
    check_genuine_ranks,
    check_same_sequence,
    check_zero_traffic,
    traffic_per_step,
)
from tests.harness.check.work_checks import check_data_parallel, check_reduced, tokens_per_step
from tests.harness.run.runs import BASE, N2, N3


@pytest.mark.reads(lambda spec: [spec])
@pytest.mark.parametrize("spec", [BASE, N2, N3], ids=lambda s: s.name)
def test_ranks_are_distinct_processes_in_one_group(observed, holds, spec):
    holds(check_genuine_ranks(observed(spec)), f"process group of the {spec.name} run")


@pytest.mark.reads(BASE)
def test_every_rank_issues_the_same_collectives(observed, holds):
    holds(check_same_sequence(observed(BASE)), "collective sequence of the base run")


@pytest.mark.reads(BASE)
def test_zero1_traffic_is_one_allreduce_per_step(observed, holds, record_property):
    r = observed(BASE)
    per_rank = {rank: round(sum(sites.values())) for rank, sites in traffic_per_step(r).items()}
    in_bytes = {rank: round(sum(sites.values()))
                for rank, sites in traffic_per_step(r, in_bytes=True).items()}
    record_property("observed", json.dumps({"elements_sent_per_step": per_rank,
                                            "bytes_sent_per_step": in_bytes}))
    holds(check_zero_traffic(r), "elements sent per step in the base run")


@pytest.mark.reads(lambda spec: [spec])
@pytest.mark.parametrize("spec", [BASE, N3], ids=lambda s: s.name)
def test_each_rank_computes_on_its_share_of_the_batch(observed, holds, record_property, spec):
    r = observed(spec)
    if spec is BASE:
        record_property("observed", json.dumps({"tokens_per_step": {
            rank: sorted({t for t in tokens_per_step(p, r.steps) if t is not None})
            for rank, p in sorted(r.observed.trainers().items())}}))
    holds(check_data_parallel(r, spec.batch_size), f"rows each rank computed on ({spec.name})")


@pytest.mark.reads(BASE)
def test_every_gradient_is_reduced_at_every_step(observed, holds):
    holds(check_reduced(observed(BASE)), "gradient elements reduced per step in the base run")

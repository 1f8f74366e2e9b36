"""A hint is a hypothesis that the evidence confirms and nothing the suite holds refutes (issue
73): each hypothesis over drawn evidence, both ways (said where its signature holds, silent
where a refuter holds); the first difference told where none stands; what every run shows
told first; the kinds diagnosis reads are the ones the checks set."""

from __future__ import annotations

import re
import zlib
from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

from tests.harness.check.checks import PARITY_SYNCED, PARITY_UNSYNCED
from tests.harness.diagnose.diagnosis import diagnose
from tests.harness.diagnose.evidence import Evidence, crc_concat
from tests.harness.diagnose.hints import (
    BROADCAST,
    INIT,
    MANIFEST,
    NOT_REDUCED,
    NOT_REDUCED_CLAUSE,
    PART_REDUCED_CLAUSE,
    ROWS,
)
from tests.harness.observe.violations import Violation

ROOT = Path(__file__).resolve().parent
PARITY = "single_process_parity"


def parity(step: int, key: str, expected: float, found: float, kind: str = "") -> Violation:
    return Violation(PARITY, 0, step, f"{key} {expected!r} (1 rank) within 1e-05 rel", found,
                     "4-rank run diverges from 1 rank", kind=kind or f"parity_{key}")


def step1_parts(kind: str) -> list[Violation]:
    """Step 1's loss and gradient norm part from the one-rank run's (the data or the start)."""
    return [parity(1, "loss", 4.348, 4.337, kind), parity(1, "grad_norm", 0.53, 0.55)]


maybe = st.sampled_from([None, True, False])
evidence = st.builds(Evidence, world_size=st.sampled_from([2, 3, 4]), own_rows=maybe,
                     reduced=maybe, unsynced=st.sampled_from([None, (), (1, 2, 3), (0, 1)]),
                     step0_equal=maybe, step0_single=maybe)
start = st.sampled_from(["parity_loss", PARITY_SYNCED, PARITY_UNSYNCED])

# The cases: parameters drawn from seed + rank and broadcast from rank N-1 (every
# rank synced, on its own rows, equal at step 0 and not the one-rank run's); no broadcast
SEED_PLUS_RANK = Evidence(4, own_rows=True, reduced=True, unsynced=(), step0_equal=True,
                          step0_single=False)
NO_BROADCAST = Evidence(4, own_rows=True, reduced=True, unsynced=(0, 1, 2, 3),
                        step0_equal=False, step0_single=True)
SAME_ROWS = Evidence(4, own_rows=False, reduced=True, unsynced=(), step0_equal=True,
                     step0_single=True)


@given(evidence, start)
@example(SEED_PLUS_RANK, PARITY_SYNCED)
@example(SAME_ROWS, PARITY_SYNCED)
def test_the_rows_are_said_only_where_no_rank_is_seen_on_its_own_rows(ev, kind):
    hints = diagnose(PARITY, step1_parts(kind), ev.world_size, ev)
    if ev.own_rows is True:
        assert ROWS not in hints, hints
    elif kind != PARITY_UNSYNCED:
        assert ROWS in hints, hints


@given(evidence, start)
@example(NO_BROADCAST, PARITY_UNSYNCED)
@example(SEED_PLUS_RANK, PARITY_SYNCED)
def test_the_broadcast_is_said_only_where_no_rank_is_seen_synced(ev, kind):
    hints = diagnose(PARITY, step1_parts(kind), ev.world_size, ev)
    if ev.unsynced == () or kind == PARITY_SYNCED:
        assert BROADCAST not in hints, hints
    else:
        assert BROADCAST in hints, hints


@given(evidence, start)
@example(SEED_PLUS_RANK, PARITY_SYNCED)
@example(NO_BROADCAST, PARITY_UNSYNCED)
def test_one_draw_not_the_seeds_is_said_exactly_on_its_signature(ev, kind):
    """Equal at step 0 on every rank and not the one-rank run's: the ranks hold one draw, not
    the seed's; silent where rank 0 starts where the one-rank run does."""
    hints = diagnose(PARITY, step1_parts(kind), ev.world_size, ev)
    signature = ev.step0_equal is True and ev.step0_single is False
    assert (INIT in hints) == signature, hints
    if signature:
        assert hints[0] == INIT


def gradient_parts(n: int, ratio: float) -> list[Violation]:
    """Rank 0's gradient norm `ratio` times the one-rank run's from step 1, the loss parting
    from step 2 (what no reduction, or a clip by the shard's own norm, shows)."""
    return [parity(1, "grad_norm", 0.53, 0.53 * ratio), parity(2, "grad_norm", 0.5, 0.5 * ratio),
            parity(2, "loss", 4.2, 4.25)]


@given(evidence, st.floats(1.1, 1.9))
@example(SEED_PLUS_RANK, 1.3)
@example(Evidence(4, reduced=False), 1.7)
def test_no_reduction_is_said_only_where_the_reductions_were_not_seen_whole(ev, ratio):
    hints = diagnose(PARITY, gradient_parts(ev.world_size, ratio), ev.world_size, ev)
    said = " ".join(hints)
    if ev.reduced is True:  # every element reduced at every step: never "not reduced"
        assert NOT_REDUCED not in hints and NOT_REDUCED_CLAUSE not in said, hints
        assert PART_REDUCED_CLAUSE not in said, hints
    else:
        assert hints[0] == NOT_REDUCED, hints


# Every cause of a step-1 loss the suite can name ruled out: rows, start and reductions seen
UNEXPLAINED = Evidence(4, own_rows=True, reduced=True, unsynced=(), step0_equal=True,
                       step0_single=True)


@given(evidence, start)
@example(UNEXPLAINED, PARITY_SYNCED)
def test_where_no_cause_stands_the_first_difference_is_told_as_seen(ev, kind):
    """Every cause refuted: what differs, where, and what the evidence shows, all true."""
    hints = diagnose(PARITY, step1_parts(kind), ev.world_size, ev)
    assert hints, "a failed invariant is told something"
    if any(h in hints for h in (ROWS, BROADCAST, INIT)):
        assert ev != UNEXPLAINED, hints  # every one of them is refuted there
        return
    [line] = hints
    assert line.startswith(f"{ev.world_size} ranks and 1 rank differ from step 1's loss"), line
    assert "4.337" in line and "4.348" in line
    assert ("every rank computed on its own rows" in line) == (ev.own_rows is True)
    assert ("received P elements" in line) == (ev.unsynced == ())
    if ev.step0_equal is not None:
        assert "step 0's parameter norms are " + (
            "equal" if ev.step0_equal else "not equal") in line


def test_without_evidence_the_violations_alone_decide_as_before():
    """evidence=None is today's diagnosis: the callers not migrated keep their hints."""
    assert diagnose(PARITY, step1_parts("parity_loss")) == [ROWS, BROADCAST]
    assert diagnose(PARITY, step1_parts(PARITY_SYNCED)) == [ROWS]
    assert diagnose(PARITY, gradient_parts(4, 1.5))[0] == NOT_REDUCED
    assert diagnose(PARITY, step1_parts("parity_loss"), 4, Evidence(4)) == [ROWS, BROADCAST]


def killed_publish(step: int) -> Violation:
    return Violation("rank_killed", 1, step, "sha256 abc", "def",
                     f"checkpoints/step-{step:06d} was published incomplete after rank 3 "
                     "killed in step 19 (rank-1.pt does not match its manifest): write each "
                     "checkpoint under a temporary name", kind="published_incomplete")


@given(st.lists(st.tuples(st.sampled_from([10, 20]), st.integers(0, 3)), max_size=5,
                unique=True))
@example([(10, 1), (20, 1)])
def test_what_every_run_shows_is_told_first_as_the_base_runs(mismatched):
    """The base run's checkpoints (no fault there) disagree with their manifests: told as
    the base run's, before the kill's consequence; where the base run's agree, not at all."""
    ev = Evidence(4, base_manifest=tuple(mismatched))
    hints = diagnose("rank_killed", [killed_publish(10)], 4, ev)
    if mismatched:
        assert hints[0].startswith("the base run, with no fault, writes checkpoints"), hints
        assert f"step {mismatched[0][0]} rank {mismatched[0][1]}" in hints[0]
        assert "published incomplete after rank 3" in hints[1]
    else:
        assert hints[0].startswith("checkpoints/step-000010 was published incomplete"), hints


@given(evidence)
@example(Evidence(4, unsynced=()))
def test_ranks_apart_at_step_0_are_the_broadcast_unless_every_rank_was_seen_synced(ev):
    differ = [Violation("equal_rank_norms", r, 0, "rank 0's norm 53.7", 54.2,
                        "ranks hold different parameters", kind="params_differ")
              for r in (1, 2, 3)]
    [hint] = diagnose("equal_rank_norms", differ, 4, ev)
    if ev.unsynced == ():
        assert hint.startswith("ranks 1-3 hold(s) parameters of another norm"), hint
        assert "received P elements" in hint
    else:
        assert hint == BROADCAST


def test_the_base_runs_manifests_are_told_once_as_its_own():
    mismatch = Violation("byte_exact_resume", 1, 10, "sha256 abc", "def",
                         "rank-1.pt does not match its manifest", kind="manifest_mismatch")
    assert diagnose("byte_exact_resume", [mismatch]) == [MANIFEST]
    [hint] = diagnose("byte_exact_resume", [mismatch], 4, Evidence(4, base_manifest=((10, 1),)))
    assert hint.startswith("the base run, with no fault, writes checkpoints") and \
        "step 10 rank 1" in hint


def test_a_row_checksum_of_the_batch_is_its_ranks_checksums_in_rank_order():
    """crc_concat: the one-rank run's index checksum from the ranks' pieces (what own_rows
    compares), and not from the pieces in another order."""
    rows = [bytes(range(r * 16, r * 16 + 16)) * 8 for r in range(4)]
    crcs = [zlib.crc32(b) for b in rows]
    assert crc_concat(crcs, len(rows[0])) == zlib.crc32(b"".join(rows))
    assert crc_concat(crcs[::-1], len(rows[0])) != zlib.crc32(b"".join(rows))


def test_every_kind_diagnosis_reads_is_set_by_a_check():
    """The diagnosis reads kinds, never messages: each kind it names is one a check sets (a
    literal there, or an f-string's prefix: parity_{key})."""
    src = (ROOT / "harness" / "diagnose" / "diagnosis.py").read_text() + (
        ROOT / "harness" / "diagnose" / "evidence.py").read_text()
    checks = "\n".join(p.read_text() for p in (ROOT / "harness" / "check").glob("*.py"))
    read = set(re.findall(r'kind [!=]= "([a-z_0-9]+)"', src))
    for group in re.findall(r"_kinds\(\w+, ([^)]*)\)", src) + re.findall(
            r"kind in \(([^)]*)\)", src) + re.findall(r"EVERY_RUN = \(([^)]*)\)", src):
        read |= set(re.findall(r'"([a-z_0-9]+)"', group))
    read |= set(re.findall(r'"(master_[a-z_]+)"', src))
    literal = set(re.findall(r'"([a-z_0-9]+)"', checks))
    prefixes = tuple(re.findall(r'kind=f"([a-z_]+)\{', checks)) + tuple(
        re.findall(r'f"(parity_)\{key\}"', checks))
    unset = {k for k in read if k not in literal and not k.startswith(prefixes)}
    assert len(read) >= 30 and not unset, unset

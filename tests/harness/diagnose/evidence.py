"""What the runs a test read show, typed, for the diagnosis to weigh its hypotheses against.

`evidence_of(runs)` computes it once per failed test from the runs it read (conftest's
`RUNS_USED`) by calling the pure checkers on them: whether every rank computed on its own
rows (the observer's row checksums against the one-rank run's), whether every gradient
element was reduced at every step, what each rank held at step 0, which checkpoints of the
base run (no fault in it) disagree with their manifests, and where the base run first parts
from the one-rank run. A field is None where those runs cannot tell (not read, not observed).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from tests.harness.check.checks import PARITY, check_checkpoint_files, parted_steps, unsynced_ranks
from tests.harness.check.work_checks import CONTEXT, check_data_parallel, check_reduced
from tests.harness.observe.parse import is_finite
from tests.harness.run.result import Run
from tests.harness.run.runs import BASE, SINGLE

# The byte widths an index tensor's elements may have (int64, int32): its checksum covers
# its bytes, and the one-rank run's is the ranks' pieces in rank order at one of them
INDEX_WIDTHS = (8, 4)


@dataclass(frozen=True)
class Difference:
    """Where the base run first parts from the one-rank run: the quantity rank 0 logs, the
    step, and both values."""

    quantity: str
    step: int
    found: float
    expected: float


@dataclass(frozen=True)
class Evidence:
    """What the runs a test read show; None where they cannot tell."""

    world_size: int = 4
    # every rank of the base run computed on rows [r*B, (r+1)*B) of the one-rank run's batch
    # at every step (True), on rows not its own (False: a count off, or two ranks alike)
    own_rows: bool | None = None
    # every rank of the base run put >= (N-1)/N·P gradient elements into reductions per step
    reduced: bool | None = None
    # the ranks that received no parameters by a collective before their first backward
    unsynced: tuple[int, ...] | None = None
    step0_equal: bool | None = None  # the step-0 parameter norm is the same on every rank
    step0_single: bool | None = None  # ... and rank 0's is the one-rank run's
    # the base run's shards (step, rank) that do not match their manifest: no fault there
    base_manifest: tuple[tuple[int, int | None], ...] = ()
    first_difference: Difference | None = None


def crc_concat(crcs: Sequence[int], nbytes: int) -> int:
    """The CRC-32 of pieces of `nbytes` bytes each, concatenated, from their CRC-32s alone.
    CRC-32 is affine over GF(2): for B of n bytes, crc(A||B) = crc(A||0^n) ^ crc(B) ^
    crc(0^n), and crc(A||0^n) is zlib's running CRC of A carried over n zero bytes."""
    zeros = b"\0" * nbytes
    total = crcs[0]
    for c in crcs[1:]:
        total = zlib.crc32(zeros, total) ^ c ^ zlib.crc32(zeros)
    return total


def _by_name(runs: Sequence[Run], name: str) -> Run | None:
    return next((r for r in runs if r.name == name), None)


def _per_step_crcs(run: Run) -> dict[int, list[int]] | None:
    """rank -> the checksum of each step's index tensor, where every rank ran one backward
    per step and the observer read each one's tokens; None otherwise."""
    obs = run.observed
    if obs is None:
        return None
    ranks = obs.trainers()
    if sorted(ranks) != list(range(run.world_size)):
        return None
    out: dict[int, list[int]] = {}
    for r, p in ranks.items():
        work = p.work[:run.steps]
        if len(work) < run.steps or any("token_crc" not in w for w in work):
            return None
        out[r] = [int(w["token_crc"]) for w in work]
    return out


def own_rows(base: Run, single: Run | None) -> bool | None:
    """Whether every rank of `base` computed on its own rows at every step: its B rows by
    count (check_data_parallel), and, with the one-rank run, the ranks' index checksums in
    rank order concatenate to the one-rank run's at every step. False where the count is off
    or two ranks computed on the same rows; None where the runs cannot tell (no observer, a
    program that splits the batch otherwise, micro-batches)."""
    if base.observed is None or base.world_size < 2:
        return None
    if any(v.kind == "rows" for v in check_data_parallel(base, BASE.batch_size)):
        return False
    crcs = _per_step_crcs(base)
    if crcs is None:
        return None
    steps = range(base.steps)
    if any(len({crcs[r][s] for r in crcs}) < len(crcs) for s in steps):
        return False  # two ranks read the same rows at a step
    ones = _per_step_crcs(single) if single is not None else None
    if ones is None or 0 not in ones:
        return None
    tokens = BASE.batch_size * CONTEXT
    for width in INDEX_WIDTHS:
        if all(crc_concat([crcs[r][s] for r in sorted(crcs)], tokens * width) == ones[0][s]
               for s in steps):
            return True
    return None


def reduced(base: Run) -> bool | None:
    """Whether the observer saw every gradient element reduced at every step of `base`."""
    if base.observed is None or base.world_size < 2:
        return None
    found = check_reduced(base)
    if any(v.kind in ("never_reduced", "partly_reduced") for v in found):
        return False
    return None if found else True


def _step0_norms(run: Run) -> dict[int, float]:
    return {r: float(recs[0]["param_norm"]) for r, recs in run.parsed.records.items()
            if 0 in recs and is_finite(recs[0].get("param_norm"))}


def step0(base: Run, single: Run | None) -> tuple[bool | None, bool | None]:
    """(every rank's step-0 norm equal, rank 0's equal to the one-rank run's)."""
    norms = _step0_norms(base)
    equal = len(set(norms.values())) == 1 if len(norms) == base.world_size else None
    ones = _step0_norms(single) if single is not None else {}
    same = norms[0] == ones[0] if 0 in norms and 0 in ones else None
    return equal, same


def base_manifest(base: Run) -> tuple[tuple[int, int | None], ...]:
    """The shards (step, rank) of the base run's checkpoints that do not match their
    manifest."""
    found = check_checkpoint_files(base, sorted(base.parsed.checkpoints))
    return tuple((v.step or 0, v.rank) for v in found if v.kind == "manifest_mismatch")


def first_difference(base: Run, single: Run) -> Difference | None:
    """The first (step, quantity) where rank 0 of `base` parts from the one-rank run."""
    for s, key, x, y in parted_steps(base, single, PARITY):
        if key is not None and isinstance(x, (int, float)) and isinstance(y, (int, float)):
            return Difference(key, s, float(x), float(y))
        return None
    return None


def evidence_of(runs: Sequence[Run]) -> Evidence | None:
    """The evidence of the runs a test read (None: it read no base run, the one the
    hypotheses are about)."""
    base = _by_name(runs, BASE.name)
    if base is None:
        return None
    single = _by_name(runs, SINGLE.name)
    equal, same = step0(base, single)
    unsynced = unsynced_ranks(base)
    return Evidence(world_size=base.world_size, own_rows=own_rows(base, single),
                    reduced=reduced(base),
                    unsynced=tuple(unsynced) if unsynced is not None else None,
                    step0_equal=equal, step0_single=same,
                    base_manifest=base_manifest(base),
                    first_difference=first_difference(base, single) if single else None)

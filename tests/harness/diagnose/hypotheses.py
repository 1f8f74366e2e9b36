"""Each cause the suite can name from evidence beyond the violations' pattern is a hypothesis:
a signature (the evidence that must hold) and refuters (evidence that rules it out). A hint
is said only where its signature holds and no refuter does (issue 73: a hint that the
suite's own evidence contradicts misleads more than no hint).

The violations' pattern proposes the candidates (diagnosis.py); `judged` keeps those no
refuter rules out. Where none stands, `differs` says what differs, where, and what the
evidence rules out, never why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tests.harness.diagnose.evidence import Evidence
from tests.harness.diagnose.hints import (
    BASE_MANIFEST,
    BROADCAST,
    DIFFERS,
    INIT,
    NOT_REDUCED,
    NOT_REDUCED_CLAUSE,
    PART_REDUCED_CLAUSE,
    ROWS,
)

Test = Callable[[Evidence], bool]


def _always(ev: Evidence) -> bool:
    return True


@dataclass(frozen=True)
class Refuter:
    """Evidence that rules a hypothesis out, and how it is told."""

    said: str
    holds: Test


@dataclass(frozen=True)
class Hypothesis:
    """A cause: its hint, the evidence that must hold, and what rules it out."""

    name: str
    hint: str
    signature: Test = _always  # beyond the violations' pattern that proposes it
    refuters: tuple[Refuter, ...] = ()

    def refuted_by(self, ev: Evidence) -> Refuter | None:
        """The first refuter that holds, if any."""
        return next((r for r in self.refuters if r.holds(ev)), None)

    def stands(self, ev: Evidence) -> bool:
        """Its signature holds and no refuter does."""
        return self.signature(ev) and self.refuted_by(ev) is None


OWN_ROWS = Refuter("every rank computed on its own rows at every step (the observer's row "
                   "checksums against the one-rank run's)", lambda ev: ev.own_rows is True)
REDUCED = Refuter("every gradient element was reduced across the ranks at every step",
                  lambda ev: ev.reduced is True)
SYNCED = Refuter("every rank received P elements by collectives before its first backward",
                 lambda ev: ev.unsynced == ())
NOT_INIT = Refuter("rank 0's step-0 parameter norm is the one-rank run's",
                   lambda ev: ev.step0_single is True)

HYPOTHESES = (
    Hypothesis("rows", ROWS, refuters=(OWN_ROWS,)),
    Hypothesis("broadcast", BROADCAST, refuters=(SYNCED,)),
    # the ranks agree at step 0 and disagree with one rank: they hold one draw, not the seed's
    Hypothesis("init", INIT, signature=lambda ev: ev.step0_equal is True
               and ev.step0_single is False, refuters=(NOT_INIT,)),
    Hypothesis("not_reduced", NOT_REDUCED, refuters=(REDUCED,)),
    # the clauses of a gradient norm told as seen (GRAD_SEEN's list of consistent causes)
    Hypothesis("not_reduced_clause", NOT_REDUCED_CLAUSE, refuters=(REDUCED,)),
    Hypothesis("part_reduced_clause", PART_REDUCED_CLAUSE, refuters=(REDUCED,)),
)
BY_HINT = {h.hint: h for h in HYPOTHESES}
BY_NAME = {h.name: h for h in HYPOTHESES}


def judged(candidates: list[str], ev: Evidence) -> list[str]:
    """The candidates no refuter rules out (a hint no hypothesis covers stands as told)."""
    return [c for c in candidates if c not in BY_HINT or BY_HINT[c].refuted_by(ev) is None]


def confirmed(name: str, ev: Evidence) -> bool:
    """The hypothesis `name` stands on the evidence (its signature holds, no refuter)."""
    return BY_NAME[name].stands(ev)


def facts(ev: Evidence) -> list[str]:
    """What the evidence shows of the ranks' start, rows and reductions, true as told."""
    out = []
    if ev.step0_equal is not None:
        start = "equal across ranks" if ev.step0_equal else "not equal across ranks"
        if ev.step0_single is not None:
            start += " and " + ("the one-rank run's" if ev.step0_single
                                else "not the one-rank run's")
        out.append(f"step 0's parameter norms are {start}")
    out += [r.said for r in (SYNCED, OWN_ROWS, REDUCED) if r.holds(ev)]
    return out


def differs(ev: Evidence, quantity: str, step: int, found: object, want: object) -> str:
    """Where no cause stands: the first quantity and step where the runs part, and what the
    evidence shows (never a cause)."""
    line = DIFFERS.format(n=ev.world_size, step=step, quantity=quantity.replace("_", " "),
                          found=found, want=want)
    shown = facts(ev)
    return line + ("; " + "; ".join(shown) if shown else "")


def base_first(ev: Evidence | None) -> list[str]:
    """What every run shows, told first as the base run's (a run with no fault): its
    checkpoints that disagree with their manifests."""
    if ev is None or not ev.base_manifest:
        return []
    where = ", ".join(f"step {s}" + (f" rank {r}" if r is not None else "")
                      for s, r in ev.base_manifest[:4])
    more = len(ev.base_manifest) - 4
    return [BASE_MANIFEST.format(where=where + (f" and {more} more" if more > 0 else ""))]

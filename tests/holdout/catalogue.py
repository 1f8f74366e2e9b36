"""The hold-out mistakes (tests/holdout/*.py), written apart from the hints: for each, what
its feedback must tell first (a phrase of the right cause), and the names of other mistakes
it must never be told. Graded as submissions (tests/test_holdout.py, the grades tier)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Holdout:
    """One mistake as a program: its file, what the first cause told must say (right), and
    phrases of other mistakes' hints it must not say anywhere (wrong)."""

    name: str
    right: str
    wrong: tuple[str, ...] = ()

    @property
    def program(self) -> Path:
        return HERE / f"{self.name}.py"


HOLDOUTS = (
    Holdout("only_rank0_logs", "wrote no metrics file",
            ("rolled back differently", "the guard decided")),
    Holdout("divided_twice", "divided by N twice",
            ("one rank's shard only", "summed, not averaged")),
    Holdout("no_broadcast_norms_copied", "initial broadcast is missing",
            ("the ranks train on the wrong rows",)),
)

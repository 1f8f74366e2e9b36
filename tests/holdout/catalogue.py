"""The hold-out mistakes (tests/holdout/*.py), written apart from the hints: for each, what the
first cause its feedback tells must say to be right (a phrase of its own cause), the phrases
that are generic and true of it (a class of causes it belongs to), and other mistakes' names
it must never be told. Graded as submissions (tests/test_holdout.py in the grades tier;
bench/holdout.py writes the table into docs/figures/holdout.json)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent

RIGHT, GENERIC, WRONG, UNCLASSIFIED, NOT_CAUGHT = (
    "right", "generic and true", "wrong", "unclassified", "not caught")
# Other mistakes' names that no hold-out of another kind may be told first
DATA = ("the ranks train on the wrong rows", "initial broadcast is missing")
GRADIENT = ("one rank's shard only", "summed, not averaged", "divided by N twice",
            "not reduced across ranks")
GUARD = ("rolled back differently", "the guard never fired", "read the --inject flag")


@dataclass(frozen=True)
class Holdout:
    """One mistake as a program: its file, the phrase of its own cause (right), phrases of a
    class of causes that are true of it (generic), and other mistakes' names (wrong)."""

    name: str
    right: str
    generic: tuple[str, ...] = ()
    wrong: tuple[str, ...] = ()

    @property
    def program(self) -> Path:
        return HERE / f"{self.name}.py"

    def verdict(self, score: float, first: str) -> str:
        """How the feedback's first cause tells this mistake."""
        if score >= 100:
            return NOT_CAUGHT
        if self.right in first:
            return RIGHT
        if any(w in first for w in self.wrong):
            return WRONG
        if any(g in first for g in self.generic):
            return GENERIC
        return UNCLASSIFIED


UPDATE = "the update is wrong, not the data"
HOLDOUTS = (
    Holdout("only_rank0_logs", "wrote no metrics file", wrong=GUARD + DATA),
    Holdout("divided_twice", "divided by N twice",
            wrong=("one rank's shard only", "summed, not averaged", *DATA)),
    Holdout("no_broadcast_norms_copied", "initial broadcast is missing",
            wrong=("the ranks train on the wrong rows", *GRADIENT)),
    Holdout("loss_summed", "the sum over the ranks, not their mean",
            generic=("the logged loss is not",), wrong=DATA + GRADIENT),
    Holdout("lr_scaled_by_n", "learning rate", generic=(UPDATE,), wrong=DATA + GRADIENT),
    Holdout("rotated_chunks", "chunk", generic=(UPDATE, "a wrong update"),
            wrong=(*DATA, "summed, not averaged", "divided by N twice")),
    Holdout("no_bias_correction", "bias correction", generic=(UPDATE, "a wrong update"),
            wrong=DATA + GRADIENT),
    Holdout("resume_next_shard", "another order",
            generic=("loading them is incomplete",), wrong=DATA + GRADIENT),
)

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
    gap: str = ""  # why the suite does not catch it yet (its test is a strict xfail)
    signature: bool = False  # told by a hint checked on its signature: must be right

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


# The seeds every hold-out is graded under (its test and bench/holdout.py): the same data,
# parameters and faults in every session, so that a verdict is the mistake's, never a draw's
# (a real grading draws both afresh)
SUITE_SEED = FAULT_SEED = 0
UPDATE = "the update is wrong, not the data"
OPTIMIZER = "the optimizer does not step after the resume as it did before"
HOLDOUTS = (
    Holdout("only_rank0_logs", "wrote no metrics file", wrong=GUARD + DATA, signature=True),
    Holdout("divided_twice", "divided by N twice",
            wrong=("one rank's shard only", "summed, not averaged", *DATA), signature=True),
    Holdout("no_broadcast_norms_copied", "initial broadcast is missing",
            wrong=("the ranks train on the wrong rows", *GRADIENT), signature=True),
    Holdout("loss_summed", "the sum over the ranks, not their mean",
            generic=("the logged loss is not",), wrong=DATA + GRADIENT, signature=True),
    Holdout("lr_scaled_by_n", "learning rate", generic=(UPDATE,), wrong=DATA + GRADIENT),
    Holdout("rotated_chunks", "chunk", generic=(UPDATE, "a wrong update"),
            wrong=(*DATA, "summed, not averaged", "divided by N twice")),
    # the one-rank run makes the same mistake: told by Adam fitted outside the program
    # (adam_checks.py), at every seed, where parity's drift catches it at some
    Holdout("no_bias_correction", "bias correction", generic=(UPDATE, "a wrong update"),
            wrong=DATA + GRADIENT, signature=True),
    Holdout("resume_next_shard", "another order",
            generic=("loading them is incomplete",), wrong=DATA + GRADIENT),
    Holdout("resume_one_step_late", "one step late",  # told what was seen: the missing step
            generic=("expected a record in the resumed run",), wrong=DATA + GRADIENT),
    Holdout("moments_zeroed_on_resume", "Adam's moments are not saved or not restored",
            generic=(OPTIMIZER,), wrong=DATA + GRADIENT, signature=True),
    Holdout("lr_halved_on_resume", "the learning rate is not restored",
            generic=(OPTIMIZER,), wrong=(*DATA, *GRADIENT, "Adam's moments are not",
                                        "Adam's step count is not")),
    Holdout("betas_swapped", "betas are swapped", generic=(UPDATE, "a wrong update"),
            wrong=(*DATA, *GRADIENT, "bias correction"), signature=True),
    Holdout("gather_before_update", "all-gather runs before the shard's update",
            generic=("the checkpoint does not hold the parameters the model ran with",),
            wrong=(*DATA, *GRADIENT, "save after the update"), signature=True),
    Holdout("local_loss_logged", "loss of its own batch",
            generic=("the logged loss is not",), wrong=DATA + GRADIENT + GUARD),
    # issue 73: the ranks synced, on their own rows, but from rank N-1's draw (was told the rows)
    Holdout("broadcast_from_last_rank", "not the ones the one-rank run draws",
            wrong=(*DATA, *GRADIENT), signature=True),
    Holdout("skip_instead_of_rollback", "did not roll back",
            generic=("rollback",), wrong=DATA + GRADIENT),
)

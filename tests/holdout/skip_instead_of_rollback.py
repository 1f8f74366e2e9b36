"""Hold-out mistake: the guard sees the bad step and skips its update, but rolls nothing
back: the parameters a bad step already changed (a loss spike's update) are kept, and the
run goes on from where it was. Everything else is the reference's."""

import sys

from capstone import trainer
from capstone.cli import exit_now, main


def skipped(self: trainer.Trainer, step: int, reason: str) -> int:
    self.metrics.rollback(step, step - 1, reason)  # said, as the reference says it
    return step + 1


trainer.Trainer._rollback = skipped  # type: ignore[method-assign]
exit_now(main(sys.argv[1:]))

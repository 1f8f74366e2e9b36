"""Hold-out mistake: the resumed run starts one step late (it takes the checkpoint's step as
the last one run and adds one more: an off-by-one in the step it resumes at), so it never
runs the step after the checkpoint and logs nothing for it. Everything else is the
reference's."""

import sys

from capstone import trainer
from capstone.cli import exit_now, main

started = trainer.Trainer._start


def one_late(self: trainer.Trainer) -> int:
    step = started(self)
    return step + 1 if self.cfg.resume is not None else step


trainer.Trainer._start = one_late  # type: ignore[method-assign]
exit_now(main(sys.argv[1:]))

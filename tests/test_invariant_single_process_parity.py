"""Invariant 6: 4 ranks x 4 rows and 1 rank x 16 rows see the same global batch, so they
agree at every step: loss within 1e-5 and gradient norm within 1e-4 (relative). And the
update they agree on is Adam's, measured outside the program (the one-rank run makes the
same mistakes): the updates the observer samples are fitted by Adam's rule
(tests/harness/check/adam_checks.py)."""

import pytest

from tests.harness.check.adam_checks import check_adam
from tests.harness.check.checks import check_parity
from tests.harness.run.runs import BASE, SINGLE


@pytest.mark.reads(BASE, SINGLE)
def test_four_ranks_match_one_rank(run, holds):
    holds(check_parity(run(BASE), run(SINGLE)) + check_adam(run(BASE)),
          "4-rank vs 1-rank trajectory")

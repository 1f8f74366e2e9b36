"""`python tests/mutants/launch.py MUTANT [contract flags]`: the reference with one patch.

Ranks are forked from this process, so the patch reaches every rank.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.mutants.catalogue import MUTANTS


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in MUTANTS:
        print(f"usage: launch.py MUTANT [flags]; MUTANT one of {', '.join(MUTANTS)}",
              file=sys.stderr)
        return 2
    mutant = MUTANTS[sys.argv[1]]
    mutant.patch()
    from capstone.cli import main as capstone_main

    return (mutant.main or capstone_main)([*sys.argv[2:], *mutant.extra_flags])


if __name__ == "__main__":
    from capstone.cli import exit_now

    exit_now(main())  # as `python -m capstone` ends: no interpreter teardown

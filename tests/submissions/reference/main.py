"""A student's submission that is the reference: `python3 main.py --out DIR ...`."""

import sys

from capstone.cli import exit_now, main

exit_now(main(sys.argv[1:]))

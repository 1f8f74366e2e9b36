"""Trains correctly, out of the observer's sight: it runs the reference in an interpreter
started with -I (isolated: PYTHONPATH, and with it the suite's sitecustomize, ignored), so the
ranks' processes, collectives and memory are never seen. The suite can neither credit nor
charge what the ranks did: those checks are not graded, never a charge or an accusation, and
never 100."""

import os
import sys

os.execv(sys.executable, [sys.executable, "-I", "-m", "capstone", *sys.argv[1:]])

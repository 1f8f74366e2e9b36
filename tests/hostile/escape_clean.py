"""A helper that leaves the run for good: double fork, a new session, and an exec with an empty
environment (no marker of the suite's to find it by). Only a PID namespace ends it."""

import os
import sys

from _common import out_dir

out_dir()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execve("/bin/sleep", ["sleep", "3599.25"], {})
    os._exit(0)
sys.exit(0)

"""Ends while a helper of its own is still exiting, as multiprocessing's resource tracker may
be on a busy machine or in half a CPU: the helper leaves 1.5 s after the exit-0 parent. It is
no survivor: the run must not be charged for it."""

import os
import sys
import time

from _common import out_dir

out_dir()
if os.fork() == 0:
    time.sleep(1.5)
    os._exit(0)
sys.exit(0)

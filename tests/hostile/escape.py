"""Leaves its process group: a double-forked, setsid'd child outlives the exit-0 parent."""

import os
import sys
import time

from _common import out_dir

out_dir()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(3600)
    os._exit(0)
sys.exit(0)
